"""Approvals anyone can answer (WORK-3): in a worker's run, a question about a tool call becomes a
durable pending approval that `approvals answer`, the SDK or a `permission_request` hook (which
the gate asks first) answers from any process or host.

The run waits for the answer as an await (no polling of its own, no thread): the store wakes it
(PostgreSQL's NOTIFY, a cheap poll on SQLite), and its worker does not count it against its
concurrency meanwhile (`PARKED`). After `timeout_s` (None: no limit) the approval
expires, denied, and the run goes on. A run cancelled while it waits expires its approval, so
nothing is left pending for a run that is gone. What is stored is scrubbed of secrets first (a
diff may show a file holding a key).

Which run asks is read from `QUEUED_RUN`, a context variable the worker sets before it starts
the run (the run's task copies it): the approver is shared by every run of a runtime.
"""

from __future__ import annotations

import asyncio
import contextlib
from contextvars import ContextVar

from soong_agent.application.runs.parking import PARKED, parked
from soong_agent.ports.approval import ApprovalRequest, Decision, PlanReview, review_by_decision
from soong_agent.ports.approval_store import ApprovalNotFound, ApprovalStore, PendingApproval
from soong_agent.ports.run_queue import QueuedRun
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.ports.system import Clock, IdGenerator

__all__ = ["PARKED", "QUEUED_RUN", "DurableApprover", "close_left_over"]

QUEUED_RUN: ContextVar[QueuedRun | None] = ContextVar("soong_agent_queued_run", default=None)
"""The queued run the current task belongs to (set by the worker; None elsewhere)."""


class DurableApprover:
    """An `Approver` that stores each question and waits for whoever answers it."""

    def __init__(
        self,
        store: ApprovalStore,
        *,
        clock: Clock,
        ids: IdGenerator,
        redactor: SecretRedactor | None,
        timeout_s: float | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._ids = ids
        self._redactor = redactor
        self._timeout_s = timeout_s

    def _clean(self, text: str) -> str:
        return self._redactor.redact(text) if self._redactor is not None else text

    async def decide(self, request: ApprovalRequest) -> Decision:
        """The answer someone gives to the stored question; ``deny`` when none came in time,
        or when the run is not a queued one (nobody could find the question)."""
        queued = QUEUED_RUN.get()
        if queued is None:
            return "deny"
        approval_id = self._ids.new_id("apr")
        try:
            return await self._asked(queued, request, approval_id)
        except asyncio.CancelledError:  # the run was cancelled: its question goes with it
            await asyncio.shield(self._close(approval_id))
            raise

    async def _close(self, approval_id: str) -> None:
        with contextlib.suppress(ApprovalNotFound):  # cancelled before it was stored
            await self._store.expire(approval_id, now=self._clock.now())

    async def _asked(
        self, queued: QueuedRun, request: ApprovalRequest, approval_id: str
    ) -> Decision:
        asked = await self._store.ask(
            PendingApproval(
                id=approval_id,
                run_id=queued.id,
                session_id=queued.session_id,
                project_dir=queued.project_dir,
                tool=request.tool,
                arguments=self._clean(request.summary),
                detail=self._clean(request.detail),
                scope=self._clean(request.session_scope),
                asked_at=self._clock.now(),
                summary=self._clean(request.summary),
                call_id=request.call_id,
            )
        )
        with parked():
            answered = await self._store.wait_answered(asked.id, self._timeout_s)
        if answered is None or answered.pending:
            answered = await self._store.expire(asked.id, now=self._clock.now())
        return answered.decision or "deny"

    async def review_plan(self, request: ApprovalRequest) -> PlanReview:
        """A plan is approved as a call is: allowed means approved."""
        return await review_by_decision(self, request)


async def close_left_over(store: ApprovalStore, run_id: str, clock: Clock) -> int:
    """Expire the questions an earlier attempt of the queued run left pending (its worker
    died while it waited): a takeover asks again, and an answer to the old one is refused
    as expired instead of being taken and lost. Returns how many were closed."""
    left = await store.list(status="pending", run_id=run_id)
    for approval in left:
        await store.expire(approval.id, now=clock.now())
    return len(left)
