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

What a resumed session's mode is: the mode this runtime last knew for the session; in another
process, the one its stored messages show — the last ``enter_plan_mode`` / ``exit_plan_mode``
call whose result is not an error (`plan_mode_in`). A run started in plan mode whose model
never called either tool leaves nothing in the messages, so only this runtime remembers it.

`permissions.mode = "plan"` in the config keeps every run in plan mode whatever this switch says.
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
    PlanReview,
    PlanReviewer,
    printable,
)
from soong_agent.ports.events import PlanModeChanged
from soong_agent.ports.messages import Message

__all__ = [
    "ENTER_PLAN_MODE",
    "EXIT_PLAN_MODE",
    "PLAN_TOOL_NAMES",
    "PlanModes",
    "offered_in_plan_mode",
    "plan_mode_in",
    "plan_mode_tools",
]

ENTER_PLAN_MODE = "enter_plan_mode"
EXIT_PLAN_MODE = "exit_plan_mode"
PLAN_TOOL_NAMES: frozenset[str] = frozenset(
    {"plan_write", "plan_read", "plan_list", ENTER_PLAN_MODE, EXIT_PLAN_MODE}
)
"""The tools plan mode allows besides the read-only ones."""

PREVIEW_LINES = 20

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


def offered_in_plan_mode(tools: Iterable[Tool]) -> list[Tool]:
    """The tools a run in plan mode may offer the model: read-only ones and the plan tools
    (only what is offered; the gate refuses the others whatever is offered)."""
    return [t for t in tools if t.permission_class == "read_only" or t.name in PLAN_TOOL_NAMES]


class PlanModes:
    """Which sessions of a runtime are in plan mode (in memory; shared by the gate and the
    plan-mode tools)."""

    def __init__(self) -> None:
        self._active: set[str] = set()
        """The sessions in plan mode: only those are kept, so a runtime serving many sessions
        holds nothing for the others (one leaving plan mode leaves it, in its transcript)."""

    def active(self, session_id: str) -> bool:
        """Whether calls of this session's runs are held to plan mode."""
        return session_id in self._active

    def set(self, session_id: str, active: bool) -> bool:
        """Switch the session's mode; whether it changed."""
        changed = self.active(session_id) != active
        if active:
            self._active.add(session_id)
        else:
            self._active.discard(session_id)
        return changed

    def begin_run(
        self, session_id: str, *, plan_mode: bool = False, earlier: Iterable[Message] = ()
    ) -> dict[str, Any] | None:
        """Set the mode a new run of the session starts in and return the `PlanModeChanged`
        fields to record when it starts in plan mode (None: it does not).

        `plan_mode`: the run was asked to start in plan mode (`run --plan`); else a resumed
        session keeps the mode this runtime knows for it, or the one `earlier` (the session's
        stored messages) shows (a session that left plan mode did so with an approved
        `exit_plan_mode`, which its messages show).
        """
        if plan_mode:
            self.set(session_id, True)
            return {"active": True, "source": "run_start", "reason": "the run started in plan mode"}
        restored = self.active(session_id) or bool(plan_mode_in(earlier))
        self.set(session_id, restored)
        if restored:
            return {
                "active": True,
                "source": "resume",
                "reason": "the session was in plan mode when its last run ended",
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
        if isinstance(self._approver, PlanReviewer):
            review = await self._approver.review_plan(request)
        else:
            review = PlanReview(approved=await self._approver.decide(request) != "deny")
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
