"""Retry policy shared by the model providers: exponential backoff with jitter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class RetrySettings(Protocol):
    """The shape of the config's `retry` table (millisecond values)."""

    @property
    def max_attempts(self) -> int: ...

    @property
    def initial_backoff_ms(self) -> int: ...

    @property
    def max_backoff_ms(self) -> int: ...

    @property
    def max_retry_after_ms(self) -> int: ...

    @property
    def stream_max_retries(self) -> int: ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many times a failed call is sent, and how long to wait between attempts.

    `max_attempts` counts every attempt, the first one included (1 means never retry).
    `stream_max_retries` bounds, among those, the retries of an answer cut off after part of
    it arrived (the part is discarded and the whole call sent again).
    """

    max_attempts: int = 4
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    max_retry_after_s: float = 60.0
    stream_max_retries: int = 3

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.stream_max_retries < 0:
            raise ValueError("stream_max_retries must not be negative")
        if min(self.initial_backoff_s, self.max_backoff_s, self.max_retry_after_s) < 0:
            raise ValueError("backoff values must not be negative")

    @classmethod
    def from_ms(
        cls,
        *,
        max_attempts: int,
        initial_backoff_ms: float,
        max_backoff_ms: float,
        max_retry_after_ms: float,
        stream_max_retries: int = 3,
    ) -> RetryPolicy:
        """Build a policy from the config's millisecond values."""
        return cls(
            max_attempts=max_attempts,
            initial_backoff_s=initial_backoff_ms / 1000.0,
            max_backoff_s=max_backoff_ms / 1000.0,
            max_retry_after_s=max_retry_after_ms / 1000.0,
            stream_max_retries=stream_max_retries,
        )

    @classmethod
    def from_config(cls, settings: RetrySettings) -> RetryPolicy:
        """Build a policy from an object shaped like the config's `retry` table."""
        return cls.from_ms(
            max_attempts=settings.max_attempts,
            initial_backoff_ms=settings.initial_backoff_ms,
            max_backoff_ms=settings.max_backoff_ms,
            max_retry_after_ms=settings.max_retry_after_ms,
            stream_max_retries=settings.stream_max_retries,
        )

    def should_retry(self, attempt: int, *, restarts: int | None = None) -> bool:
        """Whether another attempt may follow attempt number `attempt` (1-based); with
        `restarts` (the failed attempt had yielded part of the answer), also whether fewer
        than `stream_max_retries` such retries were made already."""
        if restarts is not None and restarts >= self.stream_max_retries:
            return False
        return attempt < self.max_attempts

    def delay(self, attempt: int, retry_after: float | None, rand: float) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based).

        A server's `retry_after` wins, capped at `max_retry_after_s`. Otherwise the backoff
        doubles per attempt from `initial_backoff_s` up to `max_backoff_s`, and "equal jitter"
        picks a value between half of it and all of it (`rand` is uniform in [0, 1)).
        """
        if retry_after is not None:
            return max(0.0, min(retry_after, self.max_retry_after_s))
        exponent = max(0, attempt - 1)
        # Cap the exponent so a large attempt number cannot overflow the float.
        base = min(self.initial_backoff_s * (2.0 ** min(exponent, 62)), self.max_backoff_s)
        rand = min(max(rand, 0.0), 1.0)
        return base * (0.5 + 0.5 * rand)
