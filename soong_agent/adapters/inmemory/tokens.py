"""A token counter for tests: deterministic, instant, about as big as a real tokenizer's count."""

from __future__ import annotations

import math


class ApproxTokenCounter:
    """A `TokenCounter` that counts ``ceil(len(text) / chars_per_token)`` tokens.

    It needs no loading, so it is `loaded` from the start and `warm_up` does nothing, as the
    port says of such a counter. ``loaded=False`` makes it act like a counter with tables to
    load instead: `loaded` turns True at `warm_up()` or at the first `count`; `warm_ups` and
    `counts` record how often each was called.
    """

    def __init__(self, *, chars_per_token: float = 4.0, loaded: bool = True) -> None:
        if chars_per_token <= 0:
            raise ValueError("chars_per_token must be positive")
        self._chars_per_token = chars_per_token
        self._loaded = loaded
        self.warm_ups = 0
        self.counts = 0

    def __repr__(self) -> str:
        return f"ApproxTokenCounter(chars_per_token={self._chars_per_token!r})"

    @property
    def loaded(self) -> bool:
        """Whether `count` answers without loading first."""
        return self._loaded

    def warm_up(self) -> None:
        """Load (instantly) and return."""
        self.warm_ups += 1
        self._loaded = True

    def count(self, text: str) -> int:
        """The estimated token count of `text`; never raises for a `str`."""
        self.counts += 1
        self._loaded = True
        return math.ceil(len(text) / self._chars_per_token)

    def remembered(self, text: str) -> int | None:
        """The count when loaded (no count is kept across processes); None before."""
        return math.ceil(len(text) / self._chars_per_token) if self._loaded else None
