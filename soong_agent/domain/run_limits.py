"""Per-run budgets (`runtime.max_cost_usd`, `max_tokens`, `max_wall_ms`): which one is spent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

BudgetName = Literal["max_cost_usd", "max_tokens", "max_wall_ms"]


@dataclass(frozen=True, slots=True)
class RunLimits:
    """Hard caps of one run; None means no cap. Tokens count input + output (cache included)."""

    max_cost_usd: float | None = None
    max_tokens: int | None = None
    max_wall_ms: int | None = None

    def __post_init__(self) -> None:
        values = {
            "max_cost_usd": self.max_cost_usd,
            "max_tokens": self.max_tokens,
            "max_wall_ms": self.max_wall_ms,
        }
        for name, value in values.items():
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, found {value}")

    def merged(self, override: RunLimits) -> RunLimits:
        """These limits with the ones `override` sets replacing them."""
        return RunLimits(
            max_cost_usd=(
                override.max_cost_usd if override.max_cost_usd is not None else self.max_cost_usd
            ),
            max_tokens=override.max_tokens if override.max_tokens is not None else self.max_tokens,
            max_wall_ms=(
                override.max_wall_ms if override.max_wall_ms is not None else self.max_wall_ms
            ),
        )

    def within(self, other: RunLimits) -> RunLimits:
        """The tighter of these limits and `other`, cap by cap (a child's own caps within
        what its parent has left, AGT-2)."""

        def low(a: float | None, b: float | None) -> float | None:
            return b if a is None else a if b is None else min(a, b)

        tokens = low(self.max_tokens, other.max_tokens)
        wall = low(self.max_wall_ms, other.max_wall_ms)
        return RunLimits(
            max_cost_usd=low(self.max_cost_usd, other.max_cost_usd),
            max_tokens=None if tokens is None else int(tokens),
            max_wall_ms=None if wall is None else int(wall),
        )

    def left(self, *, cost_usd: float | None, tokens: int, elapsed_ms: float) -> RunLimits | None:
        """What is left of these caps after this much was used; None when one is used up."""
        if self.spent(cost_usd=cost_usd, tokens=tokens, elapsed_ms=elapsed_ms) is not None:
            return None
        return RunLimits(
            max_cost_usd=(
                None if self.max_cost_usd is None else self.max_cost_usd - (cost_usd or 0.0)
            ),
            max_tokens=None if self.max_tokens is None else self.max_tokens - tokens,
            max_wall_ms=(
                None if self.max_wall_ms is None else max(1, int(self.max_wall_ms - elapsed_ms))
            ),
        )

    def spent(
        self, *, cost_usd: float | None, tokens: int, elapsed_ms: float
    ) -> tuple[BudgetName, str] | None:
        """The budget that is used up, with a one-line reason; None while all remain."""
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return "max_tokens", f"token budget reached: {tokens} of {self.max_tokens} tokens used"
        if self.max_cost_usd is not None and cost_usd is not None and cost_usd >= self.max_cost_usd:
            return (
                "max_cost_usd",
                f"cost budget reached: ${cost_usd:.4f} of ${self.max_cost_usd:.4f} spent",
            )
        if self.max_wall_ms is not None and elapsed_ms >= self.max_wall_ms:
            return (
                "max_wall_ms",
                f"time budget reached: {elapsed_ms / 1000:.1f} s of "
                f"{self.max_wall_ms / 1000:.1f} s",
            )
        return None

    def remaining_s(self, elapsed_ms: float) -> float | None:
        """Seconds left of the wall-time budget (None: no cap)."""
        if self.max_wall_ms is None:
            return None
        return max(0.0, (self.max_wall_ms - elapsed_ms) / 1000)
