"""Plan mode (PLAN-1, PLAN-2 of seed 002): a run-time switch into `permissions.mode = "plan"`.

In plan mode only read-only tools and the plan tools (`PLAN_TOOL_NAMES`) run. The permission
engine enforces it, not the tool list: the `PermissionGate` asks `PlanModes.active(session)`
for every call and then decides in mode ``plan`` (`domain/permissions/policy.decide`: a tool
that is not read-only is denied, the plan tools are allowed; deny rules still come first), so
a `write_file` or `run_command` the model calls anyway is refused with the reason.

The switch, per session of a runtime (`PlanModes`, shared by the gate and the two tools):

- `enter_plan_mode` turns it on;
- `exit_plan_mode(plan_name)` asks the user, through the `Approver` port, to approve the plan
  (the request shows the plan file's path and its first lines): ``allow_once`` or
  ``allow_for_session`` approve it and leave plan mode; ``deny`` keeps plan mode and the model is
  told to keep planning; with no approver plan mode stays on and the model is told why;
- a run started with `plan_mode=True` (`run --plan`, SDK ``plan_mode=True``) starts in it, and a
  resumed session gets back the mode it was in (`PlanModes.begin_run`).

Every change is a `PlanModeChanged` event: the tools hand theirs to the pipeline as
`ToolOutput.events`; `begin_run` returns the fields of a run's starting one.

What a resumed session's mode is — in this process or any other: the one its record says. Every
change is a `PlanModeChanged` event in the session store, and a run that starts in plan mode
records one at its start, so the last such event of the session's latest recorded run (its own,
not one inherited from a parent) is the mode it was left in (`stored_plan_mode`); a session
recorded before those events falls back to its messages — the last successful
``enter_plan_mode`` / ``exit_plan_mode`` call (`plan_mode_in`).

`permissions.mode = "plan"` (or an agent definition's `permission_mode: plan`) keeps every run
in plan mode whatever this switch says, and turns the session's switch on as well: the session
stays in plan mode until a plan is approved, even when the setting changes later.

A child run (sub-agent, fork, worker, teammate) is linked to the session that started it: it is
in plan mode while that session is (`PlanModes.link`), and cannot leave it itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import Field

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput
from soong_agent.application.tools.plans import PlanStore, check_plan_name
from soong_agent.domain.config.schema import PlanConfig
from soong_agent.ports.approval import (
    ApprovalRequest,
    Approver,
    printable,
)
from soong_agent.ports.events import PlanModeChanged
from soong_agent.ports.messages import Message
from soong_agent.ports.storage import SessionStore

__all__ = [
    "ENTER_PLAN_MODE",
    "EXIT_PLAN_MODE",
    "PARENT_SOURCE",
    "PLAN_TOOL_NAMES",
    "PlanModes",
    "offered_in_plan_mode",
    "plan_mode_in",
    "plan_mode_tools",
    "stored_plan_mode",
]

ENTER_PLAN_MODE = "enter_plan_mode"
EXIT_PLAN_MODE = "exit_plan_mode"
PLAN_TOOL_NAMES: frozenset[str] = frozenset(
    {"plan_write", "plan_read", "plan_list", ENTER_PLAN_MODE, EXIT_PLAN_MODE}
)
"""The tools plan mode allows besides the read-only ones."""

PREVIEW_LINES = 20
PARENT_SOURCE = "parent"
"""The `PlanModeChanged.source` of a child run that is in plan mode because the session that
started it is: not the child's own switch (a record of the child's own mode skips it)."""

_ON = (
    "Plan mode is on: only read-only tools and the plan tools (plan_write, plan_read, "
    "plan_list) run; writes and commands are refused. Explore, write the plan with plan_write, "
    "then call exit_plan_mode with its name to ask the user to approve it."
)


def plan_mode_in(messages: Iterable[Message]) -> bool | None:
    """The mode the last successful ``enter_plan_mode`` / ``exit_plan_mode`` call of
    `messages` (in the order written) left the session in; None when there is none."""
    mode: bool | None = None
    for message in messages:
        for result in message.tool_results:
            if result.is_error:
                continue
            if result.name == ENTER_PLAN_MODE:
                mode = True
            elif result.name == EXIT_PLAN_MODE:
                mode = False
    return mode


async def stored_plan_mode(store: SessionStore, session_id: str) -> bool | None:
    """The plan mode the session's record says it was left in: the last `PlanModeChanged` of
    its own (not inherited from a parent) in its latest run that recorded anything, False
    when that run recorded none; None when no run of the session recorded anything."""
    for run in reversed(await store.list_runs(session_id)):
        events = await store.run_events(run.id)
        if not events:
            continue
        mode = False
        for event in events:
            if isinstance(event, PlanModeChanged) and event.source != PARENT_SOURCE:
                mode = event.active
        return mode
    return None


def offered_in_plan_mode(tools: Iterable[Tool]) -> list[Tool]:
    """The tools a run in plan mode may offer the model: read-only ones and the plan tools
    (only what is offered; the gate refuses the others whatever is offered)."""
    return [t for t in tools if t.permission_class == "read_only" or t.name in PLAN_TOOL_NAMES]


class PlanModes:
    """Which sessions of a runtime are in plan mode (in memory; shared by the gate and the
    plan-mode tools), and which session each child session takes its plan mode from.

    A session's own switch is what `enter_plan_mode`, `exit_plan_mode`, `run --plan` and a
    plan-mode configuration set, and what its record keeps (`stored_plan_mode`). A child
    session (a sub-agent, fork, worker or teammate) is *linked* to the session that started it:
    it is in plan mode while that one is, whatever its own switch says, and only that one can
    leave it (by an approved plan)."""

    def __init__(self) -> None:
        self._active: set[str] = set()
        """The sessions whose own switch is on: only those are kept, so a runtime serving
        many sessions holds nothing for the others."""
        self._parents: dict[str, str] = {}
        """child session -> the session it takes plan mode from."""

    def active(self, session_id: str) -> bool:
        """Whether calls of this session's runs are held to plan mode: its own switch, or
        that of a session it is linked to (up the chain)."""
        if session_id in self._active:
            return True
        parents = self._parents
        if not parents:
            return False
        seen = {session_id}
        parent = parents.get(session_id)
        while parent is not None and parent not in seen:
            if parent in self._active:
                return True
            seen.add(parent)
            parent = parents.get(parent)
        return False

    def own(self, session_id: str) -> bool:
        """Whether the session's own switch is on (not only a linked session's)."""
        return session_id in self._active

    def link(self, session_id: str, parent_session_id: str) -> None:
        """Make `session_id` take plan mode from `parent_session_id` (kept for the runtime's
        life: a child session belongs to its parent for good)."""
        if session_id != parent_session_id:
            self._parents[session_id] = parent_session_id

    def set(self, session_id: str, active: bool) -> bool:
        """Switch the session's own mode; whether it changed."""
        changed = self.own(session_id) != active
        if active:
            self._active.add(session_id)
        else:
            self._active.discard(session_id)
        return changed

    def begin_run(
        self,
        session_id: str,
        *,
        plan_mode: bool = False,
        restored: bool = False,
        enforced: str | None = None,
        parent: str | None = None,
    ) -> dict[str, Any] | None:
        """Set the mode a new run of the session starts in and return the `PlanModeChanged`
        fields to record when it starts in plan mode (None: it does not).

        `plan_mode`: the run was asked to start in plan mode (`run --plan`); `restored`: the
        session's record says it is in plan mode (`stored_plan_mode`); `enforced`: what holds
        the run to mode ``plan`` when something does (``permissions.mode`` or an agent
        definition's `permission_mode`; the switch is turned on too, so the session stays in
        plan mode until a plan is approved, even if that setting changes); `parent`: the
        session this one is linked to (a child's), whose plan mode it shares.
        """
        if parent is not None:
            self.link(session_id, parent)
        if plan_mode:
            self.set(session_id, True)
            return {"active": True, "source": "run_start", "reason": "the run started in plan mode"}
        if enforced is not None:
            self.set(session_id, True)
            return {"active": True, "source": "config", "reason": f"{enforced} is plan"}
        self.set(session_id, restored)
        if restored:
            return {
                "active": True,
                "source": "resume",
                "reason": "the session was in plan mode when its last run ended",
            }
        if parent is not None and self.active(session_id):
            return {
                "active": True,
                "source": PARENT_SOURCE,
                "reason": "the session that started this one is in plan mode",
            }
        return None


