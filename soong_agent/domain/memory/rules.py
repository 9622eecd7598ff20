"""What a memory must not hold, recognised in its text: each rule returns the evidence it found
(a short excerpt, or a count) or None.

The rules look for the shapes such content takes, not for topics: a memory may say that the
user likes small pull requests, but not which pull request is open; that tests live next to the
code, but not the listing of a folder.

The patterns are compiled at their first use (a memory being checked), not at import: most
runs never store a memory, and compiling all of them costs ~10 ms of start-up.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

EXCERPT = 48
"""Evidence is cut to this many characters."""


def _excerpt(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"


def _first(patterns: tuple[re.Pattern[str], ...], text: str) -> str | None:
    for pattern in patterns:
        found = pattern.search(text)
        if found is not None:
            return _excerpt(found.group(0))
    return None


# --- file structure and directory listings --------------------------------------------------


@functools.cache
def _structure() -> tuple[re.Pattern[str], ...]:
    """A tree, `ls -l` output, a description of the layout."""
    return (
        re.compile(r"[├└]──|^\s*│|^\s*(?:\|--|\+--|`--)\s", re.MULTILINE),
        re.compile(r"^[dlcbps-][rwxsStT-]{9}[.+@]?\s+\d+\s", re.MULTILINE),
        re.compile(
            r"\b(?:directory|folder|file|project|repo(?:sitory)?|source|code ?base)\s+"
            r"(?:structure|layout|tree|listing|hierarchy|organi[sz]ation)\b",
            re.IGNORECASE,
        ),
    )


@functools.cache
def _path_line() -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """A line's bullet, a path, and the comment after a path."""
    return (
        re.compile(r"^\s*(?:[-*+]|\d+[.)])?\s*"),
        re.compile(
            r"(?:\./|/|~/)?(?:[\w.@+-]+/)+(?:[\w.@+-]+)?"  # a/b/c, src/, ./x/y.py
            r"|[\w@+-][\w.@+-]*\.[A-Za-z0-9]{1,6}"  # a bare file name with an extension
        ),
        re.compile(r"\s*(?:[:#(]|--?\s|—|–).*$"),
    )


LISTING_LINES = 3
"""This many lines that are each only a path (perhaps with a comment) make a listing."""


def file_structure(text: str) -> str | None:
    """A directory tree or listing, `ls -l` output, or a description of the file layout."""
    found = _first(_structure(), text)
    if found is not None:
        return found
    bullet, path_line, path_comment = _path_line()
    paths = []
    for line in text.splitlines():
        if "://" in line:
            continue
        item = path_comment.sub("", bullet.sub("", line, count=1).strip("`* ")).strip("`")
        if item and path_line.fullmatch(item):
            paths.append(item)
    if len(paths) >= LISTING_LINES:
        return f"{len(paths)} lines that are paths: {_excerpt(', '.join(paths))}"
    return None


# --- code signatures ------------------------------------------------------------------------


