"""What a command line would touch, held to the file sandbox before it runs (SBX-1, PERM-4).

`review_command` walks the simple commands of an analysed line in order and checks, through the
`FileSystem` port (the sandbox adapter resolves paths, follows symlinks and looks at the disk;
nothing here does I/O):

- every argument that names an existing file or folder, whatever it looks like (``cat
  key.txt`` where ``key.txt`` is a symlink into ``~/.ssh``), and every path-like one (``./x``,
  ``~/x``, ``a/b``) even when nothing exists there yet, with globs expanded;
- input and output redirections, and folders read recursively (``grep -r``, ``tar``);
- what git reads from its objects (`git_objects`): ``REV:path`` is the path it names; a git
  command that would print any file's content (``git show HEAD``, ``git log -p``, ``git diff``,
  ``git archive``) is refused unless its pathspec excludes every sensitive pattern or names
  only plain files, and the refusal gives the pathspec to add;
- ``cd``/``pushd``/``popd``: later words and redirections are judged in every folder the line
  may be in by then (the analysis does not say which commands run in a subshell, so a folder
  once entered stays a candidate, and so does the one before), and a ``cd`` out of the project
  is refused like any read there;
- protected paths (`ProtectedPaths`): output redirections, the files a ``git config`` setter
  writes, and the arguments of every command not known to only read (``cp``, ``sed -i``, an
  interpreter …), after resolving symlinks; a hard-linked file among those arguments counts
  too, since another of its names may be protected. These make the call ask, not fail.

A problem refuses the call; `protected` and `doubts` make the gate ask (outside bypass mode).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field

from soong_agent.domain.permissions.git_objects import (
    GitRead,
    exclusions,
    is_git,
    missing_exclusions,
    read_git,
)
from soong_agent.domain.permissions.protected import ProtectedPaths, protected_reason
from soong_agent.domain.permissions.sensitive import SensitivePaths
from soong_agent.domain.permissions.shell import (
    HARMLESS_WRITE_TARGETS,
    argument_words,
    directory_change,
    only_reads,
    path_arguments,
    path_like,
    reaches_proc,
    recursive_folders,
)
from soong_agent.domain.permissions.targets import GLOB_CHARS
from soong_agent.ports.errors import SandboxViolation, ToolInputError
from soong_agent.ports.filesystem import FileSystem, PathFacts
from soong_agent.ports.shell import ShellAnalysis, SimpleCommand

EXPAND_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class CommandReview:
    """The sandbox's view of one command line.

    `problem`: why it is refused (None: it is not). `protected`: the protected paths it would
    write, as reasons. `doubts`: what could not be checked (a ``cd`` to a folder that is not
    literal). Both of the latter make the gate ask in every mode but bypass.
    """

    problem: str | None = None
    protected: tuple[str, ...] = ()
    doubts: tuple[str, ...] = ()


def sandbox_problem(analysis: ShellAnalysis, fs: FileSystem, line: str = "") -> str | None:
    """Why a command line breaks the path policy, or None (see `review_command`)."""
    return review_command(analysis, fs, line).problem


def review_command(
    analysis: ShellAnalysis,
    fs: FileSystem,
    line: str = "",
    *,
    protected: ProtectedPaths | None = None,
) -> CommandReview:
    """What the sandbox says about a command line (see the module docstring)."""
    if reaches_proc(line):
        return CommandReview(
            "commands may not reach /proc (it exposes the environment of running processes)"
        )
    review = _Review(fs, protected, dotglob=_may_glob_dotfiles(analysis, line))
    for command in analysis.commands:
        problem = review.command(command)
        if problem is not None:
            return CommandReview(problem)
    return CommandReview(
        None, tuple(dict.fromkeys(review.protected)), tuple(dict.fromkeys(review.doubts))
    )


def _may_glob_dotfiles(analysis: ShellAnalysis, line: str) -> bool:
    """Whether ``*`` may match names starting with a dot in this line (``shopt -s dotglob``,
    ``GLOBIGNORE``, ``bash -O dotglob``), or the line is not fully understood."""
    marks = ("dotglob", "GLOBIGNORE", "shopt")
    texts = [line, *(w for c in analysis.commands for w in c.words if w is not None)]
    return not analysis.ok or any(mark in text for text in texts for mark in marks)


def _read_problem(fs: FileSystem, word: str) -> str | None:
    for candidate in fs.expand_shell_word(word, limit=EXPAND_LIMIT):  # globs: what bash names
        problem = _check_read(fs, candidate)
        if problem is not None:
            return problem
    return None


def _check_read(fs: FileSystem, path: str) -> str | None:
    try:
        fs.check_read(path)
    except SandboxViolation as exc:
        return str(exc)
    except (OSError, ValueError, ToolInputError):
        pass  # a path that does not exist is not a leak
    return None


def _write_problem(fs: FileSystem, target: str) -> str | None:
    if target in HARMLESS_WRITE_TARGETS:
        return None
    try:
        fs.check_write(target)
    except SandboxViolation as exc:
        return str(exc)
    except (OSError, ValueError, ToolInputError):
        pass
    return None


@dataclass(slots=True)
class _Review:
    fs: FileSystem
    protected_paths: ProtectedPaths | None
    dotglob: bool = True
    bases: list[str] = field(default_factory=list)
    protected: list[str] = field(default_factory=list)
    doubts: list[str] = field(default_factory=list)
    _exclusions: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        self.bases = [self.fs.root]

    # --- paths ---------------------------------------------------------------------------

    def place(self, word: str, base: str) -> str:
        """`word` as the sandbox should see it when the shell is in `base`."""
        if word.startswith(("/", "~")) or base == self.fs.root:
            return word
        return posixpath.join(base, word)

    def exists(self, path: str) -> bool:
        facts = self.facts(path)
        return facts is not None and facts.exists

    def shell_words(self, word: str, base: str) -> list[str]:
        """The paths bash makes of a non-path-like argument in `base` that exist (a glob
        skips dot-files, as bash does, unless the line may turn on dotglob)."""
        placed = self.place(word, base)
        if not GLOB_CHARS & set(word):
            return [placed] if self.exists(placed) else []
        found = self.fs.expand_shell_word(placed, limit=EXPAND_LIMIT)
        if self.dotglob or word.startswith("."):
            return found
        return [path for path in found if not posixpath.basename(path).startswith(".")]

    # --- one simple command --------------------------------------------------------------

    def command(self, command: SimpleCommand) -> str | None:
        words = command.words
        bases = list(self.bases)
        for problem in (
            self.reads(command, bases),
            self.writes(command.writes_to, bases),
            self.recursive(words, bases),
        ):
            if problem is not None:
                return problem
        git = read_git(words)
        if git is not None:
            problem = self.git(git, bases)
            if problem is not None:
                return problem
        if not only_reads(words):
            self.note_protected_arguments(words, bases)
        return self.directory(words, bases)

    def reads(self, command: SimpleCommand, bases: Sequence[str]) -> str | None:
        words = command.words
        pathspec = is_git(words)  # git's `:(exclude)…`, `HEAD:path`: read in `git()`
        arguments = [w for w in argument_words(words) if not (pathspec and w.startswith(":"))]
        literal = [w for w in path_arguments(words) if w in arguments]
        literal += [s for s in command.reads_from if s != "?"]
        others = [w for w in arguments if path_like(w) is None]
        for base in bases:
            for word in literal:
                problem = _read_problem(self.fs, self.place(word, base))
                if problem is not None:
                    return problem
            for word in others:
                for path in self.shell_words(word, base):
                    problem = _check_read(self.fs, path)
                    if problem is not None:
                        return problem
        return None

    def writes(self, targets: Sequence[str], bases: Sequence[str]) -> str | None:
        for target in targets:
            if target in HARMLESS_WRITE_TARGETS:
                continue
            for base in bases:
                placed = self.place(target, base)
                problem = _write_problem(self.fs, placed)
                if problem is not None:
                    return problem
                self.note_protected(placed, target)
        return None

    def recursive(self, words: tuple[str | None, ...], bases: Sequence[str]) -> str | None:
        for folder in recursive_folders(words):
            for base in bases:
                found = self.fs.sensitive_below(self.place(folder, base))
                if found is not None:
                    return (
                        f"{words[0]} would read {folder} recursively, which holds the sensitive "
                        f"{found}; search with the grep/glob tools, which skip sensitive files"
                    )
        return None

    def directory(self, words: tuple[str | None, ...], bases: Sequence[str]) -> str | None:
        change = directory_change(words)
        if change is None:
            return None
        if change.unknown:
            self.doubts.append(
                f"{words[0]} changes to a folder that is not literal, so the paths after it "
                "cannot be checked"
            )
            return None
        if change.target is None:
            return None  # back to a folder the line was in: already a candidate
        for base in bases:
            placed = self.fs.home if change.target == "~" else self.place(change.target, base)
            try:
                self.fs.check_read(placed)
                facts = self.fs.path_facts(placed)
            except SandboxViolation as exc:
                return f"{words[0]} {change.target}: {exc}"
            except (OSError, ValueError, ToolInputError):
                continue
            for form in (facts.lexical, facts.resolved):
                if form not in self.bases:
                    self.bases.append(form)
        return None

    # --- protected paths -----------------------------------------------------------------

    def note_protected(self, path: str, shown: str) -> None:
        facts = self.facts(path)
        if not self.protected_paths or facts is None:
            return
        entry = self.protected_paths.entry_for(facts.lexical, facts.resolved)
        if entry is not None:
            self.protected.append(protected_reason(self.fs.display_path(facts.lexical), entry))
        elif facts.exists and not facts.is_dir and facts.links > 1:
            self.protected.append(
                f"{shown} has {facts.links} hard links; another of its names may be a "
                "protected path"
            )

    def note_protected_arguments(self, words: tuple[str | None, ...], bases: Sequence[str]) -> None:
        if not self.protected_paths:
            return
        for word in argument_words(words):
            for base in bases:
                candidates = [self.place(word, base)]
                if GLOB_CHARS & set(word):
                    candidates = self.fs.expand_shell_word(candidates[0], limit=EXPAND_LIMIT)
                for path in candidates:
                    self.note_protected(path, word)

    # --- git -----------------------------------------------------------------------------

    def git(self, git: GitRead, bases: Sequence[str]) -> str | None:
        if git.refusal is not None:
            return git.refusal
        where = bases
        if git.directory is not None:
            where = [self.place(git.directory, base) for base in bases]
        for path, from_cwd in git.object_paths:
            for base in where if from_cwd else [self.fs.root]:
                problem = _check_read(self.fs, self.place(path, base) if from_cwd else path)
                if problem is not None:
                    return f"git reads the object {path!r}: {problem}"
        for word in (*git.pathspecs, *git.maybe_paths):
            for base in where:
                problem = _check_read(self.fs, self.place(word, base))
                if problem is not None:
                    return problem
        for folder in git.disk_paths:
            for base in where:
                found = self.fs.sensitive_below(self.place(folder, base))
                if found is not None:
                    return f"git diff --no-index would read {folder}, which holds {found}"
        problem = self.writes(git.config_writes, where)
        if problem is not None:
            return problem
        if git.unbounded is not None:
            return self.unbounded(git, where)
        return None

    def required_exclusions(self) -> tuple[str, ...]:
        if self._exclusions is None:
            patterns = self.fs.sensitive_patterns
            rules = SensitivePaths(patterns, project=self.fs.root, home=self.fs.home).rules
            self._exclusions = exclusions(rules, self.fs.root)
        return self._exclusions

    def unbounded(self, git: GitRead, bases: Sequence[str]) -> str | None:
        """None when the git command's output is bounded after all, else the refusal."""
        required = self.required_exclusions()
        missing = missing_exclusions(required, git.excludes)
        if not missing or self.only_files(git, bases):
            return None
        suffix = " ".join(f"'{spec}'" for spec in missing)
        dash = "" if git.pathspecs or git.excludes else "-- "
        return (
            f"{git.unbounded}, sensitive ones included (tools.sensitive_paths: "
            f"{', '.join(self.fs.sensitive_patterns)}); name the files, or end the command with "
            f"{dash}{suffix}"
        )

    def only_files(self, git: GitRead, bases: Sequence[str]) -> bool:
        """Whether the command's paths name only existing plain files (so the output is
        theirs alone): every pathspec is a file, and no word before ``--`` is a folder."""
        if git.magic:
            return False
        files = 0
        for word in (*git.pathspecs, *git.maybe_paths):
            facts = [self.facts(self.place(word, base)) for base in bases]
            if any(f is None or f.is_dir for f in facts):
                return False
            if any(f is not None and f.exists for f in facts):
                files += 1
            elif word in git.pathspecs:
                return False  # gone from the disk: it may have been a folder
        return files > 0

    def facts(self, path: str) -> PathFacts | None:
        try:
            return self.fs.path_facts(path)
        except (OSError, ValueError, ToolInputError):
            return None