class EnterPlanModeArgs(ToolArgs):
    pass


class ExitPlanModeArgs(ToolArgs):
    plan_name: str = Field(description="The name of the plan written with plan_write.")


class _PlanModeTools:
    def __init__(self, modes: PlanModes, approver: Approver | None, plans: PlanStore) -> None:
        self._modes = modes
        self._approver = approver
        self._plans = plans

    async def enter(self, args: EnterPlanModeArgs, ctx: ToolContext) -> ToolOutput:
        if not self._modes.set(ctx.session_id, True):
            return ToolOutput("Plan mode is already on. " + _ON)
        event = {"active": True, "source": ENTER_PLAN_MODE, "reason": "the model entered it"}
        return ToolOutput(_ON, events=((PlanModeChanged, event),))

    async def exit(self, args: ExitPlanModeArgs, ctx: ToolContext) -> ToolOutput:
        name = args.plan_name
        if not self._modes.active(ctx.session_id):
            return ToolOutput("Plan mode is not on; nothing to leave.")
        if not self._modes.own(ctx.session_id):
            return ToolOutput(
                "Plan mode is held by the agent that started you: only it can leave plan mode, "
                "when the user approves its plan. Keep to reading and planning; report your "
                "findings in your answer.",
                is_error=True,
            )
        try:
            check_plan_name(name)
        except ValueError as exc:
            return ToolOutput(f"{exc}. Plan mode stays on.", is_error=True)
        plan = await self._plans.load(name, ctx)
        shown = ctx.fs.display_path(self._plans.path(name))
        if plan is None:
            return ToolOutput(
                f"there is no plan {name!r} ({shown}); write it with plan_write first. Plan mode "
                "stays on.",
                is_error=True,
            )
        if self._approver is None:
            return ToolOutput(
                f"Nobody can approve the plan {name!r} ({shown}): this run has no approval "
                "callback. Plan mode stays on: writes and commands are still refused. Tell the "
                "user where the plan is; they can approve it in a run that can ask them.",
                is_error=True,
            )
        lines = plan.body.splitlines()
        head = "\n".join(lines[:PREVIEW_LINES])
        more = len(lines) - PREVIEW_LINES
        detail = head + (f"\n[... {more} more lines in {shown}]" if more > 0 else "")
        first = next((line.strip() for line in lines if line.strip()), "(empty)")
        request = ApprovalRequest(
            tool=EXIT_PLAN_MODE,
            call_id=f"{ctx.run_id}:{EXIT_PLAN_MODE}:{name}",
            permission_class="read_only",
            summary=printable(
                f'approve the plan {shown} ("{first[:80]}", {len(lines)} lines) and leave plan mode'
            ),
            session_scope="nothing (each plan is approved on its own)",
            detail=printable(detail),
        )
        review = await self._approver.review_plan(request)
        if not review.approved:
            said = f' The user says: "{review.note}".' if review.note else ""
            return ToolOutput(
                f"The user did not approve the plan {name!r} ({shown}).{said} Plan mode stays "
                "on: keep planning — revise the plan with plan_write, and call exit_plan_mode "
                "again when it is ready.",
                is_error=True,
            )
        self._modes.set(ctx.session_id, False)
        event = {
            "active": False,
            "source": EXIT_PLAN_MODE,
            "plan": name,
            "reason": "the user approved the plan",
        }
        return ToolOutput(
            f"The user approved the plan {name!r} ({shown}). Plan mode is off: carry out the "
            "plan now.",
            events=((PlanModeChanged, event),),
        )


