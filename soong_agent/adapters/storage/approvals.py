"""The SQLite approval store (WORK-3 on one host): the `approvals` table of the session database,
so that a run's question, its answer and the run's turns live in one file.

Any process on the machine answers: an answer is one `BEGIN IMMEDIATE` transaction that reads
the approval's status and changes it only while it is pending (`approval_db`), so of two
answers exactly one wins. There is no notification between processes on SQLite:
`wait_answered` reads the approval every `poll_s` (one primary-key lookup).

Like the session store, all database work runs on one worker thread of the store's own, with
its own connection; constructing a store does no I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from soong_agent.adapters import approval_rules as rules
from soong_agent.adapters.storage.approval_db import ApprovalDatabase
from soong_agent.adapters.storage.side_db import SideStore
from soong_agent.ports.approval import Decision
from soong_agent.ports.approval_store import ApprovalNotFound, ApprovalStatus, PendingApproval


class SqliteApprovalStore(SideStore[ApprovalDatabase]):
    """An `ApprovalStore` in the session database at `db_path` (the file `SqliteSessionStore`
    uses).

    Refusals are those of every approval store (`adapters.approval_rules`); a database that
    cannot be created or opened raises `UsageError` naming the path, other database failures
    (still locked after the busy timeout and retries, disk full, ...) `RunError`.

    `wait_answered` looks at the approval every `poll_s` seconds, so an answer from any
    process on the machine is seen within that time.
    """

    def __init__(self, db_path: Path, *, busy_timeout_ms: int = 5000, poll_s: float = 0.1) -> None:
        super().__init__(
            ApprovalDatabase(Path(db_path), busy_timeout_ms),
            poll_s=poll_s,
            thread="soong-sqlite-approvals",
        )

    async def ask(self, approval: PendingApproval) -> PendingApproval:
        """Store `approval` as pending; `UsageError` when its id exists already."""
        self._check_open()
        rules.check_ask(approval)
        return await self._run(self._db.ask, approval)

    async def answer(
        self, approval_id: str, decision: Decision, *, by: str, now: float
    ) -> PendingApproval:
        """Answer a pending approval in one `BEGIN IMMEDIATE` transaction; `ApprovalClosed`
        when it was answered or expired, `ApprovalNotFound` for an unknown id."""
        self._check_open()
        rules.check_answer(approval_id, decision, by)
        return await self._run(self._db.answer, approval_id, decision, by, now)

    async def expire(self, approval_id: str, *, now: float) -> PendingApproval:
        """Deny a pending approval (`expired`); any other is returned as it is."""
        return await self._run(self._db.expire, approval_id, now)

    async def get(self, approval_id: str) -> PendingApproval | None:
        """The approval, or None."""
        return await self._run(self._db.get, approval_id)

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
        return await self._run(self._db.approvals, status, run_id, limit)

    async def wait_answered(
        self, approval_id: str, timeout_s: float | None
    ) -> PendingApproval | None:
        """The approval once it is no longer pending, read every `poll_s`; None when
        `timeout_s` passed first (or the store was closed meanwhile)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + max(0.0, timeout_s)
        while True:
            current = await self._run(self._db.get, approval_id)
            if current is None:
                raise ApprovalNotFound(approval_id)
            if not current.pending:
                return current
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return None
            await asyncio.sleep(self._poll_s if left is None else min(left, self._poll_s))
            if self._closed:
                return None
