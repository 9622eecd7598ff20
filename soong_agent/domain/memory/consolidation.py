"""The deterministic half of memory consolidation (seed 002 "Dream"): pure functions.

- `absolute_dates`: relative dates ("yesterday", "last week", "3 days ago") become absolute
  ones, the memory's `updated` time being the reference ("yesterday" in a memory updated on
  2026-01-10 is 2026-01-09).
- `newer_first`: which of contradicting memories wins (the most recently updated).
- `superseded_note`: the line the winner's body keeps about the memory it replaced.
- `index_fits` / `least_useful`: the cap of `MEMORY.md` (`MAX_INDEX_LINES` lines,
  `MAX_INDEX_BYTES` bytes). When the model's merges leave the index too big, the memories
  dropped are the *least recently updated* ones (ties: reference, then user, then feedback —
  how the user wants the work done is kept longest), until the index fits: a memory nobody
  touched for the longest time is the least likely to still matter.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Sequence

from soong_agent.domain.memory.index import one_line, render_index
from soong_agent.ports.memory import MemoryCategory, MemoryEntry

MAX_INDEX_LINES = 200
MAX_INDEX_BYTES = 25_000
"""`MEMORY.md` stays under 200 lines and 25 KB (25,000 bytes, UTF-8)."""

DROP_ORDER: dict[MemoryCategory, int] = {"reference": 0, "user": 1, "feedback": 2}
"""Among memories updated at the same time, the one dropped first."""

_PREP = r"(?:(?P<prep>since|until|till|before|after|from|by|on|of|as of)\s+)?"
_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "a": 1, "an": 1}


def _day(when: dt.date) -> str:
    return when.isoformat()


def _monday(when: dt.date) -> dt.date:
    return when - dt.timedelta(days=when.weekday())


def _month(year: int, month: int) -> str:
    while month < 1:
        month += 12
        year -= 1
    while month > 12:
        month -= 12
        year += 1
    return f"{year:04d}-{month:02d}"


def _count(text: str) -> int:
    return int(text) if text.isdigit() else _WORDS[text.lower()]


def _rules(ref: dt.date) -> list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]]:
    """(pattern, what the match becomes) — a day keeps its preposition or gets "on"."""

    def on_day(when: dt.date) -> Callable[[re.Match[str]], str]:
        def sub(m: re.Match[str]) -> str:
            prep = m.group("prep")
            return f"{prep} {_day(when)}" if prep else f"on {_day(when)}"

        return sub

    def period(text: str) -> Callable[[re.Match[str]], str]:
        def sub(m: re.Match[str]) -> str:
            prep = m.group("prep")
            return f"{prep} {text}" if prep else f"in {text}"

        return sub

    def days_ago(m: re.Match[str]) -> str:
        return on_day(ref - dt.timedelta(days=_count(m.group("n"))))(m)

    def weeks_ago(m: re.Match[str]) -> str:
        monday = _monday(ref) - dt.timedelta(weeks=_count(m.group("n")))
        return period(f"the week of {_day(monday)}")(m)

    def months_ago(m: re.Match[str]) -> str:
        return period(_month(ref.year, ref.month - _count(m.group("n"))))(m)

    number = r"(?P<n>\d{1,3}|one|two|three|four|five|six|an?)"
    i = re.IGNORECASE
    return [
        (re.compile(rf"\b{_PREP}the day before yesterday\b", i), on_day(ref - dt.timedelta(2))),
        (re.compile(rf"\b{_PREP}yesterday\b", i), on_day(ref - dt.timedelta(1))),
        (re.compile(rf"\b{_PREP}today\b", i), on_day(ref)),
        (re.compile(rf"\b{_PREP}tomorrow\b", i), on_day(ref + dt.timedelta(1))),
        (re.compile(rf"\b{_PREP}{number} days? ago\b", i), days_ago),
        (re.compile(rf"\b{_PREP}{number} weeks? ago\b", i), weeks_ago),
        (re.compile(rf"\b{_PREP}{number} months? ago\b", i), months_ago),
        (
            re.compile(rf"\b{_PREP}last week\b", i),
            period(f"the week of {_day(_monday(ref) - dt.timedelta(weeks=1))}"),
        ),
        (
            re.compile(rf"\b{_PREP}this week\b", i),
            period(f"the week of {_day(_monday(ref))}"),
        ),
        (
            re.compile(rf"\b{_PREP}next week\b", i),
            period(f"the week of {_day(_monday(ref) + dt.timedelta(weeks=1))}"),
        ),
        (re.compile(rf"\b{_PREP}last month\b", i), period(_month(ref.year, ref.month - 1))),
        (re.compile(rf"\b{_PREP}this month\b", i), period(_month(ref.year, ref.month))),
        (re.compile(rf"\b{_PREP}next month\b", i), period(_month(ref.year, ref.month + 1))),
        (re.compile(rf"\b{_PREP}last year\b", i), period(f"{ref.year - 1:04d}")),
        (re.compile(rf"\b{_PREP}this year\b", i), period(f"{ref.year:04d}")),
    ]


def absolute_dates(text: str, reference: dt.datetime) -> str:
    """`text` with its relative dates made absolute, `reference` (the memory's `updated` time,
    in UTC) being "today": ``yesterday`` → ``on 2026-01-09``, ``since last week`` → ``since
    the week of 2025-12-29``, ``last month`` → ``in 2025-12``. The very same string when
    there is nothing to rewrite."""
    ref = (reference.astimezone(dt.UTC) if reference.tzinfo else reference).date()
    out = text
    for pattern, sub in _rules(ref):
        out = pattern.sub(sub, out)
    return text if out == text else out


def newer_first(entries: Iterable[MemoryEntry]) -> list[MemoryEntry]:
    """Contradicting memories, the winner first: the most recently updated (then the name,
    so the order is stable)."""
    return sorted(entries, key=lambda e: (-e.updated.timestamp(), e.name))


def superseded_note(loser: MemoryEntry, loser_body: str) -> str:
    """The line a winning memory's body keeps about the memory it supersedes."""
    said = one_line(loser_body or loser.description)
    if len(said) > 300:
        said = said[:300] + " […]"
    when = _day(loser.updated.astimezone(dt.UTC).date())
    return f"Supersedes {loser.name!r} (updated {when}), which said: {said}"


def index_size(entries: Iterable[MemoryEntry]) -> tuple[int, int]:
    """(lines, bytes) of `MEMORY.md` for these memories."""
    text = render_index(entries)
    return text.count("\n"), len(text.encode("utf-8"))


def index_fits(
    entries: Iterable[MemoryEntry],
    *,
    max_lines: int = MAX_INDEX_LINES,
    max_bytes: int = MAX_INDEX_BYTES,
) -> bool:
    """Whether `MEMORY.md` for these memories is at most `max_lines` lines and `max_bytes`."""
    lines, size = index_size(entries)
    return lines <= max_lines and size <= max_bytes


def least_useful(
    entries: Sequence[MemoryEntry],
    *,
    max_lines: int = MAX_INDEX_LINES,
    max_bytes: int = MAX_INDEX_BYTES,
) -> list[MemoryEntry]:
    """The memories to drop so that the index of the others fits: least recently updated
    first (ties: `DROP_ORDER`, then name); empty when it fits already."""
    kept = list(entries)
    order = sorted(kept, key=lambda e: (e.updated.timestamp(), DROP_ORDER[e.category], e.name))
    dropped: list[MemoryEntry] = []
    for entry in order:
        if index_fits(kept, max_lines=max_lines, max_bytes=max_bytes):
            break
        kept.remove(entry)
        dropped.append(entry)
    return dropped
