"""Command lines as the policy reads them: a fallback split, and which words are paths.

`fallback_analysis` serves deny rules when no `ShellAnalyzer` looked at a line. The rest says,
from the words alone, what a command would read: path-like arguments, every other argument
(which names a file when one exists by that name), folders read recursively (``grep -r``,
``tar``, ``rg``), references to ``/proc``, where ``cd``/``pushd``/``popd`` move, and which
commands only read (the others may write what they name). The file sandbox then checks those
paths (`application.command_review`); nothing here touches a disk.
"""

from __future__ import annotations

import itertools
import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from soong_agent.domain.permissions.git_options import git_subcommand
from soong_agent.ports.shell import ShellAnalysis, SimpleCommand

_SHELL_OPERATORS = frozenset({"&&", "||", ";", "|", "&", ";;", "|&", "(", ")", "\n"})
_PROC = re.compile(r"(?:^|[\s=:(<>|;&`$])/+proc(?:/|\s|$)")
_ALWAYS_RECURSIVE = frozenset({"rg", "ag", "ack", "tar", "zip", "7z", "bsdtar"})
_RECURSIVE_WITH_FLAG = {
    "grep": ("-r", "-R", "--recursive", "--dereference-recursive", "--directories=recurse"),
    "egrep": ("-r", "-R", "--recursive"),
    "fgrep": ("-r", "-R", "--recursive"),
    "cp": ("-r", "-R", "-a", "--recursive", "--archive"),
    "rsync": ("-r", "-a", "--recursive", "--archive"),
    "scp": ("-r",),
    "find": ("-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprintf"),
}
# Redirection targets that are not files a command could leak into or clobber.
HARMLESS_WRITE_TARGETS = frozenset({"?", "/dev/null", "/dev/stdout", "/dev/stderr"})


