"""The approval store's side of the session database (`SqliteApprovalStore`): its connection and
every operation, used only on the store's worker thread.

Each write is one `BEGIN IMMEDIATE` transaction: SQLite lets one writer in at a time, across
every connection and process on the machine, so an answer's read of the approval's status and
its update are one step — of two answers given at once, the second finds the first. The
connection is opened as the session store opens its own (`transactions`: WAL, the busy timeout,
the schema made sure of), so whichever store opens the database first creates the table.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from soong_agent.adapters import approval_rules as rules
from soong_agent.adapters.storage import approval_sql as sql
from soong_agent.adapters.storage.side_db import SideDatabase
from soong_agent.ports.approval import Decision
from soong_agent.ports.approval_store import ApprovalNotFound, ApprovalStatus, PendingApproval

_T = TypeVar("_T")


class ApprovalDatabase(SideDatabase):
    """The store's connection and statements; used only on the store's worker thread."""

    def __init__(self, path: Path, busy_timeout_ms: int) -> None:
        super().__init__(path, busy_timeout_ms, what="the approval store")

    @staticmethod
    def _get(c: sqlite3.Connection, approval_id: str) -> PendingApproval | None:
        row = c.execute(sql.GET, {"id": approval_id}).fetchone()
        return None if row is None else rules.pending_approval(row)

    def _close_with(
        self, approval_id: str, change: Callable[[PendingApproval], PendingApproval]
    ) -> PendingApproval:
        """Read the approval, `change` it (which may refuse), and write the change when it
        closes a pending one — all in one transaction."""

        def work(c: sqlite3.Connection) -> PendingApproval:
            current = self._get(c, approval_id)
            if current is None:
                raise ApprovalNotFound(approval_id)
            changed = change(current)
            if changed is not current:
                c.execute(sql.CLOSE, rules.row(changed))
            return changed

        return self._write(work)

    # --- operations ------------------------------------------------------------------------

    def ask(self, approval: PendingApproval) -> PendingApproval:
        stored = rules.asked(approval)

        def work(c: sqlite3.Connection) -> PendingApproval:
            if c.execute(sql.GET, {"id": approval.id}).fetchone() is not None:
                raise rules.duplicate(approval.id)
            c.execute(sql.INSERT, rules.row(stored))
            return stored

        return self._write(work)

    def answer(self, approval_id: str, decision: Decision, by: str, now: float) -> PendingApproval:
        return self._close_with(approval_id, lambda a: rules.answer_to(a, decision, by, now))

    def expire(self, approval_id: str, now: float) -> PendingApproval:
        return self._close_with(approval_id, lambda a: rules.expiry_of(a, now))

    def get(self, approval_id: str) -> PendingApproval | None:
        return self._get(self.connection(), approval_id)

    def approvals(
        self, status: ApprovalStatus | None, run_id: str | None, limit: int
    ) -> list[PendingApproval]:
        if limit <= 0:
            return []
        params = {"status": status, "run_id": run_id, "limit": limit}
        rows = self.connection().execute(sql.listing(status, run_id), params).fetchall()
        return [rules.pending_approval(r) for r in rows]
