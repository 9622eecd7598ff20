"""An orchestrator's pool workers through the run queue (AGT-4, WORK-1): `QueueHandoff` is the
`ChildQueue` of a worker process's runtime (see `application.children.handoff`).

The orchestrator's run waits for its worker's run without holding a slot of the worker
process it runs in (`PARKED`, as a run waiting for an answer does): a worker process serving
one run at a time can claim the worker run itself, and two processes share the work.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from soong_agent.application.children.handoff import HandedOff, Handoff
from soong_agent.application.runs.handle import RunResult
from soong_agent.application.runs.parking import parked
from soong_agent.application.workers.queued import attempts_of, spent_by, submit_run
from soong_agent.ports.errors import SoongAgentError
from soong_agent.ports.event_base import RunStatus
from soong_agent.ports.run_queue import Dispatched, QueuedRun, RunOptions, RunQueue
from soong_agent.ports.storage import SessionStore
from soong_agent.ports.system import Clock, IdGenerator
from soong_agent.ports.telemetry import Telemetry

__all__ = ["QueueHandoff"]

POLL_S = 0.1
"""How often a waiting orchestrator looks at its worker's queued run."""

_ENDED_AS: dict[str, RunStatus] = {
    "completed": "completed",
    "cancelled": "cancelled",
    "failed": "failed",
    "interrupted": "interrupted",
}


class QueueHandoff:
    """Queues pool workers for any worker process and reads back how they ended."""

    def __init__(
        self,
        queue: RunQueue,
        store: SessionStore,
        *,
        clock: Clock,
        ids: IdGenerator,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._telemetry = telemetry
        self._queue = queue
        self._store = store
        self._clock = clock
        self._ids = ids

    async def hand_off(self, handoff: Handoff) -> HandedOff:
        lineage, limits = handoff.lineage, handoff.limits
        origin = Dispatched(
            parent_session_id=lineage.parent_session_id or "",
            parent_run_id=lineage.parent_run_id or "",
            parent_call_id=lineage.parent_call_id or "",
            parent_mode=lineage.parent_mode or "default",
            pool=lineage.pool or "",
            worker=lineage.worker or "",
            agent=lineage.agent or "",
            task_session_id=lineage.task_session_id or lineage.parent_session_id or "",
            depth=lineage.depth,
            allowed_tools=handoff.allowed_tools,
            kind=lineage.kind,
        )
        options = RunOptions(
            max_cost_usd=limits.max_cost_usd,
            max_tokens=limits.max_tokens,
            max_wall_ms=limits.max_wall_ms,
            dispatched=origin,
        )
        if self._telemetry is not None:  # its trace goes on under the call that queued it
            where = self._telemetry.trace_parent(
                run_id=origin.parent_run_id, call_id=origin.parent_call_id
            )
            options = dataclasses.replace(options, trace_parent=where)
        if handoff.session_id is not None:  # a teammate's session, made by its first run
            queued = await self._queue.submit(
                QueuedRun(
                    id=self._ids.new_id("run"),
                    session_id=handoff.session_id,
                    project_dir=handoff.project_dir,
                    message=handoff.task,
                    options=options,
                    submitted_at=self._clock.now(),
                )
            )
            return HandedOff(queued.session_id, queued.id)
        queued = await submit_run(
            self._queue,
            self._store,
            ids=self._ids,
            clock=self._clock,
            project_dir=handoff.project_dir,
            message=handoff.task,
            options=options,
        )
        return HandedOff(queued.session_id, queued.id)

    async def outcome(
        self, handed: HandedOff, *, timeout_s: float, cancel_s: float, park: bool = True
    ) -> tuple[RunResult, bool]:
        # waiting holds no slot (`park`): this process may run the worker itself
        with parked() if park else contextlib.nullcontext():
            try:
                ended = await self._ended(handed.run_id, timeout_s)
                timed_out = ended is None
                if ended is None:
                    ended = await self._cancelled(handed.run_id, cancel_s)
            except asyncio.CancelledError:
                with contextlib.suppress(SoongAgentError):  # the queue is away: its lease ends it
                    await asyncio.shield(self._queue.cancel(handed.run_id, now=self._clock.now()))
                raise
        return await self._result(handed, ended), timed_out

    async def _ended(self, run_id: str, timeout_s: float) -> QueuedRun | None:
        """The run once it ended, or None when `timeout_s` passed first."""
        deadline = self._clock.monotonic() + timeout_s
        while True:
            run = await self._queue.get(run_id)
            if run is None or run.ended:
                return run
            if self._clock.monotonic() >= deadline:
                return None
            await asyncio.sleep(POLL_S)

    async def _cancelled(self, run_id: str, cancel_s: float) -> QueuedRun | None:
        """Ask for the run's cancellation and wait `cancel_s` for it to end."""
        await self._queue.cancel(run_id, now=self._clock.now())
        return await self._ended(run_id, cancel_s)

    async def _result(self, handed: HandedOff, run: QueuedRun | None) -> RunResult:
        """How the worker's run ended, read from the queue and its session: its status and
        reason, its last answer, and what its attempts spent."""
        infos = attempts_of(handed.run_id, await self._store.list_runs(handed.session_id))
        usage, cost, turns = await spent_by(self._store, infos)
        last = infos[-1] if infos else None
        status: RunStatus = "failed"
        if run is not None and run.status == "completed":
            status = "completed"
        elif last is not None and last.status not in ("running", "completed"):
            status = last.status
        elif run is not None:
            status = _ENDED_AS.get(run.status, "failed")
        reason = None
        if status != "completed":
            reason = (run.reason if run is not None else "") or (last.reason if last else None)
            reason = reason or "it was still running when the orchestrator stopped waiting"
        path = await self._store.active_path(handed.session_id) if infos else []
        answer = next((m.text for m in reversed(path) if m.role == "assistant" and m.text), "")
        return RunResult(
            session_id=handed.session_id,
            run_id=handed.run_id,
            status=status,
            final_text=answer,
            reason=reason,
            usage=usage,
            cost_usd=cost,
            turns=turns,
        )
