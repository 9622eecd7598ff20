"""Submitting a run to the queue, and starting a claimed one as `soong-agent run` would
(WORK-1, WORK-2).

A submitted run is given its ids at once (a new session's too), so the submitter can print
them before any worker has seen it. A worker starts it through the project's `RunService` with
those ids and its lease's fence. A takeover (a later attempt, after the worker that held it was
lost) finds the first attempt's run in the session and continues the session from its last
committed turn, as a resume does, asking the model to carry on: the tool calls that completed
are in the session and are not run again; one cut off gets its synthesised result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, get_args

from soong_agent.application.children.pools import tokens_of
from soong_agent.application.runs.assembler import RunAssembler, RunSpec
from soong_agent.application.runs.handle import Run
from soong_agent.application.runs.lineage import Lineage
from soong_agent.application.runs.resume import session_path
from soong_agent.application.runs.service import RunService
from soong_agent.application.runs.starter import Assigned
from soong_agent.application.teams.members import SeatOf
from soong_agent.application.workers.approvals import QUEUED_RUN
from soong_agent.application.workers.worker import AlreadyEnded
from soong_agent.domain.permissions import PermissionMode, SessionGrants
from soong_agent.domain.run_limits import RunLimits
from soong_agent.ports.errors import UsageError
from soong_agent.ports.events import TeamChanged, UsageEvent
from soong_agent.ports.messages import Message
from soong_agent.ports.run_queue import (
    Dispatched,
    Lease,
    QueuedRun,
    RunOptions,
    RunQueue,
    attempt_fence,
    session_end,
)
from soong_agent.ports.storage import RunFence, RunInfo, SessionInfo, SessionStore
from soong_agent.ports.streaming import Usage
from soong_agent.ports.system import Clock, IdGenerator
from soong_agent.ports.telemetry import Telemetry

__all__ = [
    "TAKEOVER_MESSAGE",
    "Submission",
    "attempts_of",
    "spent_by",
    "start_queued",
    "submit_run",
]

TAKEOVER_MESSAGE = (
    "The worker that was running this request stopped before it finished. Carry on with the "
    "request from where the conversation stops; do not redo what is already done."
)


@dataclass(frozen=True, slots=True)
class Submission:
    """What `submit_run` queued."""

    run: QueuedRun


async def submit_run(
    queue: RunQueue,
    store: SessionStore,
    *,
    ids: IdGenerator,
    clock: Clock,
    project_dir: str,
    message: str,
    session_id: str | None = None,
    options: RunOptions | None = None,
    telemetry: Telemetry | None = None,
) -> QueuedRun:
    """Queue a run of `project_dir` (WORK-1): into `session_id` (which must exist and belong
    to the project) or a new session whose id is chosen now. UsageError for an empty message,
    an unknown session or one of another project; nothing is queued then. With `telemetry`,
    the run carries the submitter's trace context (OBS-1): its attempts join that trace."""
    if not message.strip():
        raise UsageError("the message is empty; say what the agent should do")
    options = options or RunOptions()
    if telemetry is not None and options.trace_parent is None:
        origin = options.dispatched
        options = _with(
            options,
            trace_parent=telemetry.trace_parent(
                run_id=origin.parent_run_id if origin is not None else None,
                call_id=origin.parent_call_id if origin is not None else None,
            ),
        )
    if session_id is not None:
        session = await store.get_session(session_id)
        if session is None:
            raise UsageError(f"no session {session_id!r} to queue a run into")
        if session.project_dir != project_dir:
            raise UsageError(
                f"session {session_id} belongs to the project {session.project_dir}, not "
                f"{project_dir}"
            )
        options = _with(options, resume=True)
    elif options.from_message is not None:
        raise UsageError("from_message needs the session_id of the session to branch")
    queued = QueuedRun(
        id=ids.new_id("run"),
        session_id=session_id or ids.new_id("ses"),
        project_dir=project_dir,
        message=message,
        options=options,
        submitted_at=clock.now(),
    )
    return await queue.submit(queued)


