"""The lexical ranker of memory recall (MEM-4): BM25 over a catalogue's names and descriptions.

It picks when the recall model fails, and orders a catalogue too big for its budget. The
`rank-bm25` package is imported at the first ranking that needs it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from soong_agent.ports.memory import MemoryEntry

_WORD = re.compile(r"[a-z0-9]+")
_STOP_WORDS = (
    "a an and are as at be but by do does for from has have how i if in into is it its me my "
    "no not of on or our so that the their them then there these they this to too was we were "
    "what when where which who why will with you your"
)
_STOP = frozenset(_STOP_WORDS.split(" "))


def terms(text: str) -> list[str]:
    """The words BM25 compares: lower case, letters and digits, no stop words, a plural's
    ``s`` dropped (``tabs`` and ``tab`` are one term)."""
    out = []
    for word in _WORD.findall(text.lower()):
        if len(word) < 2 or word in _STOP:
            continue
        plural = len(word) > 3 and word.endswith("s") and not word.endswith("ss")
        out.append(word[:-1] if plural else word)
    return out


def _entry_terms(entry: MemoryEntry) -> list[str]:
    return terms(f"{entry.name.replace('_', ' ').replace('-', ' ')} {entry.description}")


class LexicalIndex:
    """BM25 over a catalogue's names and descriptions, built once per catalogue (the terms of
    each entry and the BM25 statistics are kept until the catalogue changes)."""

    def __init__(self, entries: Sequence[MemoryEntry]) -> None:
        self.entries = tuple(entries)
        self.key = catalogue_key(entries)
        self._documents = [_entry_terms(e) for e in entries]
        self._postings: dict[str, list[int]] = {}
        for index, words in enumerate(self._documents):
            for word in set(words):
                self._postings.setdefault(word, []).append(index)
        self._bm25: Any = None

    def order(self, query: str) -> list[int]:
        """Indexes of the entries that share a term with `query`, best BM25 score first (ties:
        the most recently updated first)."""
        wanted = sorted(set(terms(query)))
        matching = sorted({i for word in wanted for i in self._postings.get(word, ())})
        if not matching:
            return []
        if self._bm25 is None:
            # BM25+ keeps every term's weight positive, even in a catalogue of one or two
            # memories (BM25Okapi's idf is zero or negative there); entries without a shared
            # term are left out above, so the constant it adds for absent terms changes no order
            from rank_bm25 import BM25Plus  # type: ignore[import-untyped]

            self._bm25 = BM25Plus(self._documents)
        scores = self._bm25.get_batch_scores(wanted, matching)
        entries = self.entries
        ranked = sorted(
            zip(matching, scores, strict=True),
            key=lambda pair: (-float(pair[1]), -entries[pair[0]].updated.timestamp()),
        )
        return [index for index, _score in ranked]


def catalogue_key(entries: Sequence[MemoryEntry]) -> tuple[tuple[str, str, float], ...]:
    """What a `LexicalIndex` is valid for: the entries' names, descriptions and times."""
    return tuple((e.name, e.description, e.updated.timestamp()) for e in entries)


def lexical_order(entries: Sequence[MemoryEntry], query: str) -> list[int]:
    """`LexicalIndex(entries).order(query)`."""
    return LexicalIndex(entries).order(query)