def fallback_analysis(command_line: str) -> ShellAnalysis:
    """A rough split of a command line when no `ShellAnalyzer` looked at it.

    It only serves deny rules (``rm`` after ``&&`` is still seen); it is never `ok`, so
    ``prefix:`` allow rules and grants do not allow the line.
    """
    problem = "the command line was not analysed by a shell parser"
    try:
        lexer = shlex.shlex(command_line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError as exc:
        return ShellAnalysis((), ok=False, problems=(problem, str(exc)))
    commands: list[SimpleCommand] = []
    current: list[str | None] = []
    for token in tokens:
        if token in _SHELL_OPERATORS or set(token) <= set("&|;()<>"):
            if current:
                commands.append(SimpleCommand(tuple(current)))
            current = []
            continue
        current.append(token)
    if current:
        commands.append(SimpleCommand(tuple(current)))
    return ShellAnalysis(tuple(commands), ok=False, problems=(problem,))


def show_command(command: SimpleCommand) -> str:
    """A simple command as text for reasons (non-literal words shown as ``…``)."""
    return " ".join("…" if word is None else shlex.quote(word) for word in command.words)


def reaches_proc(line: str) -> bool:
    """Whether a command line names ``/proc`` (quotes and backslashes ignored)."""
    return _PROC.search(line.replace('"', "").replace("'", "").replace("\\", "")) is not None


def path_like(word: str) -> str | None:
    """The path an argument names (``--out=dir/x`` names ``dir/x``), or None."""
    if word.startswith("-"):
        _, eq, value = word.partition("=")
        return path_like(value) if eq and value else None
    if "/" in word or word.startswith((".", "~")):
        return word
    return None


def argument_words(words: Sequence[str | None]) -> list[str]:
    """Every literal argument of one simple command that could name a file (its name left
    out): the words that are not options, and the values of ``--option=value`` words."""
    found: list[str] = []
    for word in words[1:]:
        if not word:
            continue
        if word.startswith("-"):
            _, eq, value = word.partition("=")
            if eq and value:
                found.append(value)
            continue
        found.append(word)
    return found


def path_arguments(words: Sequence[str | None]) -> list[str]:
    """The literal, path-like arguments of one simple command (its name left out)."""
    found: list[str] = []
    for word in words[1:]:
        path = path_like(word) if word else None
        if path is not None:
            found.append(path)
    return found


def reads_recursively(words: Sequence[str | None]) -> bool:
    """Whether the command reads whole folders (``grep -r``, ``cp -a``, ``tar``, ``find -exec``)."""
    name = posixpath.basename(words[0] or "") if words else ""
    if name in _ALWAYS_RECURSIVE:
        return True
    flags = _RECURSIVE_WITH_FLAG.get(name)
    if flags is None:
        return False
    if name == "find" and any(w == "-maxdepth" and n == "0" for w, n in itertools.pairwise(words)):
        return False  # only the start points themselves, which are checked as arguments
    for word in words[1:]:
        if word is None:
            continue
        if word in flags:
            return True
        short = word.startswith("-") and not word.startswith("--") and name != "find"
        if short and any(f"-{letter}" in flags for letter in word[1:]):
            return True
    return False


def recursive_folders(words: Sequence[str | None]) -> list[str]:
    """The folders a recursive reader would walk (``.`` when none is named); [] if it is not one."""
    if not reads_recursively(words):
        return []
    folders = [word for word in words[1:] if word and not word.startswith("-")]
    return folders or ["."]


# --- where a command line runs --------------------------------------------------------------

_DIRECTORY_COMMANDS = frozenset({"cd", "pushd", "popd", "chdir"})
_CD_FLAGS = frozenset({"-L", "-P", "-e", "-@", "-n", "-LP", "-PL", "-Pe", "-eP"})


@dataclass(frozen=True, slots=True)
class DirectoryChange:
    """Where a ``cd``/``pushd``/``popd`` goes.

    `target` is the literal folder (``~`` for the home), None when the command only goes back
    to a folder the line was already in (``popd``, ``cd -``, ``pushd +1``). `unknown` says the
    folder is not literal (``cd "$D"``), so what follows cannot be placed.
    """

    target: str | None = None
    unknown: bool = False


def directory_change(words: Sequence[str | None]) -> DirectoryChange | None:
    """The folder change a simple command makes, or None when it is not ``cd`` & co."""
    if not words or words[0] is None or posixpath.basename(words[0]) not in _DIRECTORY_COMMANDS:
        return None
    name = posixpath.basename(words[0])
    args = list(words[1:])
    while args and args[0] is not None and args[0] in _CD_FLAGS:
        args.pop(0)
    if args and args[0] == "--":
        args.pop(0)
    if not args:
        return DirectoryChange(None if name in ("popd", "pushd") else "~")
    first = args[0]
    if first is None:
        return DirectoryChange(unknown=True)
    if name == "popd" or first == "-" or (first[:1] in "+-" and first[1:].isdigit()):
        return DirectoryChange()
    return DirectoryChange(first)


# --- commands that only read ----------------------------------------------------------------

_READERS = frozenset(
    {
        *("cat", "tac", "less", "more", "head", "tail", "ls", "dir", "tree", "du", "wc"),
        *("grep", "egrep", "fgrep", "rg", "ag", "ack", "file", "stat", "diff", "cmp"),
        *("md5sum", "sha1sum", "sha256sum", "sha512sum", "b2sum", "cksum", "od", "hexdump"),
        *("strings", "nl", "echo", "printf", "test", "[", "realpath", "readlink", "basename"),
        *("dirname", "pwd", "which", "type", "jq", "column", "cut", "tr", "fold", "expand"),
        *("cd", "pushd", "popd", "true", "false", "ldd", "sha224sum", "sha384sum", "zcat"),
    }
)
_FIND_WRITES = frozenset(
    {"-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprint0", "-fprintf", "-fls"}
)
_GIT_READS = frozenset(
    {
        *("status", "log", "show", "diff", "blame", "annotate", "ls-files", "ls-tree"),
        *("rev-parse", "cat-file", "grep", "shortlog", "describe", "rev-list", "reflog"),
        *("whatchanged", "show-ref", "name-rev", "merge-base", "diff-tree", "diff-index"),
        *("diff-files", "count-objects", "for-each-ref", "cherry", "version", "help"),
    }
)


def only_reads(words: Sequence[str | None]) -> bool:
    """Whether a simple command is known to write nothing it names (``cat``, ``ls``, ``git
    log`` …). Anything else (``cp``, ``sed``, an interpreter, an unknown program) may write
    the files its arguments name."""
    if not words or words[0] is None:
        return False
    name = posixpath.basename(words[0])
    if name in _READERS:
        return True
    if name == "find":
        return not any(word in _FIND_WRITES for word in words[1:])
    if name == "git":
        _, sub = git_subcommand(words)
        return sub in _GIT_READS and not any(
            w is not None and (w == "-o" or w.startswith("--output")) for w in words
        )
    return False
