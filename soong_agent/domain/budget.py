"""The context budget (CTX-4): how a model's context window is split, as pure arithmetic.

`context_window − reserve_output_tokens` is what a request may fill. The system prompt gets
`dynamic_system_budget`; the messages get the rest (`non_system_budget`, derived when unset and
never more than what is left). Compaction (CTX-6) starts when the messages exceed
`non_system − compact.reserve_tokens`.

The configured reserves are sized for large windows (the defaults, 8,192 + 12,000 + 16,384
tokens, suit a 128k model). On a small window they would leave nothing for the messages, so the
*effective* budget is derived from the window:

1. When `reserve_output_tokens + dynamic_system_budget + compact.reserve_tokens` is more than
   half the window, the three are scaled down by one factor so that they take exactly half
   (the output reserve never below `OUTPUT_FLOOR`, or its configured value when smaller).
2. The system part is never counted smaller than the system prompt really is: when the
   measured prompt is larger than its budget, the measured size is used.
3. What is left for messages must be at least `MIN_MESSAGE_ROOM` tokens; otherwise the window
   cannot work and a `ValueError` says why (config check and run exit 2 with it).
4. The compaction reserve takes at most half of the message part, so the trigger is never
   below half of it: a context that fits is never compacted.
5. `compact.keep_recent_tokens` is capped at half the trigger and `compact.max_summary_tokens`
   at a quarter of it (at least `SUMMARY_FLOOR`), so that compaction can make room.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from soong_agent.domain.config.schema import CompactConfig, ContextConfig

OUTPUT_FLOOR = 512
"""The smallest output reserve scaling produces (unless the configured one is smaller)."""
MIN_MESSAGE_ROOM = 512
"""The fewest tokens the messages must have for a window to work at all."""
SUMMARY_FLOOR = 128
"""The smallest effective `max_summary_tokens` scaling produces."""


@dataclass(frozen=True, slots=True)
class Reserves:
    """The configured budget values, before they are fitted to a window."""

    reserve_output: int
    system: int
    compact_reserve: int
    keep_recent: int = 20_000
    max_summary: int = 4_000
    non_system: int | None = None

    @classmethod
    def from_config(cls, context: ContextConfig, compact: CompactConfig) -> Reserves:
        return cls(
            reserve_output=context.reserve_output_tokens,
            system=context.dynamic_system_budget,
            compact_reserve=compact.reserve_tokens,
            keep_recent=compact.keep_recent_tokens,
            max_summary=compact.max_summary_tokens,
            non_system=context.non_system_budget,
        )


@dataclass(frozen=True, slots=True)
class ContextBudget:
    """The effective token split of one model's context window (see the module docstring)."""

    window: int
    reserve_output: int
    system: int
    non_system: int
    compact_reserve: int
    compact_trigger: int
    keep_recent: int
    max_summary: int
    scale: float = 1.0
    """The factor the configured reserves were multiplied by (1.0: used as configured)."""
    configured: Reserves | None = None

    @property
    def input_limit(self) -> int:
        """What one request may fill: the window less the output reserve."""
        return self.window - self.reserve_output

    @property
    def scaled(self) -> bool:
        """Whether the configured reserves were scaled down to fit the window."""
        return self.scale < 1.0

    def needs_compaction(self, non_system_tokens: int) -> bool:
        """True when the messages are over the compaction trigger."""
        return non_system_tokens > self.compact_trigger

    def with_system(self, system_tokens: int) -> ContextBudget:
        """This budget for a system prompt of `system_tokens` (rule 2); ValueError when the
        window then has no room for messages."""
        if system_tokens <= self.system or self.configured is None:
            return self
        return _fit(self.window, self.configured, system_tokens)

    def status(self, *, system_tokens: int, non_system_tokens: int) -> BudgetStatus:
        """The numbers of one turn, for the context event."""
        return BudgetStatus(
            window=self.window,
            reserve_output=self.reserve_output,
            system_budget=self.system,
            system_tokens=system_tokens,
            non_system_budget=self.non_system,
            non_system_tokens=non_system_tokens,
            compact_trigger=self.compact_trigger,
            over_trigger=self.needs_compaction(non_system_tokens),
            over_window=system_tokens + non_system_tokens > self.input_limit,
        )

    def describe(self) -> str:
        """One line of the effective numbers, for `config check`."""
        note = f" (configured reserves scaled by {self.scale:.2f} to fit)" if self.scaled else ""
        return (
            f"window {self.window}: output reserve {self.reserve_output}, system {self.system}, "
            f"messages {self.non_system}, compaction at {self.compact_trigger} "
            f"(reserve {self.compact_reserve}), keep recent {self.keep_recent}, "
            f"summary ≤ {self.max_summary}{note}"
        )