async def start_queued(
    service: RunService,
    store: SessionStore,
    lease: Lease,
    *,
    fence_only: bool = False,
    now: float | None = None,
) -> Run:
    """Start the claimed run through `service` (its project's, whose store is `store`), with
    its ids and the lease's fence. A later attempt whose first one reached the session
    continues it (see the module docstring), within what the earlier attempts left of its
    budgets (`now`: the time, for its wall-clock budget; default: the service's clock)."""
    queued, opts = lease.run, lease.run.options
    now = service.starter.clock.now() if now is None else now
    session = await store.get_session(queued.session_id)
    runs = await store.list_runs(queued.session_id) if session is not None else []
    attempts = attempts_of(queued.id, runs)
    earlier = bool(attempts)
    if earlier:
        _check_not_ended(queued, attempts[-1])
    assigned = Assigned(
        run_id=f"{queued.id}-{lease.fence}" if earlier else queued.id,
        session_id=queued.session_id,
        fence=RunFence(queued.id, lease.fence),
        fence_only=fence_only,
    )
    limits = None
    if opts.max_cost_usd is not None or opts.max_tokens is not None or opts.max_wall_ms:
        limits = RunLimits(
            max_cost_usd=opts.max_cost_usd, max_tokens=opts.max_tokens, max_wall_ms=opts.max_wall_ms
        )
    if earlier:  # a takeover gets what its earlier attempts left of the budgets
        base = limits or RunLimits()
        if opts.dispatched is None:
            base = service.budgets(opts.agent, opts.orchestrator).merged(base)
        limits = await _left_after(store, attempts, base, now)
    telemetry = service.telemetry
    if telemetry is not None:  # every attempt continues the submitter's trace (OBS-1)
        if opts.trace_parent:
            telemetry.continue_trace(assigned.run_id, opts.trace_parent)
        if not earlier:
            telemetry.run_claimed(worker=lease.worker, waited_s=now - queued.submitted_at)
    token = QUEUED_RUN.set(queued)  # the run's task copies it: its approvals name the run
    try:
        if opts.dispatched is not None:
            return await _dispatched(
                service, queued, opts.dispatched, session, earlier, limits, assigned
            )
        return await _started(service, queued, session is not None, earlier, limits, assigned)
    finally:
        QUEUED_RUN.reset(token)


async def _started(
    service: RunService,
    queued: QueuedRun,
    stored: bool,
    earlier: bool,
    limits: RunLimits | None,
    assigned: Assigned,
) -> Run:
    """`service.start` with the queued run's message (a takeover's: `TAKEOVER_MESSAGE`) and
    options; `stored`: its session exists."""
    opts = queued.options
    return await service.start(
        TAKEOVER_MESSAGE if earlier else queued.message,
        session_id=queued.session_id if stored else None,
        from_message=None if earlier else opts.from_message,
        limits=limits,
        plan_mode=opts.plan_mode and not earlier,  # a takeover keeps the mode it was in
        agent=opts.agent,
        orchestrator=opts.orchestrator,
        assigned=assigned,
    )


async def _dispatched(
    service: RunService,
    queued: QueuedRun,
    origin: Dispatched,
    session: SessionInfo | None,
    earlier: bool,
    limits: RunLimits | None,
    assigned: Assigned,
) -> Run:
    """Start a run an orchestrator queued (see `application.children.handoff`): a pool
    worker (its pool entry's agent and tool cap) or a teammate's run (its role, worktree and
    seat in the team), held to the orchestrator's mode and budgets, linked to its run; a
    takeover continues the session."""
    if origin.kind == "teammate":
        shape = await _teammate(service, queued, origin)
    else:
        shape = _pool_worker(service, origin, limits, queued.message)
    assembler, spec, lineage = shape.assembler, shape.spec, shape.lineage
    store, starter = assembler.ports.store, service.starter
    claim = None if assigned.fence_only else await store.claim_session(queued.session_id)
    try:
        history: list[Message] = []
        if session is None:
            session = starter.new_session(
                project_dir=assembler.ports.fs.root,
                title=shape.title,
                agent=spec.agent or origin.agent,
                parent_session_id=origin.parent_session_id,
                session_id=queued.session_id,
            )
        else:
            session, history = await session_path(store, session.id, None)
        prepared = await starter.prepare(
            assembler,
            spec,
            lineage,
            session=session,
            message=TAKEOVER_MESSAGE if earlier else queued.message,
            history=history,
            resumed=bool(history),
            grants=shape.grants,
            earlier=history,
            team=shape.seat,
            run_id=assigned.run_id,
        )
        prepared.recorder.fence = assigned.fence
        if origin.kind == "teammate":
            prepared.recorder.event(
                TeamChanged,
                team=origin.parent_session_id,
                member=origin.worker,
                role=origin.agent,
                status="working",
            )
        starter.launch(prepared, claim=claim)
    except BaseException:  # not launched: the run never holds its session
        if claim is not None:
            await claim.release()
        raise
    return prepared.run


@dataclass(frozen=True, slots=True)
class _Shape:
    """How a dispatched run is put together."""

    assembler: RunAssembler
    spec: RunSpec
    lineage: Lineage
    title: str
    grants: SessionGrants
    seat: SeatOf | None = None


