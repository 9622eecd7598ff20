"""The PostgreSQL approval store (WORK-3 across hosts): the `approvals` table of the database the
session store uses, so that a run's question, its answer and its turns live in one database.

An answer is one transaction that locks the approval's row (``FOR UPDATE``), reads its status
and changes it only while it is pending (`approval_sql`): of two answers from two hosts, the
second waits for the first and is refused. An ask, an answer and an expiry `NOTIFY` the
store's channel when they commit; `wait_answered` LISTENs on a connection of its own (a
`QueueListener` on `approval_sql.CHANNEL`) and polls only while it cannot listen.

Work is done through `PostgresDatabase.run`: a statement whose connection is lost is tried
once more on a new one, and the retry first looks for what the lost attempt may have committed
(an ask or an answer is not refused for having gone through already).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from soong_agent.adapters import approval_rules as rules
from soong_agent.adapters.postgres import approval_sql as sql
from soong_agent.adapters.postgres.queue_listener import ListeningStore
from soong_agent.ports.approval import Decision
from soong_agent.ports.approval_store import ApprovalNotFound, ApprovalStatus, PendingApproval
from soong_agent.ports.errors import UsageError

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from soong_agent.adapters.postgres.database import PostgresDatabase


async def _one(
    conn: AsyncConnection[Any], statement: str, params: dict[str, Any]
) -> PendingApproval | None:
    cur = await conn.execute(statement, params)
    row = await cur.fetchone()
    return None if row is None else rules.pending_approval(row)


class PostgresApprovalStore(ListeningStore):
    """An `ApprovalStore` in a PostgreSQL database (`PostgresDatabase`), shared by processes
    and hosts.

    Refusals are those of every approval store (`adapters.approval_rules`); database failures
    raise `RunError` (`UsageError` when the database cannot be reached at all).

    `wait_answered` is woken by the notification of an answer or an expiry from any process.
    `fallback_poll_s`: how often a wait looks while it cannot listen (the connection for
    LISTEN cannot be made, or was lost), and how long before it tries that connection again.
    """

    def __init__(self, database: PostgresDatabase, *, fallback_poll_s: float = 2.0) -> None:
        super().__init__(
            database,
            fallback_poll_s=fallback_poll_s,
            channel=sql.CHANNEL,
            about="approvals",
            what="the approval store",
        )

    async def ask(self, approval: PendingApproval) -> PendingApproval:
        """Store `approval` as pending and notify; `UsageError` when its id exists already."""
        self._check_open()
        rules.check_ask(approval)
        stored = rules.asked(approval)
        params = rules.row(stored)

        async def work(conn: AsyncConnection[Any], retrying: bool) -> PendingApproval:
            async with conn.transaction():
                inserted = await _one(conn, sql.INSERT, params)
                if inserted is None:
                    found = await _one(conn, sql.GET, {"id": approval.id}) if retrying else None
                    if found == stored:
                        return found  # committed before the connection was lost
                    raise rules.duplicate(approval.id)
                await conn.execute(sql.NOTIFY, (approval.id,))
                return inserted

        return await self._db.run(work, what=f"ask for approval {approval.id!r}")

    async def _close_with(
        self,
        approval_id: str,
        change: Callable[[PendingApproval], PendingApproval],
        *,
        what: str,
        done: Callable[[PendingApproval], bool] = lambda _found: False,
    ) -> PendingApproval:
        """Lock the approval, `change` it (which may refuse) and write and notify the change
        when it closes a pending one, in one transaction. `done`: whether a row found by the
        retry after a lost connection is the lost attempt's own change."""

        async def work(conn: AsyncConnection[Any], retrying: bool) -> PendingApproval:
            async with conn.transaction():
                current = await _one(conn, sql.LOCK, {"id": approval_id})
                if current is None:
                    raise ApprovalNotFound(approval_id)
                if retrying and done(current):
                    return current  # committed before the connection was lost
                changed = change(current)
                if changed is current:
                    return current
                written = await _one(conn, sql.CLOSE, rules.row(changed))
                assert written is not None  # the row is locked and was pending
                await conn.execute(sql.NOTIFY, (approval_id,))
                return written

        return await self._db.run(work, what=what)

    async def answer(
        self, approval_id: str, decision: Decision, *, by: str, now: float
    ) -> PendingApproval:
        """Answer a pending approval (its row locked) and notify; `ApprovalClosed` when it was
        answered or expired, `ApprovalNotFound` for an unknown id."""
        self._check_open()
        rules.check_answer(approval_id, decision, by)
        return await self._close_with(
            approval_id,
            lambda a: rules.answer_to(a, decision, by, now),
            done=lambda a: (
                (a.status, a.decision, a.answered_by, a.answered_at)
                == ("answered", decision, by, now)
            ),
            what=f"answer approval {approval_id!r}",
        )

    async def expire(self, approval_id: str, *, now: float) -> PendingApproval:
        """Deny a pending approval (`expired`) and notify; any other is returned as it is."""
        self._check_open()
        return await self._close_with(
            approval_id,
            lambda a: rules.expiry_of(a, now),  # one closed already is returned as it is
            what=f"expire approval {approval_id!r}",
        )

    async def get(self, approval_id: str) -> PendingApproval | None:
        """The approval, or None."""
        self._check_open()

        async def work(conn: AsyncConnection[Any], _retrying: bool) -> PendingApproval | None:
            return await _one(conn, sql.GET, {"id": approval_id})

        return await self._db.run(work, what=f"read approval {approval_id!r}")

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
        statement = sql.listing(status, run_id)
        params = {"status": status, "run_id": run_id, "limit": limit}

        async def work(conn: AsyncConnection[Any], _retrying: bool) -> Sequence[PendingApproval]:
            cur = await conn.execute(statement, params)
            return [rules.pending_approval(r) for r in await cur.fetchall()]

        return await self._db.run(work, what="list the approvals")

    async def wait_answered(
        self, approval_id: str, timeout_s: float | None
    ) -> PendingApproval | None:
        """The approval once it is no longer pending, woken by the notification of an answer
        from any process; None when `timeout_s` passed first (or the store was closed)."""
        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + max(0.0, timeout_s)
        listener = self._here()
        while True:
            listening = await listener.listen()
            woken = listener.waiter()  # before the look: an answer after it wakes this wait
            try:
                try:
                    current = await self.get(approval_id)
                except UsageError:
                    if self._closed:  # closed while it looked
                        return None
                    raise
                if current is None:
                    raise ApprovalNotFound(approval_id)
                if not current.pending:
                    return current
                left = None if deadline is None else deadline - loop.time()
                if (left is not None and left <= 0) or self._closed:
                    return None
                wait = left
                if not listening:  # look again after a while, and try to listen again
                    poll = self._fallback_poll_s
                    wait = poll if left is None else min(left, poll)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken, timeout=wait)
            finally:
                listener.forget(woken)
            if self._closed:
                return None

    async def close(self) -> None:
        """Stop listening and stop using the database (its pool closes with the last store)."""
        if self._closed:
            return
        await self._stop_listening()
        await self._db.detach()
