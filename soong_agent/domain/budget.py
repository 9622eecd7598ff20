"""The context budget (CTX-4): how the context window is split, as pure arithmetic.

`context_window − reserve_output_tokens` is what a request may fill. The system prompt gets
`dynamic_system_budget`; the messages get the rest (`non_system_budget`, derived when unset and
never more than what is left). Compaction (CTX-6) starts when the messages exceed
`non_system − compact.reserve_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass

from soong_agent.domain.config.schema import CompactConfig, ContextConfig


@dataclass(frozen=True, slots=True)
class ContextBudget:
    """The token split of one model's context window."""

    window: int
    reserve_output: int
    system: int
    non_system: int
    compact_trigger: int

    @property
    def input_limit(self) -> int:
        """What one request may fill: the window less the output reserve."""
        return self.window - self.reserve_output

    def needs_compaction(self, non_system_tokens: int) -> bool:
        """True when the messages are over the compaction trigger."""
        return non_system_tokens > self.compact_trigger

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
    *, context_window: int, context: ContextConfig, compact: CompactConfig
) -> ContextBudget:
    """Split `context_window` per `context` and `compact`.

    The non-system part is `window − reserve_output − system` when `non_system_budget` is unset;
    an explicit value is capped by that. Raises ValueError when the window leaves no room for
    messages once the output reserve and the system part are taken.
    """
    if context_window <= 0:
        raise ValueError(f"context_window must be positive, got {context_window}")
    reserve = context.reserve_output_tokens
    system = context.dynamic_system_budget
    room = context_window - reserve - system
    if room <= 0:
        raise ValueError(
            f"context window of {context_window} tokens cannot hold reserve_output_tokens "
            f"({reserve}) + dynamic_system_budget ({system}) = {reserve + system} tokens and "
            "still leave room for messages; raise the model's context_window or lower those "
            "budgets"
        )
    explicit = context.non_system_budget
    non_system = room if explicit is None else min(explicit, room)
    return ContextBudget(
        window=context_window,
        reserve_output=reserve,
        system=system,
        non_system=non_system,
        compact_trigger=max(0, non_system - compact.reserve_tokens),
    )
