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

git's option tables are in `git_options`, the exclusion pathspecs in `git_exclusions` (both
imported from here too).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from soong_agent.domain.permissions.git_exclusions import exclusions, missing_exclusions
from soong_agent.domain.permissions.git_options import (
    CONFIG_FILES,
    CONFIG_READERS,
    CONFIG_SETTERS,
    CONFIG_VALUES,
    GREP_NAMES_ONLY,
    HEX,
    LITERAL_PATHSPECS,
    LOG_VALUES,
    NEVER_BOUNDED,
    NO_PATCH,
    NO_PATCH_PREFIXES,
    OBJECT_READERS,
    PATCH,
    PATCH_PREFIXES,
    PEELED,
    VALUE_OPTIONS,
    git_subcommand,
    is_git,
)


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
        found = HEX.match(part)
        if found is not None and not PEELED.match(found.group(2)):
            return True
    return False


def _patch_output(options: Iterable[str], *, default: bool) -> bool:
    chosen = list(options)
    if any(o in PATCH or o.startswith(PATCH_PREFIXES) for o in chosen):
        return True
    if any(o in NO_PATCH or o.startswith(NO_PATCH_PREFIXES) for o in chosen):
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
    literal_specs = any(option in LITERAL_PATHSPECS for option in head)
    aliasing = any(
        value.lower().startswith("alias.")
        for option, value in itertools.pairwise(head)
        if option in ("-c", "--config-env")
    ) or any(option.lower().startswith("--config-env=alias.") for option in head)
    if sub is None:
        return GitRead(None, directory)
    if aliasing:
        return GitRead(sub, directory, refusal="git -c alias.… defines what git runs")
    if sub in NEVER_BOUNDED:
        return GitRead(sub, directory, refusal=NEVER_BOUNDED[sub])
    args = words[index + 1 :]
    if sub == "config":
        return GitRead(sub, directory, config_writes=_config_writes(args))
    if sub not in OBJECT_READERS and sub not in ("blame", "annotate", "stash"):
        return GitRead(sub, directory)
    return _object_reader(sub, args, directory, literal_specs)


def _object_reader(
    sub: str, args: Sequence[str | None], directory: str | None, literal_specs: bool
) -> GitRead:
    split = _split(args, VALUE_OPTIONS.get(sub, LOG_VALUES))
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
        if any(o in GREP_NAMES_ONLY for o in options):
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
    reads = any(w in CONFIG_READERS for w in words) or (bool(words) and words[0] in ("get", "list"))
    split = _split(words, CONFIG_VALUES)
    setter = (
        new_style
        or any(w in CONFIG_SETTERS for w in words)
        or (not reads and len(split.positionals) >= 2)
    )
    if not setter or (reads and not new_style):
        return ()
    for option, target in CONFIG_FILES.items():
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


__all__ = [
    "GitRead",
    "exclusions",
    "git_subcommand",
    "is_git",
    "missing_exclusions",
    "object_path",
    "read_git",
]
