"""The SDK's side of the run queue (WORK-1, WORK-3): `AgentRuntime.submit`, `wait`, `watch`,
`cancel_queued`, `queued_runs`, `approvals` and `answer`, for runs a worker (`soong-agent
worker`) executes, in this process or on another host sharing the store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from soong_agent.ports.errors import UsageError

if TYPE_CHECKING:
    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.ports.approval import Decision
    from soong_agent.ports.approval_store import ApprovalStore, PendingApproval
    from soong_agent.ports.events import RunEvent
    from soong_agent.ports.run_queue import QueuedRun, QueueStatus, RunQueue
    from soong_agent.ports.storage import SessionStore

POLL_S = 0.2
"""How often `wait` and `watch` look at the store."""


class QueueMethods:
    """Mixed into `AgentRuntime`: what it offers for queued runs."""

    _container: Any
    loaded: LoadedConfig
    _check_open: Callable[[], None]
    """AgentRuntime's: UsageError once the runtime is closed."""

    def _queue(self) -> RunQueue:
        self._check_open()
        queue: RunQueue = self._container.adapters.run_queue()
        return queue

    async def submit(
        self,
        message: str,
        session_id: str | None = None,
        agent: str | None = None,
        orchestrator: bool = False,
        *,
        from_message: str | None = None,
        max_cost_usd: float | None = None,
        max_tokens: int | None = None,
        max_wall_ms: int | None = None,
        max_turns: int | None = None,
        plan_mode: bool = False,
    ) -> str:
        """Queue a run of this runtime's project for a worker and return its run id at once
        (its session: `(await runtime.queued_run(run_id)).session_id`). `session_id` continues
        that session. UsageError for an empty message or an unknown session."""
        from soong_agent.application.workers.queued import submit_run
        from soong_agent.entrypoints.run_options import parse_limits
        from soong_agent.ports.run_queue import RunOptions

        parse_limits(max_cost_usd, max_tokens, max_wall_ms)  # checked as run() checks them
        if max_turns is not None and max_turns < 1:
            raise UsageError(f"max_turns: expected at least 1, found {max_turns}")
        options = RunOptions(
            agent=agent,
            orchestrator=orchestrator,
            plan_mode=plan_mode,
            from_message=from_message,
            max_cost_usd=max_cost_usd,
            max_tokens=max_tokens,
            max_wall_ms=max_wall_ms,
            max_turns=max_turns,
        )
        adapters = self._container.adapters
        run = await submit_run(
            self._queue(),
            adapters.session_store(),
            ids=adapters.ids(),
            clock=adapters.clock(),
            project_dir=str(self.loaded.project),
            message=message,
            session_id=session_id,
            options=options,
            telemetry=adapters.telemetry(),
        )
        return run.id

    async def queued_run(self, run_id: str) -> QueuedRun:
        """The queued run as it stands (RunNotQueued for an unknown id)."""
        from soong_agent.ports.run_queue import RunNotQueued

        run = await self._queue().get(run_id)
        if run is None:
            raise RunNotQueued(run_id)
        return run

    async def queued_runs(
        self, *, status: QueueStatus | None = None, limit: int = 100
    ) -> list[QueuedRun]:
        """Queued runs, newest first."""
        return list(await self._queue().list(status=status, limit=limit))

    async def wait(self, run_id: str, timeout_s: float | None = None) -> QueuedRun:
        """Wait until the queued run has ended (whichever worker runs it) and return it;
        TimeoutError when `timeout_s` passes first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            run = await self.queued_run(run_id)
            if run.ended:
                return run
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {run_id} is still {run.status}")
            await asyncio.sleep(POLL_S)

    async def watch(self, run_id: str) -> AsyncIterator[RunEvent]:
        """The queued run's events as they are stored, from the first, whichever process or
        host runs it (each attempt's, in order), until it has ended."""
        store: SessionStore = self._container.adapters.session_store()
        seen: dict[str, int] = {}
        while True:
            run = await self.queued_run(run_id)
            ended = run.ended  # read before the events: nothing stored after it is missed
            if await store.get_session(run.session_id) is not None:
                from soong_agent.application.workers.queued import attempts_of

                for attempt in attempts_of(run.id, await store.list_runs(run.session_id)):
                    events = await store.run_events(attempt.id)
                    for event in events[seen.get(attempt.id, 0) :]:
                        yield event
                    seen[attempt.id] = len(events)
            if ended:
                return
            await asyncio.sleep(POLL_S)

    async def cancel_queued(self, run_id: str) -> QueuedRun:
        """Cancel a queued run at once, or ask the worker running it to stop it."""
        await self.queued_run(run_id)
        clock = self._container.adapters.clock()
        return await self._queue().cancel(run_id, now=clock.now())

    async def approvals(self, *, pending_only: bool = True) -> list[PendingApproval]:
        """The approval questions of workers' runs (WORK-3), newest first."""
        self._check_open()
        store: ApprovalStore = self._container.adapters.approval_store()
        return list(await store.list(status="pending" if pending_only else None))

    async def answer(
        self, approval_id: str, decision: Decision, *, by: str = "sdk"
    ) -> PendingApproval:
        """Answer a pending approval; the run waiting on it, wherever it runs, goes on.
        ApprovalClosed when it was answered already or expired; ApprovalNotFound."""
        self._check_open()
        store: ApprovalStore = self._container.adapters.approval_store()
        clock = self._container.adapters.clock()
        return await store.answer(approval_id, decision, by=by, now=clock.now())
