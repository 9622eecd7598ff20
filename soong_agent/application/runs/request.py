"""What `RunService.start` was asked for, and the session a root run goes into."""

from __future__ import annotations

from dataclasses import dataclass

from soong_agent.application.runs.starter import Assigned
from soong_agent.domain.run_limits import RunLimits
from soong_agent.ports.messages import Message
from soong_agent.ports.model import ToolChoice
from soong_agent.ports.storage import SessionInfo

__all__ = ["StartRequest", "Target"]


@dataclass(frozen=True, slots=True)
class StartRequest:
    """The arguments of one `RunService.start` (see there)."""

    message: str
    session_id: str | None
    from_message: str | None
    tool_choice: ToolChoice | None
    limits: RunLimits | None
    plan_mode: bool
    agent: str | None
    orchestrator: bool
    assigned: Assigned | None


@dataclass(frozen=True, slots=True)
class Target:
    """The session a root run goes into (None: a new one), the path it continues, the agent
    it runs and, when a blank session switched agents, (the previous, the new one)."""

    session: SessionInfo | None
    history: list[Message]
    agent: str | None
    switched: tuple[str | None, str] | None = None
