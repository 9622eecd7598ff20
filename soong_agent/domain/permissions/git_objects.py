"""What a git command reads from the repository's objects (SBX-1): a committed `.env` stays secret.

A file committed to the repository lives on as a git object, where no path check reaches it:
``git show HEAD:.env`` prints it, and so do ``git show HEAD``, ``git log -p`` or ``git diff``,
which print every changed file. `read_git` reads one simple command's words and says:

- which paths its object references name (``REV:path``, ``:path``, ``:1:path``, ``-L1,5:path``,
  ``--path=…``): the gate checks each like any path argument, so a sensitive one is refused;
- its pathspecs (after ``--``) and the words before them, which git takes for paths when such
  files exist;
- whether its output could hold any file's content (`unbounded`): a patch, a ``grep`` of the
  tree, an ``archive``. Such a command runs only when its pathspec excludes every sensitive
  pattern (`exclusions` gives the canonical pathspecs, top-anchored so they hold from any
  folder) or names only plain files; the gate refuses it otherwise and says what to add.
  Refusing is deliberate (rather than appending the exclusions behind the user's back): the
  line that runs is the line the user approved and the events record, an appended pathspec
  would be wrong inside pipelines, ``sh -c`` or ``xargs``, and it would not stop an object
  named by its hash anyway;
- `refusal`: what can never be bounded: ``bundle``, ``fast-export``, ``cat-file --batch``,
  ``show``/``grep``/``cat-file -p`` of an object named by its hash (a blob's hash is a file's
  content), a pathspec switched to literal matching, ``-c alias.…``;
- `config_writes`: the file a ``git config`` setter changes (``.git/config`` is protected).

Left to the OS sandbox and documented: a ref the model points at a blob (``git tag t HASH``)
and aliases from the user's own git config are not followed.

Longer than our ~400-line habit on purpose: git's option tables and the reading of each
object-printing subcommand belong together.
"""

from __future__ import annotations

import itertools
import posixpath
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from soong_agent.domain.permissions.sensitive import SensitiveRule
from soong_agent.domain.permissions.targets import is_within, relative_parts

