"""An in-memory `ApprovalStore`: the real stores' behaviour in plain Python, for tests.

It follows the same contract as `SqliteApprovalStore` and `PostgresApprovalStore` (the shared
contract suite runs on all three), refusing what they refuse (`adapters.approval_rules`):

- `ask` stores the approval pending (its answer reset); an id used before is refused
  (`UsageError`), as is an approval without id, run, session or tool.
- `answer` of a pending approval records the decision, who gave it and when; of one answered
  or expired already raises `ApprovalClosed`, of an unknown id `ApprovalNotFound`.
- `expire` denies a pending approval (`expired`); any other is returned as it is.
- `wait_answered` returns as soon as the approval is no longer pending (an answer or an
  expiry from any task of the loop wakes it), None when `timeout_s` passes first.
- After `close()` every method raises `UsageError`; a wait under way returns None.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from soong_agent.adapters import approval_rules as rules
from soong_agent.ports.approval import Decision
from soong_agent.ports.approval_store import ApprovalNotFound, ApprovalStatus, PendingApproval
from soong_agent.ports.errors import UsageError


class InMemoryApprovalStore:
    """An `ApprovalStore` kept in a dictionary; nothing survives the process."""

    def __init__(self) -> None:
        self._approvals: dict[str, PendingApproval] = {}
        self._order: dict[str, int] = {}
        self._waiters: set[asyncio.Future[None]] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"InMemoryApprovalStore({len(self._approvals)} approvals)"

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("the in-memory approval store is closed")

    def _known(self, approval_id: str) -> PendingApproval:
        self._check_open()
        found = self._approvals.get(approval_id)
        if found is None:
            raise ApprovalNotFound(approval_id)
        return found

    def _store(self, approval: PendingApproval) -> PendingApproval:
        self._approvals[approval.id] = approval
        for waiting in self._waiters:
            if not waiting.done():
                waiting.set_result(None)
        return approval

    async def ask(self, approval: PendingApproval) -> PendingApproval:
        """Store `approval` as pending."""
        self._check_open()
        rules.check_ask(approval)
        if approval.id in self._approvals:
            raise rules.duplicate(approval.id)
        self._order[approval.id] = len(self._order)
        return self._store(rules.asked(approval))

    async def answer(
        self, approval_id: str, decision: Decision, *, by: str, now: float
    ) -> PendingApproval:
        """Answer a pending approval; `ApprovalClosed` when it is answered or expired."""
        self._check_open()
        rules.check_answer(approval_id, decision, by)
        return self._store(rules.answer_to(self._known(approval_id), decision, by, now))

    async def expire(self, approval_id: str, *, now: float) -> PendingApproval:
        """Deny a pending approval (`expired`); any other is returned as it is."""
        current = self._known(approval_id)
        if not current.pending:
            return current
        return self._store(rules.expiry_of(current, now))

    async def get(self, approval_id: str) -> PendingApproval | None:
        """The approval, or None."""
        self._check_open()
        return self._approvals.get(approval_id)

    async def list(
        self,
        *,
        status: ApprovalStatus | None = None,
        run_id: str | None = None,
        limit: int = 100,
    ) -> Sequence[PendingApproval]:
        """Approvals, newest asked first (only those with `status`, of `run_id`, when given)."""
        self._check_open()
        rules.check_list(status)
        if limit <= 0:
            return []
        found = sorted(
            (
                a
                for a in self._approvals.values()
                if (status is None or a.status == status) and (run_id is None or a.run_id == run_id)
            ),
            key=lambda a: (a.asked_at, self._order[a.id]),
            reverse=True,
        )
        return found[:limit]

    async def wait_answered(
        self, approval_id: str, timeout_s: float | None
    ) -> PendingApproval | None:
        """The approval once it is no longer pending; None on timeout or close."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + max(0.0, timeout_s)
        while True:
            current = self._known(approval_id)
            if not current.pending:
                return current
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return None
            waiting: asyncio.Future[None] = loop.create_future()
            self._waiters.add(waiting)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiting, timeout=left)
            finally:
                self._waiters.discard(waiting)
            if self._closed:
                return None

    async def close(self) -> None:
        """Mark the store closed; a wait under way returns None."""
        self._closed = True
        for waiting in self._waiters:
            if not waiting.done():
                waiting.set_result(None)
