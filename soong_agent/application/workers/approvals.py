"""Approvals anyone can answer (WORK-3): in a worker's run, a question about a tool call becomes a
durable pending approval that `approvals answer`, the SDK or a `permission_request` hook (which
the gate asks first) answers from any process or host.

The run waits for the answer as an await (no polling of its own, no thread): the store wakes it
(PostgreSQL's NOTIFY, a cheap poll on SQLite). After `timeout_s` (None: no limit) the approval
expires, denied, and the run goes on. A run cancelled while it waits expires its approval, so
nothing is left pending for a run that is gone. What is stored is scrubbed of secrets first (a
diff may show a file holding a key).

Which run asks is read from `QUEUED_RUN`, a context variable the worker sets before it starts
the run (the run's task copies it): the approver is shared by every run of a runtime.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar

from soong_agent.ports.approval import ApprovalRequest, Decision, PlanReview, review_by_decision
from soong_agent.ports.approval_store import ApprovalStore, PendingApproval
from soong_agent.ports.run_queue import QueuedRun
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.ports.system import Clock, IdGenerator

__all__ = ["QUEUED_RUN", "DurableApprover"]

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
        asked = await self._store.ask(
            PendingApproval(
                id=self._ids.new_id("apr"),
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
        try:
            answered = await self._store.wait_answered(asked.id, self._timeout_s)
        except asyncio.CancelledError:  # the run was cancelled: its question goes with it
            await asyncio.shield(self._store.expire(asked.id, now=self._clock.now()))
            raise
        if answered is None or answered.pending:
            answered = await self._store.expire(asked.id, now=self._clock.now())
        return answered.decision or "deny"

    async def review_plan(self, request: ApprovalRequest) -> PlanReview:
        """A plan is approved as a call is: allowed means approved."""
        return await review_by_decision(self, request)
