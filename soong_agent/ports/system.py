"""Small ports for the outside world: time, ids, secrets, token counts."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Wall-clock time and a monotonic timer."""

    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        ...


@runtime_checkable
class IdGenerator(Protocol):
    """Unique ids for sessions, runs, messages and tool calls."""

    def new_id(self, prefix: str) -> str:
        """A new id starting with `prefix`, e.g. ``ses_…``."""
        ...


@runtime_checkable
class SecretSource(Protocol):
    """Where secret values come from (the process environment); read at first use."""

    def get(self, name: str) -> str | None:
        """The value of the variable `name`, or None when it is unset or empty."""
        ...


@runtime_checkable
class TokenCounter(Protocol):
    """Estimates how many tokens a text costs.

    A counter may be costly to load (a tokenizer's tables): `loaded` says whether `count` is
    cheap now, and `warm_up` starts loading it in the background, so a short run never pays
    for it. A counter that needs no loading is always `loaded` and its `warm_up` does nothing.
    """

    @property
    def loaded(self) -> bool:
        """Whether `count` can answer without loading anything first."""
        ...

    def warm_up(self) -> None:
        """Start loading in the background and return at once."""
        ...

    def count(self, text: str) -> int:
        """The estimated token count of `text`."""
        ...

    def remembered(self, text: str) -> int | None:
        """`count(text)` when it can be answered without loading anything: the counter is
        loaded, or it kept the count of this very text from an earlier process (a system
        prompt is the same run after run); None otherwise."""
        ...
