"""Run events of agents (LOOP-3): a preset switched, child runs started and finished (AGT-2,
AGT-4), teammates changed (TEAM). Part of `soong_agent.ports.events.RunEvent`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from soong_agent.ports.event_base import EventBase, RunStatus, no_usage
from soong_agent.ports.streaming import Usage


class AgentSwitched(EventBase):
    """A session that had no messages yet was given another agent (preset, AGT-3)."""

    type: Literal["agent_switched"] = "agent_switched"
    previous: str | None
    agent: str


ChildKind = Literal["sub_agent", "fork", "worker", "teammate"]
"""How a child run was started: `create_sub_agent`, `fork_agent`, `dispatch_worker` or
`spawn_teammate` (a long-lived teammate: one session, many runs)."""


class ChildStarted(EventBase):
    """A child agent's run began (AGT-2, AGT-4). Recorded in the parent's run and, as the
    first event, in the child's own run: the link between the two sessions."""

    type: Literal["child_started"] = "child_started"
    kind: ChildKind
    agent: str
    child_session_id: str
    child_run_id: str
    parent_session_id: str
    parent_run_id: str
    parent_call_id: str
    task: str
    model: str = ""
    pool: str | None = None
    worker: str | None = None
    depth: int = 1
    """How deep the child is: one more than its parent (a root run's children are 1)."""


class ChildFinished(EventBase):
    """A child agent's run ended; its usage and cost are the child's own (the parent's
    budgets count them too)."""

    type: Literal["child_finished"] = "child_finished"
    kind: ChildKind
    agent: str
    child_session_id: str
    child_run_id: str
    parent_call_id: str
    status: RunStatus
    reason: str | None = None
    turns: int = 0
    usage: Usage = Field(default_factory=no_usage)
    cost_usd: float | None = None
    pool: str | None = None
    worker: str | None = None


MemberStatus = Literal["idle", "working", "waiting_approval", "stopped"]
"""A teammate's status label: what the lead and autonomous claiming go by."""


class TeamChanged(EventBase):
    """A teammate joined, changed status or took up a step (recorded in the lead's run while
    one is running, and in the teammate's own runs)."""

    type: Literal["team_changed"] = "team_changed"
    team: str
    member: str
    role: str
    status: MemberStatus
    step: str | None = None
    reason: str = ""
