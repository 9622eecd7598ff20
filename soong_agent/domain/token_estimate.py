"""Token estimates (CTX-4): o200k counts scaled by a per-provider factor that usage recalibrates.

Every provider's prompt size is estimated from one exact tokenizer (o200k_base) times a
safety factor. The factor starts from a per-provider guess and moves toward the ratio the
provider's reported usage shows, so the estimate learns each provider's tokenizer.

`MessageTokens` is the incremental tally: a message is counted once, when it is added, and the
running total is kept, so asking for it is O(1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

#: Initial factors, by provider. Claude's tokenizer yields more tokens than o200k for the same
#: text; local models vary by family; an unknown provider gets the most cautious guess.
INITIAL_FACTORS: dict[str, float] = {
    "openai": 1.0,
    "anthropic": 1.15,
    "ollama": 1.1,
}
UNKNOWN_PROVIDER_FACTOR = 1.2

#: Below this many estimated tokens a reported count says too little about the ratio
#: (fixed per-request overheads dominate), so recalibration leaves the factor alone.
MIN_MEANINGFUL_TOKENS = 200

DEFAULT_WEIGHT = 0.3
DEFAULT_FLOOR = 0.8
DEFAULT_CAP = 2.0


def initial_factor(provider: str) -> float:
    """The starting safety factor for `provider` (case-insensitive); 1.2 when unknown."""
    return INITIAL_FACTORS.get(provider.strip().lower(), UNKNOWN_PROVIDER_FACTOR)


def estimate(o200k_tokens: int, factor: float) -> int:
    """`o200k_tokens` scaled by `factor`, rounded up (0 stays 0)."""
    if o200k_tokens < 0:
        raise ValueError("o200k_tokens must be >= 0")
    if o200k_tokens == 0:
        return 0
    # Round away float noise (e.g. 100 * 1.15 == 114.99999999999999) before the ceiling.
    return math.ceil(round(o200k_tokens * factor, 6))


def recalibrate(
    factor: float,
    *,
    estimated_o200k: int,
    reported: int,
    weight: float = DEFAULT_WEIGHT,
    floor: float = DEFAULT_FLOOR,
    cap: float = DEFAULT_CAP,
    min_tokens: int = MIN_MEANINGFUL_TOKENS,
) -> float:
    """Move `factor` toward `reported / estimated_o200k` by an exponential moving average.

    `estimated_o200k` is the raw o200k count of the prompt that was sent and `reported` the
    prompt tokens the provider charged for it. The result is clamped to ``[floor, cap]``. When
    the estimate is under `min_tokens` or nothing was reported, `factor` is returned unchanged.
    """
    if not 0.0 < weight <= 1.0:
        raise ValueError("weight must be in (0, 1]")
    if not 0.0 < floor <= cap:
        raise ValueError("need 0 < floor <= cap")
    if estimated_o200k < max(min_tokens, 1) or reported <= 0:
        return factor
    observed = reported / estimated_o200k
    updated = (1.0 - weight) * factor + weight * observed
    return min(cap, max(floor, updated))


@dataclass(frozen=True, slots=True)
class ProviderCalibration:
    """One provider's current safety factor over the o200k count."""

    provider: str
    factor: float

    @classmethod
    def initial(cls, provider: str) -> ProviderCalibration:
        """The calibration a provider starts with."""
        return cls(provider=provider, factor=initial_factor(provider))

    def estimate(self, o200k_tokens: int) -> int:
        """`o200k_tokens` scaled by this provider's factor, rounded up."""
        return estimate(o200k_tokens, self.factor)

    def recalibrated(
        self,
        *,
        estimated_o200k: int,
        reported: int,
        weight: float = DEFAULT_WEIGHT,
        floor: float = DEFAULT_FLOOR,
        cap: float = DEFAULT_CAP,
    ) -> ProviderCalibration:
        """A copy whose factor has moved toward what the provider reported (see `recalibrate`)."""
        factor = recalibrate(
            self.factor,
            estimated_o200k=estimated_o200k,
            reported=reported,
            weight=weight,
            floor=floor,
            cap=cap,
        )
        if factor == self.factor:
            return self
        return ProviderCalibration(provider=self.provider, factor=factor)


class MessageTokens:
    """Per-message o200k counts with a running total.

    Each message is counted once, by the caller, when it is added; `total` is then O(1).
    Adding an id that is already present replaces its count.
    """

    __slots__ = ("_counts", "_total")

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._total = 0

    def add(self, message_id: str, tokens: int) -> None:
        """Record `tokens` for `message_id` (replacing an earlier count for the same id)."""
        if tokens < 0:
            raise ValueError("tokens must be >= 0")
        previous = self._counts.get(message_id, 0)
        self._counts[message_id] = tokens
        self._total += tokens - previous

    def remove(self, ids: Iterable[str]) -> int:
        """Forget the given messages (unknown ids are ignored); returns the tokens removed.

        A bare string is taken as one id, not as a sequence of one-letter ids.
        """
        removed = 0
        for message_id in (ids,) if isinstance(ids, str) else ids:
            tokens = self._counts.pop(message_id, None)
            if tokens is not None:
                removed += tokens
        self._total -= removed
        return removed

    def get(self, message_id: str) -> int | None:
        """The count recorded for `message_id`, or None when it was never added."""
        return self._counts.get(message_id)

    @property
    def total(self) -> int:
        """The sum of every recorded count."""
        return self._total

    def clear(self) -> None:
        """Forget every message."""
        self._counts.clear()
        self._total = 0

    def __len__(self) -> int:
        return len(self._counts)

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._counts
