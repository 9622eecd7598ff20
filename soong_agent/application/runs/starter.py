"""The one way a run starts (issue 32): root runs, sub-agents, forks, workers and teammates.

`RunStarter.prepare` makes a run's records (its `RunInfo`, and a new session's `SessionInfo`
through `new_session`), names its approver after the child it asks for, binds the run to its
effective policy (`runs.policy.bind_run`: the strictest of its own mode, its parent's, and its
session's plan mode) and has the assembler put it together; nothing is written yet. The
caller records what only it knows (a root run's memories, a child's copied context), then
`launch` records the lineage and the plan-mode event and starts the loop. `wait` bounds how
long a parent waits for a child. Root, child and teammate code keep only their own policy
(which session, which history, what the parent counts) and call these.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from soong_agent.application.hooks import RunHooks
from soong_agent.application.runs.assembler import AssembledRun, ChildLinks, RunAssembler, RunSpec
from soong_agent.application.runs.handle import Run, RunResult
from soong_agent.application.runs.lineage import Lineage
from soong_agent.application.runs.policy import BoundRun, ParentRun, bind_run
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.tools.base import TeamSeat
from soong_agent.domain.permissions import SessionGrants
from soong_agent.ports.approval import (
    ApprovalRequest,
    Approver,
    Decision,
    PlanReview,
)
from soong_agent.ports.events import ChildStarted, PlanModeChanged
from soong_agent.ports.messages import Message
from soong_agent.ports.storage import RunFence, RunInfo, SessionClaim, SessionInfo
from soong_agent.ports.system import Clock, IdGenerator

__all__ = ["NamedApprover", "PreparedRun", "RunStarter", "wait_bounded"]

TITLE_CHARS = 120


class NamedApprover:
    """The parent's approver, asked on behalf of a child that it names (`[sub-agent x] …`)."""

    def __init__(self, inner: Approver, agent: str) -> None:
        self._inner = inner
        self._agent = agent

    async def decide(self, request: ApprovalRequest) -> Decision:
        return await self._inner.decide(dataclasses.replace(request, agent=self._agent))

    async def review_plan(self, request: ApprovalRequest) -> PlanReview:
        return await self._inner.review_plan(dataclasses.replace(request, agent=self._agent))


log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Assigned:
    """The ids a queued run was given when it was submitted, and the lease of the worker
    that starts it (WORK-1, WORK-2): its batches carry the fence."""

    run_id: str
    """The first attempt's run has the queued run's id; a takeover's `<id>-<fence>`."""
    session_id: str
    fence: RunFence
    fence_only: bool = False
    """The session is guarded by the fence alone: a takeover whose old holder still holds
    the session's claim (a frozen process) — the store refuses that holder's batches."""


@dataclass(slots=True)
class PreparedRun:
    """A run put together and bound to its policy, not started: its recorder takes the
    caller's own first events before `RunStarter.launch`."""

    assembled: AssembledRun
    bound: BoundRun
    lineage: Lineage
    session: SessionInfo
    run_info: RunInfo
    spec: RunSpec
    message: str
    resumed: bool

    @property
    def recorder(self) -> RunRecorder:
        return self.assembled.recorder

    @property
    def run(self) -> Run:
        return self.assembled.run


