"""The task tools (TASK-1): a task DAG on disk that any run of the session, in this process or
another one started later, can take work from.

`task_create`, `task_add_step`, `task_claim` (a given step or the next ready one),
`task_heartbeat`, `task_complete`, `task_fail`, `task_release` and `task_board`. Every call
appends one record to the task's WAL through the `TaskLog` (which checks the transition under
its lock); a refused transition is an error result carrying the reason, and nothing is written.
Time comes from the `Clock`; the actor of every record is the calling run's id. A log problem
(a torn last line) is told to the model once per tool set.

`task_board_text` renders the board of a session for the system prompt (TASK-2).

These tools only write the task WALs, never project files: they are ``read_only`` for the
permission engine, like `todo_write`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from pydantic import Field

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput
from soong_agent.domain.tasks.board import BoardTask, duration, render_board, step_line
from soong_agent.domain.tasks.names import NAME_RULE
from soong_agent.domain.tasks.state import TaskState, fold
from soong_agent.ports.defaults import no_items
from soong_agent.ports.errors import SoongAgentError
from soong_agent.ports.system import Clock
from soong_agent.ports.tasks import (
    StepAdded,
    StepClaimed,
    StepCompleted,
    StepFailed,
    StepHeartbeat,
    StepReleased,
    TaskCreated,
    TaskLog,
    TaskRecord,
    TaskTransitionRefused,
)

CLAIM_ATTEMPTS = 5
"""How often `task_claim` without a step id picks the next ready step again after another
actor took the one it picked."""

_TASK = Field(description=f"The task's name: {NAME_RULE}.")
_STEP = Field(description=f"The step's id within the task: {NAME_RULE}.")


class TaskCreateArgs(ToolArgs):
    name: str = _TASK
    title: str = Field(description="What the task is about, in one line.")
    description: str = Field(default="", description="More about the task (optional).")


class TaskAddStepArgs(ToolArgs):
    task: str = _TASK
    step_id: str = _STEP
    title: str = Field(description="What the step does, in one line.")
    depends_on: list[str] = Field(
        default_factory=no_items,
        description="Ids of steps (already added) that must be done before this one can run.",
    )
    role: str | None = Field(
        default=None, description="Teams: only a teammate of this agent definition takes it."
    )
    tools: list[str] = Field(
        default_factory=no_items, description="Teams: tools a teammate needs to take it."
    )
    labels: list[str] = Field(
        default_factory=no_items, description="Teams: labels a teammate needs to take it."
    )


class TaskClaimArgs(ToolArgs):
    task: str = _TASK
    step_id: str | None = Field(
        default=None, description="The step to claim; omit it to claim the next ready step."
    )


class TaskStepArgs(ToolArgs):
    task: str = _TASK
    step_id: str = _STEP


class TaskCompleteArgs(TaskStepArgs):
    summary: str = Field(default="", description="What was done, in a line or two.")


class TaskFailArgs(TaskStepArgs):
    reason: str = Field(description="Why the step cannot be done.")


class TaskBoardArgs(ToolArgs):
    task: str | None = Field(
        default=None, description="One task to show in full; omit it for the session's board."
    )


def _describe(args: ToolArgs, ctx: ToolContext) -> tuple[str, str]:
    fields = args.model_dump(exclude_none=True)
    name = fields.get("task") or fields.get("name") or "*"
    step = fields.get("step_id")
    return "*", f"task {name}" + (f" step {step}" if step else "")


class TaskTools:
    """The handlers of the task tools over one log and clock."""

    def __init__(
        self,
        log: TaskLog,
        clock: Clock,
        lease_ms: int,
        *,
        recent_limit: int = 20,
        recent_window_minutes: int = 30,
    ) -> None:
        if lease_ms <= 0:
            raise ValueError("lease_ms must be positive")
        self._log = log
        self._clock = clock
        self._lease_s = lease_ms / 1000
        self._recent = (recent_limit, recent_window_minutes)
        self._told: set[str] = set()

    # -- helpers ------------------------------------------------------------------------------

    def _state(self, session_id: str, name: str) -> tuple[TaskState, list[str]]:
        records, problems = self._log.read(session_id, name)
        result = fold(records)
        return result.state, [*problems, *result.problems]

    def _news(self, session_id: str, name: str, problems: list[str]) -> str:
        """Problems of the log not yet told to the model, as a suffix."""
        fresh = [p for p in problems if f"{session_id}/{name}: {p}" not in self._told]
        self._told.update(f"{session_id}/{name}: {p}" for p in fresh)
        return "".join(f"\nwarning: task log {name}: {p}" for p in fresh)

    async def _append(
        self, ctx: ToolContext, name: str, record: TaskRecord, done: Callable[[TaskRecord], str]
    ) -> ToolOutput:
        try:
            stored = await asyncio.to_thread(self._log.append, ctx.task_session, name, record)
            _, problems = await asyncio.to_thread(self._log.read, ctx.task_session, name)
        except TaskTransitionRefused as exc:
            return ToolOutput(f"refused: {exc.reason}", is_error=True)
        except SoongAgentError as exc:
            return ToolOutput(f"task {name!r}: {exc}", is_error=True)
        return ToolOutput(done(stored) + self._news(ctx.task_session, name, problems))

    # -- handlers -----------------------------------------------------------------------------

    async def create(self, args: TaskCreateArgs, ctx: ToolContext) -> ToolOutput:
        record = TaskCreated(
            seq=0,
            at=self._clock.now(),
            actor=ctx.task_actor,
            title=args.title,
            description=args.description,
        )
        return await self._append(ctx, args.name, record, lambda r: f"task {args.name!r} created")

    async def add_step(self, args: TaskAddStepArgs, ctx: ToolContext) -> ToolOutput:
        record = StepAdded(
            seq=0,
            at=self._clock.now(),
            actor=ctx.task_actor,
            step_id=args.step_id,
            title=args.title,
            depends_on=tuple(args.depends_on),
            role=args.role,
            tools=tuple(args.tools),
            labels=tuple(args.labels),
        )
        after = f" after {', '.join(args.depends_on)}" if args.depends_on else ""
        return await self._append(
            ctx, args.task, record, lambda r: f"step {args.step_id!r} added to {args.task!r}{after}"
        )

    async def claim(self, args: TaskClaimArgs, ctx: ToolContext) -> ToolOutput:
        attempts = 1 if args.step_id is not None else CLAIM_ATTEMPTS
        last: ToolOutput | None = None
        for _ in range(attempts):
            now = self._clock.now()
            step_id = args.step_id
            if step_id is None:
                try:
                    state, _ = await asyncio.to_thread(self._state, ctx.task_session, args.task)
                except SoongAgentError as exc:
                    return ToolOutput(f"task {args.task!r}: {exc}", is_error=True)
                ready = state.ready(now)
                if not ready:
                    return ToolOutput(_nothing_ready(args.task, state, now), is_error=True)
                step_id = ready[0]
            record = StepClaimed(
                seq=0,
                at=now,
                actor=ctx.task_actor,
                step_id=step_id,
                owner=ctx.task_actor,
                lease_expires_at=now + self._lease_s,
            )
            message = (
                f"claimed step {step_id!r} of {args.task!r}; lease ends in "
                f"{duration(self._lease_s)}: call task_heartbeat before then while working"
            )
            last = await self._append(ctx, args.task, record, _constant(message))
            if not last.is_error:
                return last
        assert last is not None
        return last

    async def heartbeat(self, args: TaskStepArgs, ctx: ToolContext) -> ToolOutput:
        now = self._clock.now()
        record = StepHeartbeat(
            seq=0,
            at=now,
            actor=ctx.task_actor,
            step_id=args.step_id,
            lease_expires_at=now + self._lease_s,
        )
        return await self._append(
            ctx,
            args.task,
            record,
            lambda r: f"lease on {args.step_id!r} extended by {duration(self._lease_s)}",
        )

    async def complete(self, args: TaskCompleteArgs, ctx: ToolContext) -> ToolOutput:
        record = StepCompleted(
            seq=0, at=self._clock.now(), actor=ctx.task_actor, step_id=args.step_id,
            summary=args.summary,
        )  # fmt: skip
        return await self._append(
            ctx, args.task, record, lambda r: f"step {args.step_id!r} of {args.task!r} done"
        )

    async def fail(self, args: TaskFailArgs, ctx: ToolContext) -> ToolOutput:
        record = StepFailed(
            seq=0, at=self._clock.now(), actor=ctx.task_actor, step_id=args.step_id,
            reason=args.reason,
        )  # fmt: skip
        return await self._append(
            ctx, args.task, record, lambda r: f"step {args.step_id!r} of {args.task!r} failed"
        )

    async def release(self, args: TaskStepArgs, ctx: ToolContext) -> ToolOutput:
        record = StepReleased(
            seq=0, at=self._clock.now(), actor=ctx.task_actor, step_id=args.step_id
        )
        return await self._append(
            ctx,
            args.task,
            record,
            lambda r: f"step {args.step_id!r} released: anyone may claim it",
        )

    async def board(self, args: TaskBoardArgs, ctx: ToolContext) -> ToolOutput:
        now = self._clock.now()
        try:
            if args.task is None:
                limit, window = self._recent
                text = await asyncio.to_thread(
                    board_text,
                    self._log,
                    ctx.task_session,
                    now,
                    budget_tokens=1_000_000,
                    recent_limit=limit,
                    recent_window_minutes=window,
                )
                return ToolOutput(text)
            state, problems = await asyncio.to_thread(self._state, ctx.task_session, args.task)
        except SoongAgentError as exc:
            return ToolOutput(f"task board: {exc}", is_error=True)
        if not state.created:
            return ToolOutput(f"no task named {args.task!r} in this session", is_error=True)
        text = render_board(
            [BoardTask(args.task, state, tuple(problems))], now, budget_tokens=1_000_000
        )
        return ToolOutput(text)


def _constant(text: str) -> Callable[[TaskRecord], str]:
    return lambda record: text


def _nothing_ready(name: str, state: TaskState, now: float) -> str:
    if not state.created:
        return f"no task named {name!r} in this session"
    lines = [step_line(state, s, now) for s in state.steps]
    return f"no step of {name!r} is ready to claim:\n" + ("\n".join(lines) or "(no steps)")


def board_text(
    log: TaskLog,
    session_id: str,
    now: float,
    *,
    budget_tokens: int,
    recent_limit: int = 20,
    recent_window_minutes: int = 30,
) -> str:
    """The board of every task of `session_id` at `now`."""
    tasks: list[BoardTask] = []
    for ref in log.list(session_id):
        records, problems = log.read(ref.session_id, ref.name)
        result = fold(records)
        tasks.append(BoardTask(ref.name, result.state, (*problems, *result.problems)))
    return render_board(
        tasks,
        now,
        budget_tokens=budget_tokens,
        recent_limit=recent_limit,
        recent_window_minutes=recent_window_minutes,
    )


def task_board_text(
    log: TaskLog,
    session_id: str,
    budget: int,
    *,
    clock: Clock | None = None,
    recent_limit: int = 20,
    recent_window_minutes: int = 30,
) -> str:
    """The session's task board for the system prompt, within `budget` tokens (chars / 4),
    cut at a line with a marker; "" when the session has no task or the budget is 0. Pass
    the config's `task.task_recent_changes_limit` and `…_window_minutes`; without a clock the
    wall clock is used."""
    if budget <= 0 or not log.list(session_id):
        return ""
    now = clock.now() if clock is not None else time.time()
    return board_text(
        log,
        session_id,
        now,
        budget_tokens=budget,
        recent_limit=recent_limit,
        recent_window_minutes=recent_window_minutes,
    )


def task_tools(
    log: TaskLog,
    clock: Clock,
    lease_ms: int,
    *,
    recent_limit: int = 20,
    recent_window_minutes: int = 30,
) -> list[Tool]:
    """The eight task tools over `log`; a claim or heartbeat holds a step for `lease_ms`;
    `task_board` shows the recent changes the config's `task.task_recent_changes_limit` and
    `…_window_minutes` say, as the system prompt's board does."""
    tools = TaskTools(
        log,
        clock,
        lease_ms,
        recent_limit=recent_limit,
        recent_window_minutes=recent_window_minutes,
    )
    spec: list[tuple[str, str, type[ToolArgs], Callable[..., object]]] = [
        ("task_create", "Create a task: a named graph of steps kept on disk, which "
         "this run and later runs (or other agents) work through.", TaskCreateArgs,
         tools.create),
        ("task_add_step", "Add a step to a task; it can be claimed once the steps it "
         "depends on are done.", TaskAddStepArgs, tools.add_step),
        ("task_claim", "Claim a step to work on it (or the next ready one): you hold it "
         "for a lease; extend it with task_heartbeat while you work, or another agent may "
         "take it over.", TaskClaimArgs, tools.claim),
        ("task_heartbeat", "Extend your lease on a step you hold.", TaskStepArgs,
         tools.heartbeat),
        ("task_complete", "Mark a step you hold as done, with a short summary.",
         TaskCompleteArgs, tools.complete),
        ("task_fail", "Mark a step you hold as failed, with the reason.", TaskFailArgs,
         tools.fail),
        ("task_release", "Give a step you hold back, undone, for anyone to claim.",
         TaskStepArgs, tools.release),
        ("task_board", "Show the session's tasks, their steps with status, owner and lease, "
         "and recent changes (or one task in full).", TaskBoardArgs, tools.board),
    ]  # fmt: skip
    return [
        Tool(name, description, args_model, handler, describe=_describe)  # type: ignore[arg-type]
        for name, description, args_model, handler in spec
    ]