_GLOBAL_VALUE_OPTIONS = frozenset(
    {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--config-env"}
)
_LITERAL_PATHSPECS = frozenset({"--literal-pathspecs", "--noglob-pathspecs"})
_HEX = re.compile(r"^([0-9a-fA-F]{4,64})(.*)$")
# Suffixes that make git take an object as a commit or tree, never a blob.
_PEELED = re.compile(r"^(\^\{(commit|tree)\}|([~^][0-9]*)+|\^[!@]|\^-[0-9]*)$")

# Diff-family options that print file contents, and those that print only names or counts.
_PATCH = frozenset(
    {
        *("-p", "-u", "--patch", "--patch-with-stat", "--patch-with-raw", "--cc", "-c"),
        *("--combined-all-paths", "--word-diff", "--color-words", "--binary", "--text", "-a"),
        *("--ext-diff", "--textconv", "--function-context", "-W", "--full-diff"),
    }
)
_PATCH_PREFIXES = ("--word-diff=", "--color-words=", "-U", "--unified=", "--inter-hunk-context=")
_NO_PATCH = frozenset(
    {
        *("-s", "--no-patch", "--stat", "--numstat", "--shortstat", "--name-only"),
        *("--name-status", "--raw", "--summary", "--dirstat", "--compact-summary", "--quiet"),
    }
)
_NO_PATCH_PREFIXES = ("--stat=", "--dirstat=", "--stat-width=", "--stat-count=")
# Options whose value is the next word, by subcommand (a flag read as taking a value would hide
# the word after it).
_LOG_VALUES = frozenset(
    {
        *("-n", "--max-count", "--skip", "-G", "-S", "-O", "--author", "--committer", "--grep"),
        *("--since", "--until", "--after", "--before", "-L", "-o", "--output-directory"),
    }
)
_VALUE_OPTIONS: dict[str, frozenset[str]] = {
    "grep": frozenset(
        {
            *("-e", "-f", "-A", "-B", "-C", "--context", "--after-context", "--before-context"),
            *("--max-depth", "--threads", "-m", "--max-count"),
        }
    ),
    "archive": frozenset({"-o", "--output", "--prefix", "--remote", "--exec", "--format"}),
    "blame": frozenset({"-L", "-S", "--contents", "--ignore-rev", "--ignore-revs-file"}),
    "annotate": frozenset({"-L", "-S", "--contents", "--ignore-rev", "--ignore-revs-file"}),
    "cat-file": frozenset(),
    "stash": frozenset(),
    "ls-tree": frozenset(),
    "rev-parse": frozenset(),
}
_GREP_NAMES_ONLY = frozenset(
    {
        *("-l", "-L", "-c", "-q", "--count", "--quiet", "--files-with-matches"),
        *("--files-without-match", "--name-only"),
    }
)
_NEVER_BOUNDED = {
    "bundle": "git bundle packs every object of the history into one file",
    "fast-export": "git fast-export prints every object of the history",
    "pack-objects": "git pack-objects packs objects whatever file they hold",
    "unpack-file": "git unpack-file writes an object's content to a file",
    "upload-pack": "git upload-pack sends every object of the history",
    "upload-archive": "git upload-archive sends a whole tree",
}
_OBJECT_READERS = frozenset(
    {
        *("show", "cat-file", "archive", "diff", "diff-tree", "difftool", "grep", "log"),
        *("whatchanged", "ls-tree", "rev-parse", "format-patch", "reflog", "range-diff"),
    }
)
_CONFIG_SETTERS = frozenset(
    {
        *("--add", "--unset", "--unset-all", "--replace-all", "--rename-section"),
        *("--remove-section", "--edit", "-e"),
    }
)
_CONFIG_READERS = frozenset(
    {
        *("--get", "--get-all", "--get-regexp", "--get-urlmatch", "--list", "-l"),
        *("--get-color", "--get-colorbool"),
    }
)
_CONFIG_VALUES = frozenset({"--file", "-f", "--blob", "--type", "--default", "--comment"})
_CONFIG_FILES = {"--global": "~/.gitconfig", "--system": "/etc/gitconfig"}


@dataclass(frozen=True, slots=True)
class GitRead:
    """What one git command reads from objects and pathspecs (see the module docstring).

    `object_paths` are ``(path, from_cwd)``: a ``REV:path`` path is relative to the top of the
    repository, a ``REV:./path`` one (`from_cwd`) to the folder git runs in. `directory` is
    the ``-C`` folder, `pathspecs` the positive pathspecs (literal ones, magic removed),
    `maybe_paths` the words before ``--`` that git takes for paths when such files exist (or
    revisions), `excludes` the exclusion pathspecs as written, `magic` whether a positive
    pathspec uses magic (``:(glob)*.py``), and `disk_paths` the files or folders ``diff
    --no-index`` compares on disk.
    """

    subcommand: str | None
    directory: str | None = None
    object_paths: tuple[tuple[str, bool], ...] = ()
    pathspecs: tuple[str, ...] = ()
    maybe_paths: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    unbounded: str | None = None
    refusal: str | None = None
    config_writes: tuple[str, ...] = ()
    disk_paths: tuple[str, ...] = ()
    magic: bool = False


def is_git(words: Sequence[str | None]) -> bool:
    """Whether a simple command runs git."""
    return bool(words) and words[0] is not None and posixpath.basename(words[0]) == "git"


def git_subcommand(words: Sequence[str | None]) -> tuple[int, str | None]:
    """(index of the subcommand, its name) after git's global options; the name is None when
    it is not literal or missing."""
    i = 1
    while i < len(words):
        word = words[i]
        if word is None:
            return i, None
        if word in _GLOBAL_VALUE_OPTIONS:
            i += 2
            continue
        if word.startswith("-"):
            i += 1
            continue
        return i, word
    return i, None


@dataclass(slots=True)
class _Args:
    options: list[str] = field(default_factory=list)
    positionals: list[str] = field(default_factory=list)  # before `--`
    after_dash: list[str] = field(default_factory=list)
    values: dict[str, list[str]] = field(default_factory=dict)


def _split(args: Sequence[str | None], value_options: frozenset[str]) -> _Args:
    out = _Args()
    i = 0
    dashed = False
    while i < len(args):
        word = args[i]
        i += 1
        if word is None:
            continue
        if dashed:
            out.after_dash.append(word)
        elif word == "--":
            dashed = True
        elif word.startswith("-") and len(word) > 1:
            out.options.append(word)
            if word in value_options and i < len(args):
                value = args[i]
                i += 1
                if value is not None:
                    out.values.setdefault(word, []).append(value)
        else:
            out.positionals.append(word)
    return out


def object_path(word: str) -> tuple[str, bool] | None:
    """The path a ``REV:path`` / ``:path`` / ``:N:path`` word names, and whether it is relative
    to the current folder (``./``, ``../``); None for a word that names no path (``:/text``
    searches commit messages)."""
    if word.startswith("-"):
        return None
    if word.startswith(":"):
        rest = word[1:]
        if rest.startswith("/") or rest.startswith("("):
            return None  # `:/message` (a commit) or a pathspec with magic
        if len(rest) >= 2 and rest[0] in "0123" and rest[1] == ":":
            rest = rest[2:]
        return _relative(rest)
    depth = 0
    for index, char in enumerate(word):
        if char == "{":
            depth += 1
        elif char == "}":
            depth = max(0, depth - 1)
        elif char == ":" and depth == 0:
            if "://" in word[index:]:
                return None  # a URL, not an object
            return _relative(word[index + 1 :])
    return None


def _relative(path: str) -> tuple[str, bool]:
    from_cwd = path in (".", "..") or path.startswith(("./", "../"))
    return path, from_cwd


def _hex_object(word: str) -> bool:
    """Whether a revision word names an object by its hash (which may be a blob)."""
    if object_path(word) is not None:
        return False
    for part in re.split(r"\.\.\.?", word):
        if "^{blob}" in part or part.endswith("^{}"):
            return True  # peeled to a blob, or a tag peeled to whatever it names
        found = _HEX.match(part)
        if found is not None and not _PEELED.match(found.group(2)):
            return True
    return False


def _patch_output(options: Iterable[str], *, default: bool) -> bool:
    chosen = list(options)
    if any(o in _PATCH or o.startswith(_PATCH_PREFIXES) for o in chosen):
        return True
    if any(o in _NO_PATCH or o.startswith(_NO_PATCH_PREFIXES) for o in chosen):
        return False
    return default


def _pathspec_parts(words: Iterable[str]) -> tuple[list[str], list[str], bool]:
    """(positive literal pathspecs, exclusions as written, whether a positive one has magic)."""
    positive: list[str] = []
    excludes: list[str] = []
    magic = False
    for word in words:
        if word.startswith((":!", ":^")) or (word.startswith(":(") and _is_exclude(word)):
            excludes.append(word)
        elif word.startswith(":(") or (word.startswith(":") and not word.startswith(":/")):
            magic = True
            body = word[word.index(")") + 1 :] if ")" in word else word[1:]
            positive.append(body)
        else:
            positive.append(word)
    return positive, excludes, magic


def _is_exclude(word: str) -> bool:
    close = word.find(")")
    if close == -1:
        return False
    return "exclude" in {m.strip() for m in word[2:close].split(",")}


def read_git(words: Sequence[str | None]) -> GitRead | None:
    """What a git simple command reads (see `GitRead`); None when it is not git."""
    if not is_git(words):
        return None
    index, sub = git_subcommand(words)
    head = [w for w in words[1:index] if w is not None]
    directory = None
    for option, value in itertools.pairwise(head):
        if option == "-C":
            directory = value
    literal_specs = any(option in _LITERAL_PATHSPECS for option in head)
    aliasing = any(
        value.lower().startswith("alias.")
        for option, value in itertools.pairwise(head)
        if option in ("-c", "--config-env")
    ) or any(option.lower().startswith("--config-env=alias.") for option in head)
    if sub is None:
        return GitRead(None, directory)
    if aliasing:
        return GitRead(sub, directory, refusal="git -c alias.… defines what git runs")
    if sub in _NEVER_BOUNDED:
        return GitRead(sub, directory, refusal=_NEVER_BOUNDED[sub])
    args = words[index + 1 :]
    if sub == "config":
        return GitRead(sub, directory, config_writes=_config_writes(args))
    if sub not in _OBJECT_READERS and sub not in ("blame", "annotate", "stash"):
        return GitRead(sub, directory)
    return _object_reader(sub, args, directory, literal_specs)


def _object_reader(
    sub: str, args: Sequence[str | None], directory: str | None, literal_specs: bool
) -> GitRead:
    split = _split(args, _VALUE_OPTIONS.get(sub, _LOG_VALUES))
    if sub == "grep" and not ({"-e", "-f"} & split.values.keys()) and split.positionals:
        split.positionals.pop(0)  # the pattern
    objects: list[tuple[str, bool]] = []
    plain: list[str] = []
    excludes: list[str] = []
    for word in split.positionals:
        found = object_path(word)
        if word.startswith((":!", ":^")) or (word.startswith(":(") and _is_exclude(word)):
            excludes.append(word)
        elif found is None:
            plain.append(word)
        elif found[0]:
            objects.append(found)
    ranges = [*split.values.get("-L", []), *(o for o in split.options if o.startswith("-L"))]
    objects += [_relative(r.rsplit(":", 1)[1]) for r in ranges if ":" in r]
    objects += [_relative(o[len("--path=") :]) for o in split.options if o.startswith("--path=")]
    positive, dashed_excludes, magic = _pathspec_parts(split.after_dash)
    excludes += dashed_excludes
    if literal_specs:
        excludes = []  # `--literal-pathspecs`: `:(exclude)…` is just a name
    refusal, unbounded = _judge(sub, split, plain, bool(objects))
    disk = tuple(plain) if sub == "diff" and "--no-index" in split.options else ()
    return GitRead(
        sub,
        directory,
        object_paths=tuple(objects),
        pathspecs=tuple(positive),
        maybe_paths=tuple(plain),
        excludes=tuple(excludes),
        unbounded=None if disk else unbounded,
        refusal=refusal,
        config_writes=(),
        disk_paths=disk,
        magic=magic,
    )


def _judge(
    sub: str, split: _Args, revisions: Sequence[str], objects: bool
) -> tuple[str | None, str | None]:
    """(refusal, why the output is unbounded) of an object-reading subcommand."""
    options = split.options
    hexes = [word for word in revisions if _hex_object(word)]
    if sub == "cat-file":
        batch = any(o.startswith("--batch") and not o.startswith("--batch-check") for o in options)
        if batch:
            return "git cat-file --batch prints whatever objects it is fed", None
        if hexes and not any(o in ("-t", "-s", "-e") for o in options):
            return _hash_refusal(sub, hexes[0]), None
        return None, None
    if sub in ("show", "grep") and hexes:
        return _hash_refusal(sub, hexes[0]), None
    if sub == "show":
        if objects and not revisions:
            return None, None  # only REV:path objects: each is checked
        patch = _patch_output(options, default=True)
        return None, "git show prints the content of every file a commit changed" if patch else None
    if sub in ("log", "whatchanged", "reflog", "diff-tree", "diff-index", "diff-files"):
        if any(o.startswith("-L") for o in options):
            return None, None  # line history of the named files only
        patch = _patch_output(options, default=False)
        return (
            None,
            f"git {sub} -p prints the content of every file the commits changed" if patch else None,
        )
    if sub in ("diff", "difftool"):
        if objects and not revisions:
            return None, None
        patch = _patch_output(options, default=True)
        return None, "git diff prints the content of every changed file" if patch else None
    if sub in ("format-patch", "range-diff"):
        return None, f"git {sub} writes the content of every file the commits changed"
    if sub == "stash":
        if revisions[:1] == ["show"] and _patch_output(options, default=False):
            return "git stash show -p prints every stashed change and takes no pathspec", None
        return None, None
    if sub == "grep":
        if any(o in _GREP_NAMES_ONLY for o in options):
            return None, None
        return None, "git grep prints the matching lines of every tracked file"
    if sub == "archive":
        if "--list" in options or "-l" in options:
            return None, None
        return None, "git archive packs every file of a tree"
    return None, None


def _hash_refusal(sub: str, word: str) -> str:
    return (
        f"git {sub} {word}: an object named by its hash may be a file's content (a blob of "
        "a sensitive file); name the file as REV:path, or show a commit with "
        f"`git log -1 -p {word} -- <exclusions>` (log takes only commits)"
    )


def _config_writes(args: Sequence[str | None]) -> tuple[str, ...]:
    """The file a ``git config`` command writes, () when it only reads."""
    words = [w for w in args if w is not None]
    if any(w is None for w in args):
        return (".git/config",)  # not literal: count it as a write
    new_style = bool(words) and words[0] in (
        "set",
        "unset",
        "rename-section",
        "remove-section",
        "edit",
    )
    reads = any(w in _CONFIG_READERS for w in words) or (
        bool(words) and words[0] in ("get", "list")
    )
    split = _split(words, _CONFIG_VALUES)
    setter = (
        new_style
        or any(w in _CONFIG_SETTERS for w in words)
        or (not reads and len(split.positionals) >= 2)
    )
    if not setter or (reads and not new_style):
        return ()
    for option, target in _CONFIG_FILES.items():
        if option in words:
            return (target,)
    for option in ("--file", "-f"):
        if option in split.values:
            return tuple(split.values[option])
    for word in words:
        if word.startswith("--file="):
            return (word.partition("=")[2],)
    if "--worktree" in words:
        return (".git/config.worktree",)
    return (".git/config",)


# --- exclusions -----------------------------------------------------------------------------


def exclusions(rules: Sequence[SensitiveRule], project: str) -> tuple[str, ...]:
    """The pathspecs that keep every sensitive file of the project out of a git command's
    output, anchored at the top of the repository (taken to be the project)."""
    out: list[str] = []
    for rule in rules:
        if rule.name_glob is not None:
            name = rule.pattern.strip()
            out += [f":(exclude,top,glob)**/{name}", f":(exclude,top,glob)**/{name}/**"]
            continue
        for prefix in rule.prefixes:
            if is_within(prefix, project) and prefix != project:
                out.append(":(exclude,top,literal)" + "/".join(relative_parts(prefix, project)))
        if not rule.prefixes and rule.paths is not None:  # a path entry with a glob
            absolute = "/" + rule.paths.pattern.removesuffix("/**")
            top = project.rstrip("/") + "/"
            if absolute.startswith(top):
                rel = absolute[len(top) :]
                out += [f":(exclude,top,glob){rel}", f":(exclude,top,glob){rel}/**"]
    return tuple(dict.fromkeys(out))


def _magic(word: str) -> tuple[frozenset[str], str]:
    if word.startswith((":!", ":^")):
        return frozenset({"exclude"}), word[2:]
    close = word.find(")")
    names = frozenset(m.strip() for m in word[2:close].split(","))
    return names, word[close + 1 :]


def missing_exclusions(required: Sequence[str], given: Sequence[str]) -> list[str]:
    """The required exclusion pathspecs that `given` does not hold (magic in any order; a
    literal exclusion of a folder also covers the literal paths below it)."""
    have = [_magic(word) for word in given]
    missing: list[str] = []
    for want in required:
        names, pattern = _magic(want)
        if any(n == names and p == pattern for n, p in have):
            continue
        if "literal" in names and any(
            {"exclude", "top", "literal"} <= n
            and (pattern == p or pattern.startswith(p.rstrip("/") + "/"))
            for n, p in have
        ):
            continue
        missing.append(want)
    return missing
