"""Glob patterns for `glob` and `grep`: ``*``, ``?``, ``[...]``, ``{a,b}`` and ``**``.

Patterns are matched against posix paths relative to a base folder. ``*`` and ``?`` never cross a
``/``; a whole ``**`` segment stands for zero or more folders (or, at the end, everything below).
Dot files are matched like any other name (hidden files are often what the agent is looking for).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from soong_agent.ports.errors import ToolInputError

MAX_BRACE_EXPANSIONS = 256
_MAGIC = frozenset("*?[{")


@dataclass(frozen=True, slots=True)
class GlobMatcher:
    """A compiled glob pattern.

    `literal_prefix` holds the leading folders that every expansion shares and that contain no
    wildcard, so a walk can start there; `max_depth` is the deepest path (in segments) the
    pattern can match, None when it contains ``**``.
    """

    pattern: str
    regex: re.Pattern[str]
    literal_prefix: tuple[str, ...]
    max_depth: int | None

    def matches(self, rel_path: str) -> bool:
        """Whether the posix path `rel_path` (relative to the base) matches."""
        return self.regex.fullmatch(rel_path) is not None


def _find_brace_group(pattern: str) -> tuple[int, int, list[str]] | None:
    """The first top-level ``{a,b,...}`` group: (start, end, alternatives), or None."""
    depth = 0
    start = -1
    cuts: list[int] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            if depth == 0:
                start = i
                cuts = []
            depth += 1
        elif ch == "," and depth == 1:
            cuts.append(i)
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                if not cuts:  # "{x}" is not a group: keep scanning after it
                    start = -1
                else:
                    bounds = [start, *cuts, i]
                    parts = [pattern[a + 1 : b] for a, b in itertools.pairwise(bounds)]
                    return start, i, parts
        i += 1
    return None


def expand_braces(pattern: str) -> list[str]:
    """All the patterns that ``{a,b}`` groups stand for (nested groups included)."""
    group = _find_brace_group(pattern)
    if group is None:
        return [pattern]
    start, end, alternatives = group
    head, tail = pattern[:start], pattern[end + 1 :]
    out: list[str] = []
    for alternative in alternatives:
        for expanded in expand_braces(head + alternative + tail):
            out.append(expanded)
            if len(out) > MAX_BRACE_EXPANSIONS:
                raise ToolInputError(
                    f"glob pattern {pattern!r} expands to more than {MAX_BRACE_EXPANSIONS} patterns"
                )
    return out


def _translate_segment(segment: str) -> str:
    """The regex for one path segment (no ``/`` inside, braces already expanded)."""
    out: list[str] = []
    i = 0
    n = len(segment)
    while i < n:
        ch = segment[i]
        i += 1
        if ch == "*":
            while i < n and segment[i] == "*":
                i += 1
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "\\" and i < n:
            out.append(re.escape(segment[i]))
            i += 1
        elif ch == "[":
            j = i
            if j < n and segment[j] in "!^":
                j += 1
            if j < n and segment[j] == "]":
                j += 1
            while j < n and segment[j] != "]":
                j += 1
            if j >= n:  # no closing bracket: a literal "["
                out.append(re.escape(ch))
                continue
            body = segment[i:j]
            i = j + 1
            negate = body[:1] in ("!", "^")
            if negate:
                body = body[1:]
            body = body.replace("\\", "\\\\")
            out.append(f"[^/{body}]" if negate else f"[{body}]")
        else:
            out.append(re.escape(ch))
    return "".join(out)


def _split(pattern: str) -> list[str]:
    stripped = pattern
    while stripped.startswith("./"):
        stripped = stripped[2:]
    return [segment for segment in stripped.split("/") if segment not in ("", ".")]


def _is_magic(segment: str) -> bool:
    return any(ch in _MAGIC for ch in segment) or "\\" in segment


def _compile_one(segments: list[str]) -> str:
    pieces: list[str] = []
    last = len(segments) - 1
    for index, segment in enumerate(segments):
        if segment == "**":
            pieces.append(".*" if index == last else "(?:[^/]+/)*")
        else:
            pieces.append(_translate_segment(segment) + ("" if index == last else "/"))
    return "".join(pieces)


def compile_glob(pattern: str) -> GlobMatcher:
    """Compile `pattern`; an empty or unusable pattern raises ToolInputError."""
    if not pattern.strip():
        raise ToolInputError("the glob pattern is empty")
    expansions = [_split(p) for p in expand_braces(pattern)]
    expansions = [segments for segments in expansions if segments]
    if not expansions:
        raise ToolInputError(f"the glob pattern {pattern!r} names no file")
    alternatives: list[str] = []
    depths: list[int | None] = []
    prefixes: list[list[str]] = []
    for segments in expansions:
        alternatives.append(_compile_one(segments))
        depths.append(None if "**" in segments else len(segments))
        prefix: list[str] = []
        for segment in segments[:-1]:
            if _is_magic(segment):
                break
            prefix.append(segment)
        prefixes.append(prefix)
    common: list[str] = []
    for column in zip(*prefixes, strict=False):
        if all(part == column[0] for part in column) and column[0] != "..":
            common.append(column[0])
        else:
            break
    # A shared prefix must be a prefix of every expansion (zip stops at the shortest one).
    common = common[: min(len(prefix) for prefix in prefixes)]
    try:
        regex = re.compile("|".join(f"(?:{alt})" for alt in alternatives), re.DOTALL)
    except re.error as exc:  # e.g. a bad range such as [z-a]
        raise ToolInputError(f"invalid glob pattern {pattern!r}: {exc}") from None
    max_depth = None if any(depth is None for depth in depths) else max(d or 0 for d in depths)
    return GlobMatcher(
        pattern=pattern, regex=regex, literal_prefix=tuple(common), max_depth=max_depth
    )


def last_segments(pattern: str) -> list[str] | None:
    """The last segment of every expansion of `pattern`, or None when one of them is ``**``.

    A file matches `pattern` only if its base name matches one of these, so they can pre-filter
    a walk by base name (the full pattern is still checked afterwards).
    """
    out: list[str] = []
    for expansion in expand_braces(pattern):
        segments = _split(expansion)
        if not segments or segments[-1] == "**":
            return None
        if segments[-1] not in out:
            out.append(segments[-1])
    return out


def compile_filter(pattern: str) -> tuple[GlobMatcher, bool]:
    """A file filter for grep: (matcher, on_name). Without a ``/`` it matches the file name."""
    matcher = compile_glob(pattern)
    return matcher, "/" not in pattern
