"""What binds a run, computed in one place for every kind of run (AGT-1, AGT-3, PLAN-2, TEAM-4).

Every run a session starts — a root run, a sub-agent, a fork, an orchestrator's worker, a
teammate — is held to the strictest of:

- the user's configuration: `permissions.mode`, the deny and allow rules, `tools.disabled`
  (every run's permission gate decides under the runtime's one `[permissions]` section, and
  every run's tools come from the one catalog `tools.disabled` was applied to);
- its agent definition: the `tools` ceiling, `permission_mode` (when stricter), `skills`
  (applied when the definition's run set-up is made, the same way for the root and children);
- the run that started it: its permission mode (a child is never in a looser mode than its
  parent) and its session's plan mode (a child is linked to its parent's session: in plan mode
  while the parent is);
- its own session's record: a session left in plan mode is in plan mode when it resumes, in
  any process, until a plan is approved.

`bind_run` is the one function that applies the last two; `RunService.start`, `ParentLink`
and `TeamService` call it for every run they start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from soong_agent.application.permissions.plan_mode import plan_mode_in, stored_plan_mode
from soong_agent.application.runs.assembler import RunAssembler
from soong_agent.domain.permissions import PermissionMode, strictest_mode
from soong_agent.ports.errors import UsageError
from soong_agent.ports.messages import Message

__all__ = ["BoundRun", "ParentRun", "bind_run"]


@dataclass(frozen=True, slots=True)
class ParentRun:
    """What a child run inherits from the run that started it."""

    session_id: str
    """The parent's session: the child takes its plan mode from it."""
    mode: PermissionMode
    """The parent run's permission mode: the child's is at least as strict."""


@dataclass(frozen=True, slots=True)
class BoundRun:
    """A run's assembler under its effective policy, and the plan-mode event it starts with."""

    assembler: RunAssembler
    plan_event: dict[str, Any] | None
    """The `PlanModeChanged` fields to record at the run's start (None: not in plan mode)."""

    @property
    def mode(self) -> PermissionMode:
        """The permission mode the run is held to."""
        return self.assembler.policies.permissions.mode


async def bind_run(
    assembler: RunAssembler,
    *,
    session_id: str,
    resumed: bool,
    parent: ParentRun | None = None,
    plan_mode: bool = False,
    mode_source: str = "permissions.mode",
    earlier: Sequence[Message] = (),
) -> BoundRun:
    """The effective policy of one run of `session_id`.

    `assembler` is the run's own (the configuration and its agent definition applied);
    `resumed`: the session has a record to read its plan mode from; `parent`: the run that
    started this one; `plan_mode`: the run was asked to start in plan mode (`run --plan`, SDK
    `plan_mode=True`); `mode_source` names what set the assembler's mode (for the event);
    `earlier`: the session's stored messages, whose plan-mode tool calls say its mode when
    no run of it recorded events (a session kept before plan mode was recorded).
    UsageError when plan mode is asked for in a runtime without the plan tools.
    """
    own = assembler.policies.permissions.mode
    mode = strictest_mode(own, parent.mode if parent is not None else None)
    if mode != own:
        permissions = assembler.policies.permissions.model_copy(update={"mode": mode})
        assembler = assembler.derived(
            policies=dataclasses.replace(assembler.policies, permissions=permissions)
        )
        mode_source = "the mode of the agent that started this one"
    modes = assembler.ports.plan_modes
    if modes is None:
        if plan_mode:
            raise UsageError("plan mode needs the plan tools, which this runtime does not have")
        return BoundRun(assembler, None)
    restored = False
    if resumed and not plan_mode:
        stored = await stored_plan_mode(assembler.ports.store, session_id)
        restored = bool(plan_mode_in(earlier)) if stored is None else stored
    event = modes.begin_run(
        session_id,
        plan_mode=plan_mode,
        restored=restored,
        enforced=mode_source if mode == "plan" else None,
        parent=parent.session_id if parent is not None else None,
    )
    return BoundRun(assembler, event)