class RunStarter:
    """Starts every run of a runtime, whatever its kind (see the module docstring)."""

    def __init__(self, *, clock: Clock, ids: IdGenerator) -> None:
        self._clock = clock
        self._ids = ids

    @property
    def clock(self) -> Clock:
        """The runtime's clock."""
        return self._clock

    def new_session(
        self,
        *,
        project_dir: str,
        title: str,
        agent: str | None,
        parent_session_id: str | None = None,
        session_id: str | None = None,
    ) -> SessionInfo:
        """The header of a session not stored yet (its first commit writes it)."""
        now = self._clock.now()
        return SessionInfo(
            id=session_id or self._ids.new_id("ses"),
            project_dir=project_dir,
            created_at=now,
            updated_at=now,
            title=title[:TITLE_CHARS],
            agent=agent,
            parent_session_id=parent_session_id,
        )

    async def prepare(
        self,
        assembler: RunAssembler,
        spec: RunSpec,
        lineage: Lineage,
        *,
        session: SessionInfo,
        message: str,
        history: list[Message],
        resumed: bool,
        grants: SessionGrants,
        plan_mode: bool = False,
        mode_source: str = "permissions.mode",
        earlier: Sequence[Message] = (),
        memory: str = "",
        mcp_loaded: Iterable[str] = (),
        children: ChildLinks | None = None,
        team: Callable[[RunRecorder, RunHooks | None], TeamSeat] | None = None,
        run_id: str | None = None,
    ) -> PreparedRun:
        """One run of `session` put together (see the module docstring); nothing is written.

        `resumed`: the session has stored messages (its plan mode is read from its record);
        `history`: the active path the run continues; `earlier`: every stored message (which
        deferred tools and folder instructions it had loaded); `children`: how the run starts
        children (None: it may not); `team`: its seat in a team; `run_id`: the id a queued
        run was given when it was submitted (WORK-1).
        Raises UsageError (plan mode without the plan tools) and ConfigError (a window too
        small for the run's system prompt) before anything is written.
        """
        run_info = RunInfo(
            id=run_id or self._ids.new_id("run"),
            session_id=session.id,
            started_at=self._clock.now(),
            model=spec.settings.model_label,
        )
        ports = assembler.ports
        if not lineage.is_root and ports.approver is not None:
            named = NamedApprover(ports.approver, lineage.label or lineage.hook_agent)
            assembler = assembler.derived(dataclasses.replace(ports, approver=named))
        parent = None
        if lineage.parent_session_id is not None:
            mode = lineage.parent_mode or assembler.policies.permissions.mode
            parent = ParentRun(lineage.parent_session_id, mode)
        bound = await bind_run(
            assembler,
            session_id=session.id,
            resumed=resumed,
            parent=parent,
            plan_mode=plan_mode,
            mode_source=mode_source,
            earlier=earlier if earlier else history,
        )
        assembled = bound.assembler.assemble(
            spec,
            session=session,
            run_info=run_info,
            history=history,
            grants=grants,
            mcp_loaded=mcp_loaded,
            earlier=earlier,
            memory=memory,
            children=children,
            task_session_id=lineage.task_session_id,
            team=team,
            actor=lineage.actor,
            depth=lineage.depth,
            agent_id=lineage.hook_agent,
        )
        return PreparedRun(
            assembled=assembled,
            bound=bound,
            lineage=lineage,
            session=session,
            run_info=run_info,
            spec=spec,
            message=message,
            resumed=resumed,
        )

    def started_event(self, prepared: PreparedRun) -> dict[str, object]:
        """The fields of the `child_started` event that records a child's lineage."""
        return prepared.lineage.started_fields(
            child_session_id=prepared.session.id,
            child_run_id=prepared.run_info.id,
            task=prepared.message,
            model=prepared.spec.settings.model_label,
        )

    def launch(
        self,
        prepared: PreparedRun,
        *,
        parent: RunRecorder | None = None,
        claim: SessionClaim | None = None,
    ) -> asyncio.Task[RunResult]:
        """Start the prepared run's loop. A child's lineage is recorded first in its own run
        and, with `parent` (the parent's recorder), in the parent's; then the plan mode it
        starts in. `claim` (the session's, STORE-2) is released when the loop has ended,
        before the run's result is seen: the next run of the session may start at once."""
        rec = prepared.recorder
        if not prepared.lineage.is_root:
            link = self.started_event(prepared)
            if parent is not None:
                parent.event(ChildStarted, **link)
            rec.event(ChildStarted, **link)
        if prepared.bound.plan_event is not None:
            rec.event(PlanModeChanged, **prepared.bound.plan_event)
        loop = prepared.assembled.loop.run(rec, prepared.message, resumed=prepared.resumed)
        task = asyncio.create_task(
            loop if claim is None else _holding(claim, loop),
            name=f"soong-{prepared.lineage.kind}-{prepared.run_info.id}",
        )
        prepared.run.attach(task)
        return task


async def _holding(claim: SessionClaim, loop: Coroutine[Any, Any, RunResult]) -> RunResult:
    """The run's loop, with its session held until it ends however it ends."""
    try:
        return await loop
    finally:
        try:
            await asyncio.shield(claim.release())
        except Exception:  # the run's own end stands; the claim dies with its connection
            log.warning("could not release session %s", claim.session_id, exc_info=True)


async def wait_bounded(task: asyncio.Task[RunResult], timeout_s: float, cancel_s: float) -> bool:
    """Wait at most `timeout_s` for a child's run to end; True when it did. Past that, or
    when the waiter itself is cancelled (which is re-raised), the run is cancelled and given
    `cancel_s` to reach its terminal state."""
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except asyncio.CancelledError:
        task.cancel()
        await asyncio.wait({task}, timeout=cancel_s)
        raise
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=cancel_s)
    return bool(done)