@functools.cache
def _signatures() -> tuple[re.Pattern[str], ...]:
    return (
        re.compile(r"\b(?:async\s+)?def\s+\w+\s*\("),  # Python
        re.compile(r"^\s*class\s+\w+\s*(?:\(|:|\{|<|\bextends\b|\bimplements\b)", re.MULTILINE),
        re.compile(r"\b(?:export\s+)?(?:async\s+)?function\s*\*?\s*\w+\("),  # JavaScript
        re.compile(r"^\s*func\s+(?:\([^)]*\)\s*)?\w+\s*\(", re.MULTILINE),  # Go
        re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?fn\s+\w+\s*[<(]"),  # Rust
        re.compile(  # Java, C#, Kotlin, C++ members
            r"^\s*(?:(?:public|private|protected|internal|static|final|abstract|override|virtual)\s+)+"
            r"[\w<>\[\],.?]+\s+\w+\(",
            re.MULTILINE,
        ),
        re.compile(r"^\s*(?:export\s+)?(?:interface|struct|trait)\s+\w+\s*[{<]", re.MULTILINE),
        re.compile(r"\b\w+\s*\([^()\n]*\)\s*->\s*[\w\[\]., |]+"),  # f(x: int) -> str
    )


def code_signature(text: str) -> str | None:
    """A function, method, class or interface signature."""
    return _first(_signatures(), text)


# --- current task progress ------------------------------------------------------------------


@functools.cache
def _progress() -> tuple[re.Pattern[str], ...]:
    return (
        re.compile(
            r"\b(?:currently|right now|at the moment)\s+(?:working on|fixing|implementing|doing|"
            r"debugging|refactoring|migrating|writing)\b",
            re.IGNORECASE,
        ),
        re.compile(
            r"\b(?:i am|i'm|we are|we're)\s+(?:now\s+|currently\s+|still\s+)?(?:working on|"
            r"in the middle of|halfway through|fixing|implementing|debugging|refactoring)\b",
            re.IGNORECASE,
        ),
        re.compile(r"\bnext steps?\s*(?:is|are|:)", re.IGNORECASE),
        re.compile(r"\b(?:remaining|pending|open)\s+(?:tasks?|todos?|steps?)\b", re.IGNORECASE),
        re.compile(r"\b(?:step|phase|task)\s+\d+\s+(?:of|/)\s+\d+\b", re.IGNORECASE),
        re.compile(
            r"\b(?:done so far|so far (?:i|we) (?:have|'ve)|progress so far|"
            r"left to do|still to do)\b",
            re.IGNORECASE,
        ),
        re.compile(r"\b(?:work in progress|WIP)\b"),
        re.compile(r"^\s*[-*]\s*\[[ xX~]\]\s", re.MULTILINE),  # a checklist
        re.compile(r"\bTODO\b|\btodo:", re.IGNORECASE),
    )


def task_progress(text: str) -> str | None:
    """Where the current task stands: what is being done, what is left, a checklist."""
    return _first(_progress(), text)


# --- branch and pull request names ----------------------------------------------------------

_USUAL_BRANCH = r"(?![`'\"]?(?:main|master|trunk|develop|dev)\b[`'\"]?(?:\s|$|[.,;]))"
_BRANCH_NAME = _USUAL_BRANCH + r"(?:[`'\"][\w./-]+[`'\"]|[\w.]+[/_-][\w./-]+|[\w.-]*\d[\w./-]*)"


@functools.cache
def _branches() -> tuple[re.Pattern[str], ...]:
    return (
        re.compile(
            r"\bbranch(?:es)?\s+(?:(?:is|was)\s+|named\s+|called\s+)?" + _BRANCH_NAME, re.IGNORECASE
        ),
        re.compile(r"(?<![\w/.-])(?:feature|feat|fix|bugfix|hotfix|release|chore)/[\w.-]+"),
        re.compile(r"\bgit\s+(?:checkout|switch)\s+(?:-[bcB]\s+)?[\w./-]+"),
        re.compile(
            r"\b(?:PR|MR|pull request|merge request)s?\s*(?:#|!|number\s*|no\.?\s*)?\d+\b",
            re.IGNORECASE,
        ),
        re.compile(r"/(?:pull|pulls|merge_requests)/\d+"),
    )


def branch_or_pr(text: str) -> str | None:
    """The name of a branch or the number of a pull (merge) request."""
    return _first(_branches(), text)


# --- details of a fix -----------------------------------------------------------------------


@functools.cache
def _fixes() -> tuple[re.Pattern[str], ...]:
    return (
        re.compile(
            r"\b(?:fixed|solved|resolved|patched|worked around)\s+"
            r"(?:it|this|that|the\s+[\w-]+(?:\s+[\w-]+)?|a\s+[\w-]+(?:\s+[\w-]+)?)\s+by\b",
            re.IGNORECASE,
        ),
        re.compile(r"\bthe (?:fix|workaround|solution) (?:was|is)\b", re.IGNORECASE),
        re.compile(
            r"\bto fix (?:it|this|the bug|the issue|the error|the crash|the test)\b[^.\n]*?"
            r"\b(?:change[ds]?|replace[ds]?|add(?:ed|s)?|remove[ds]?|set|wrap(?:ped|s)?|move[ds]?)\b",
            re.IGNORECASE,
        ),
        re.compile(r"\broot cause (?:was|is)\b", re.IGNORECASE),
        re.compile(r"\b(?:changed|edited|modified|patched)\s+line\s+\d+", re.IGNORECASE),
        re.compile(  # a diff
            r"^(?:@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@|diff --git |--- a/|\+\+\+ b/)", re.MULTILINE
        ),
    )


def fix_details(text: str) -> str | None:
    """How a bug was fixed: the change made, a diff, the root cause of one bug."""
    return _first(_fixes(), text)


# --- credentials the redactor cannot recognise ------------------------------------------------


@functools.cache
def _credential() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A credential word with the value after it, and a digit or symbol (in that value)."""
    return (
        re.compile(
            r"\b(?:password|passwd|passphrase|pass ?code|pin|secret|api[ _-]?key|access[ _-]?key|"
            r"(?:access|auth|api|bearer|refresh)[ _-]?token|token|credentials?)\b"
            r"\s*(?:is|was|=|:)\s*[\"'`]?(?P<value>[^\s\"'`]{6,})",
            re.IGNORECASE,
        ),
        re.compile(r"[\d!@#$%^&*+=?~]"),
    )


def credential_value(text: str) -> bool:
    """A password, key or token written out (``password is hunter22``, ``token: ab3…``): a
    value of six or more characters with a digit or symbol right after such a word."""
    credential, symbol = _credential()
    for found in credential.finditer(text):
        value = found.group("value")
        if not value.startswith("[redacted") and symbol.search(value):
            return True
    return False


Rule = Callable[[str], str | None]
