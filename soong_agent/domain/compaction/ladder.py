"""The ladder of rungs: their order, the next rung after an outcome, and the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Rung = Literal["micro", "summary", "micro_aggressive", "slice_summary", "hard_reset"]
"""One step of the compaction ladder; also the `strategy` of a `CompactionReport`."""

LADDER: tuple[Rung, ...] = ("micro", "summary", "micro_aggressive", "slice_summary", "hard_reset")
"""The rungs in the order they are tried."""

Outcome = Literal["ok", "failed", "still_over"]
"""How a rung ended: done (under budget), failed (error, empty or too long), or not enough."""


@dataclass(frozen=True, slots=True)
class CompactionReport:
    """What one compaction did, for the compaction event."""

    strategy: Rung
    tokens_before: int
    tokens_after: int
    dropped: list[str] = field(default_factory=list)
    rungs_failed: list[str] = field(default_factory=list)

    @property
    def tokens_saved(self) -> int:
        """How many tokens the compaction removed."""
        return self.tokens_before - self.tokens_after


def next_rung(current: Rung, outcome: Outcome) -> Rung | None:
    """The rung after `current` ended with `outcome`; None when compaction is over.

    "ok" ends the ladder; "failed" and "still_over" go one rung down. `hard_reset` is final.
    The ladder only moves forward, so no rung runs twice and there are at most len(LADDER)
    steps.
    """
    if outcome == "ok":
        return None
    position = LADDER.index(current)
    if position + 1 >= len(LADDER):
        return None
    return LADDER[position + 1]


class CompactionLadder:
    """A tiny state machine over `next_rung` that remembers what ran and what failed."""

    def __init__(self, start: Rung = "micro") -> None:
        self._current: Rung | None = start
        self._ran: list[Rung] = []
        self._failed: list[Rung] = []

    @property
    def current(self) -> Rung | None:
        """The rung to run now; None once the ladder is over."""
        return self._current

    @property
    def ran(self) -> list[Rung]:
        """The rungs run so far, in order."""
        return list(self._ran)

    @property
    def failed(self) -> list[str]:
        """The rungs that failed (error, empty or too long), in order."""
        return list(self._failed)

    @property
    def done(self) -> bool:
        """Whether the ladder is over."""
        return self._current is None

    def record(self, outcome: Outcome) -> Rung | None:
        """Record how the current rung ended; returns the next rung (None when over)."""
        current = self._current
        if current is None:
            return None
        self._ran.append(current)
        if outcome == "failed":
            self._failed.append(current)
        self._current = next_rung(current, outcome)
        return self._current