def plan_mode_tools(modes: PlanModes, *, approver: Approver | None, plan: PlanConfig) -> list[Tool]:
    """`enter_plan_mode` and `exit_plan_mode(plan_name)` over `modes`; `approver` is asked to
    approve a plan (None: plans cannot be approved, plan mode stays on); `plan`: where the
    plans are (`plan.default_dir`, placeholders expanded)."""
    tools = _PlanModeTools(modes, approver, PlanStore(plan))

    def describe_enter(args: EnterPlanModeArgs, ctx: ToolContext) -> tuple[str, str]:
        return "*", "enter plan mode (read-only tools and the plan tools only)"

    def describe_exit(args: ExitPlanModeArgs, ctx: ToolContext) -> tuple[str, str]:
        return "*", f"ask the user to approve the plan {args.plan_name} and leave plan mode"

    return [
        Tool(
            name=ENTER_PLAN_MODE,
            description=(
                "Enter plan mode before a large or risky change: only read-only tools and the "
                "plan tools run until the user approves a plan (exit_plan_mode)."
            ),
            args_model=EnterPlanModeArgs,
            handler=tools.enter,
            describe=describe_enter,
        ),
        Tool(
            name=EXIT_PLAN_MODE,
            description=(
                "Ask the user to approve the plan written with plan_write (by its name); if "
                "they approve, plan mode ends and you carry it out; if not, keep planning."
            ),
            args_model=ExitPlanModeArgs,
            handler=tools.exit,
            describe=describe_exit,
        ),
    ]