def _origin_lineage(origin: Dispatched, label: str, **more: Any) -> Lineage:
    return Lineage(
        kind="teammate" if origin.kind == "teammate" else "worker",
        agent=origin.agent,
        depth=origin.depth,
        parent_session_id=origin.parent_session_id,
        parent_run_id=origin.parent_run_id,
        parent_call_id=origin.parent_call_id,
        parent_mode=_mode(origin.parent_mode),
        label=label,
        worker=origin.worker,
        task_session_id=origin.task_session_id or None,
        **more,
    )


def _pool_worker(
    service: RunService, origin: Dispatched, limits: RunLimits | None, task: str
) -> _Shape:
    children = service.children
    if children is None:
        raise UsageError("this runtime has no worker pools to run a dispatched worker with")
    assembler, spec = children.setup(origin.agent, origin.allowed_tools)
    if limits is not None:
        within = spec.settings.limits.within(limits)
        spec = dataclasses.replace(spec, settings=dataclasses.replace(spec.settings, limits=within))
    label = f"worker {origin.pool}/{origin.worker}"
    lineage = _origin_lineage(origin, label, pool=origin.pool)
    title = f"[{label}] {task.strip().splitlines()[0]}"
    return _Shape(assembler, spec, lineage, title, SessionGrants())


async def _teammate(service: RunService, queued: QueuedRun, origin: Dispatched) -> _Shape:
    teams = service.teams
    if teams is None:
        raise UsageError("this runtime has no teams to run a teammate's run with")
    team = await teams.attach(origin.parent_session_id, queued.project_dir)
    assembler, spec, seat = teams.members.member_run(team, origin.worker)
    label = f"teammate {origin.worker}"
    lineage = _origin_lineage(origin, label, actor=origin.worker)
    return _Shape(assembler, spec, lineage, f"[{label}] {origin.agent}", team.grants, seat)


async def spent_by(store: SessionStore, runs: Sequence[RunInfo]) -> tuple[Usage, float | None, int]:
    """What `runs` (a queued run's attempts) spent on their model calls: usage, cost (None
    without prices) and how many calls, from their `usage` events (an attempt cut off
    before its end has them too)."""
    usage, cost, calls = Usage(), None, 0
    for run in runs:
        for event in await store.run_events(run.id):
            if isinstance(event, UsageEvent):
                usage, calls = usage + event.usage, calls + 1
                if event.cost_usd is not None:
                    cost = (cost or 0.0) + event.cost_usd
    return usage, cost, calls


async def _left_after(
    store: SessionStore, attempts: Sequence[RunInfo], base: RunLimits, now: float
) -> RunLimits | None:
    """What the earlier `attempts` left of `base` (the wall clock counted from the first
    one's start); `AlreadyEnded` when they used a budget up."""
    usage, cost, _calls = await spent_by(store, attempts)
    tokens = tokens_of(usage)
    elapsed_ms = max(0.0, now - attempts[0].started_at) * 1000
    used_up = base.spent(cost_usd=cost, tokens=tokens, elapsed_ms=elapsed_ms)
    if used_up is not None:
        raise AlreadyEnded("budget_exhausted", f"{used_up[1]} (by its earlier attempts)")
    left = base.left(cost_usd=cost, tokens=tokens, elapsed_ms=elapsed_ms)
    return left if left != RunLimits() else None


def _mode(name: str) -> PermissionMode:
    """The orchestrator's mode as stored (a name this version does not know binds as the
    strictest, plan)."""
    modes: tuple[PermissionMode, ...] = get_args(PermissionMode)
    return next((m for m in modes if m == name), "plan")


def attempts_of(run_id: str, runs: Sequence[RunInfo]) -> list[RunInfo]:
    """The runs of a session that are attempts of the queued run `run_id`, in order: the
    first has its id, a takeover's is `<id>-<fence>` (fences only grow)."""

    fenced = [(f, r) for r in runs if (f := attempt_fence(run_id, r.id)) is not None]
    return [r for _f, r in sorted(fenced, key=lambda found: found[0])]


def _check_not_ended(queued: QueuedRun, last: RunInfo) -> None:
    """Raise `AlreadyEnded` when the run's last attempt ended in its session although the
    queue was not told (its worker died between the two writes): it is not run again. A
    cancelled attempt ends it only when cancellation was asked for (a worker that stops
    cancels what it holds and gives it back, to be continued)."""
    if session_end(last.status, last.reason, cancel_requested=queued.cancel_requested):
        raise AlreadyEnded(last.status, last.reason or "")


def _with(options: RunOptions, **changes: object) -> RunOptions:
    return dataclasses.replace(options, **changes)  # type: ignore[arg-type]
