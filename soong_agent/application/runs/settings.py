"""The settings of one run's loop: its limits and model settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from soong_agent.domain.config.schema import PriceConfig
from soong_agent.domain.run_limits import RunLimits
from soong_agent.domain.stuck import StuckSettings
from soong_agent.ports.model import ToolChoice

__all__ = ["LoopSettings"]


@dataclass(frozen=True, slots=True)
class LoopSettings:
    """Limits and model settings of one run."""

    model_label: str
    max_turns: int = 100
    max_continuations: int = 3
    max_output_tokens: int | None = None
    temperature: float | None = None
    price: PriceConfig | None = None
    tool_choice: ToolChoice | None = None
    """Sent with the first model request of the run only (then the model decides)."""
    limits: RunLimits = field(default_factory=RunLimits)
    stuck: StuckSettings = field(default_factory=StuckSettings)
    agent_hash: str | None = None
    """The content hash of the agent definition the run follows (AGT-3), in `run_started`."""