@dataclass(frozen=True, slots=True)
class BudgetStatus:
    """A budget and what one turn's context uses of it."""

    window: int
    reserve_output: int
    system_budget: int
    system_tokens: int
    non_system_budget: int
    non_system_tokens: int
    compact_trigger: int
    over_trigger: bool
    over_window: bool

    def as_dict(self) -> dict[str, int | bool]:
        """The numbers as a flat mapping (an event payload)."""
        return {
            "window": self.window,
            "reserve_output": self.reserve_output,
            "system_budget": self.system_budget,
            "system_tokens": self.system_tokens,
            "non_system_budget": self.non_system_budget,
            "non_system_tokens": self.non_system_tokens,
            "compact_trigger": self.compact_trigger,
            "over_trigger": self.over_trigger,
            "over_window": self.over_window,
        }


def compute_budget(
    *,
    context_window: int,
    context: ContextConfig,
    compact: CompactConfig,
    system_tokens: int = 0,
) -> ContextBudget:
    """The effective budget of `context_window` per `context` and `compact`.

    `system_tokens` is the measured size of the system prompt, when known. Raises ValueError,
    naming the numbers, when the window cannot hold the output reserve, the system prompt and
    `MIN_MESSAGE_ROOM` tokens of messages.
    """
    return _fit(context_window, Reserves.from_config(context, compact), system_tokens)


def _fit(window: int, configured: Reserves, system_tokens: int) -> ContextBudget:
    if window <= 0:
        raise ValueError(f"context_window must be positive, got {window}")
    reserve, system, compact_reserve = (
        configured.reserve_output,
        configured.system,
        configured.compact_reserve,
    )
    total = reserve + system + compact_reserve
    cap = window // 2
    scale = 1.0
    if total > cap:
        scale = cap / total
        reserve = max(min(configured.reserve_output, OUTPUT_FLOOR), math.floor(reserve * scale))
        system = math.floor(system * scale)
        compact_reserve = math.floor(compact_reserve * scale)
    system = max(system, system_tokens)
    room = window - reserve - system
    if room < MIN_MESSAGE_ROOM:
        measured = ", measured" if system == system_tokens and system_tokens else ""
        raise ValueError(
            f"a context window of {window} tokens cannot work: after the output reserve "
            f"({reserve}) and the system prompt ({system}{measured}) it leaves {room} tokens "
            f"for messages, fewer than the {MIN_MESSAGE_ROOM} needed; use the model's real "
            "context_window if it is larger, lower reserve_output_tokens / "
            "dynamic_system_budget, or disable tools to shorten the system prompt"
        )
    non_system = room
    if configured.non_system is not None:
        non_system = min(configured.non_system, room)
        if non_system < MIN_MESSAGE_ROOM:
            raise ValueError(
                f"context.non_system_budget = {configured.non_system} leaves fewer than "
                f"{MIN_MESSAGE_ROOM} tokens for messages; raise it or leave it unset"
            )
    compact_reserve = min(compact_reserve, non_system // 2)
    trigger = non_system - compact_reserve
    return ContextBudget(
        window=window,
        reserve_output=reserve,
        system=system,
        non_system=non_system,
        compact_reserve=compact_reserve,
        compact_trigger=trigger,
        keep_recent=min(configured.keep_recent, trigger // 2),
        max_summary=min(configured.max_summary, max(SUMMARY_FLOOR, trigger // 4)),
        scale=scale,
        configured=configured,
    )
