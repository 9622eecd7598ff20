"""The context budget of a run's model (CTX-4): from the policies alone (computed once per
policies, with the calibration a run starts with), or for a system prompt of a known size."""

from __future__ import annotations

from soong_agent.application.runs.spec import RunPolicies
from soong_agent.domain.budget import ContextBudget, compute_budget
from soong_agent.domain.token_estimate import ProviderCalibration
from soong_agent.ports.errors import ConfigError

__all__ = ["PolicyBudget", "budget_of"]


def budget_of(p: RunPolicies, system_tokens: int) -> ContextBudget:
    """The budget of the model under `p` with a system prompt of `system_tokens` (0: the
    configured allowance); ConfigError when the window cannot work."""
    try:
        return compute_budget(
            context_window=p.context_window,
            context=p.context,
            compact=p.compact,
            system_tokens=system_tokens,
        )
    except ValueError as exc:
        raise ConfigError(f"context budget of the model: {exc}") from exc


class PolicyBudget:
    """What depends only on the policies (the budget, the calibration a run starts with),
    kept with the policies it was computed for (they are frozen)."""

    def __init__(self) -> None:
        self._fixed: tuple[RunPolicies, ContextBudget, ProviderCalibration] | None = None

    def of(self, p: RunPolicies) -> tuple[ContextBudget, ProviderCalibration]:
        """The budget and the starting calibration of runs under `p`, computed once per
        policies (ConfigError, never remembered, when the window cannot work)."""
        fixed = self._fixed
        if fixed is None or fixed[0] is not p:
            budget = budget_of(p, 0)
            fixed = self._fixed = (p, budget, ProviderCalibration.initial(p.provider_name))
        return fixed[1], fixed[2]
