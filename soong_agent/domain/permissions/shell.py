"""Command lines as the policy reads them: a fallback split, and which words are paths.

`fallback_analysis` serves deny rules when no `ShellAnalyzer` looked at a line. The rest says,
from the words alone, what a command would read: path-like arguments, folders read recursively
(``grep -r``, ``tar``, ``rg``) and references to ``/proc``. The file sandbox then checks those
paths (`application.permission_gate.sandbox_problem`); nothing here touches a disk.
"""

from __future__ import annotations

import itertools
import posixpath
import re
import shlex
from collections.abc import Sequence

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
