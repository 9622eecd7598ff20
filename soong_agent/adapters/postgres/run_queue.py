"""The PostgreSQL run queue (WORK-1, WORK-2 across hosts): the `run_queue` table of the
database the session store uses, so that a worker's claim, its lease and its turns live in one
database.

A claim is one transaction that locks the oldest claimable row with
``SELECT … FOR UPDATE SKIP LOCKED`` (`queue_sql`): workers on any number of hosts never take one
run, and none waits for another's claim. A submit, a release and a cancel `NOTIFY` the queue's
channel when they commit; `wait_for_work` LISTENs on a connection of its own (`QueueListener`)
and polls only while it cannot listen. A session commit fenced with a lease checks the run's
row in its own transaction (`PostgresSessionStore.commit`).

Work is done through `PostgresDatabase.run`: a statement whose connection is lost is tried
once more on a new one, and the retry first looks for what the lost attempt may have committed
(a submit, a claim, a finish or a release is not done twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from soong_agent.adapters import run_queue_rules as rules
from soong_agent.adapters.postgres import queue_sql as sql
from soong_agent.adapters.postgres.queue_listener import ListeningStore
from soong_agent.ports.errors import SoongAgentError
from soong_agent.ports.run_queue import Lease, LeaseLost, QueuedRun, QueueStatus, RunNotQueued

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from soong_agent.adapters.postgres.database import PostgresDatabase

log = logging.getLogger(__name__)


def _params(run: QueuedRun) -> tuple[Any, ...]:
    values = {name: getattr(run, name) for name in rules.COLUMNS}
    values["options"] = rules.options_json(run.options)
    return tuple(values[name] for name in rules.COLUMNS)


async def _one(conn: AsyncConnection[Any], statement: str, params: Any) -> QueuedRun | None:
    cur = await conn.execute(statement, params)
    row = await cur.fetchone()
    return None if row is None else rules.queued_run(row)


async def _ended_by(
    conn: AsyncConnection[Any], lease: Lease, statuses: tuple[str, ...]
) -> QueuedRun | None:
    """The run, when it is still under the lease's fence but in one of `statuses`: the
    holder's own finish or release went through (the fence moves only with a claim)."""
    found = await _one(conn, sql.GET, (lease.run.id,))
    if found is None or found.fence != lease.fence or found.status not in statuses:
        return None
    return found


class PostgresRunQueue(ListeningStore):
    """A `RunQueue` in a PostgreSQL database (`PostgresDatabase`), shared by processes and
    hosts.

    Refusals are those of every queue (`adapters.run_queue_rules`); database failures raise
    `RunError` (`UsageError` when the database cannot be reached at all).

    `wait_for_work` returns True when a run was submitted, released or cancelled since this
    queue's last claim (before any claim: since the queue first listened), at once if that
    happened already. `fallback_poll_s`: how often a wait looks while it cannot listen (the
    connection for LISTEN cannot be made, or was lost), and how long before it tries that
    connection again. A lease running out wakes nobody: a worker claims again when its wait
    times out.

    `server_clock`: leases are measured by the database server's clock, not by the `now` the
    caller gives (workers on hosts whose clocks differ still agree on when a lease ran out).
    """

    def __init__(
        self,
        database: PostgresDatabase,
        *,
        fallback_poll_s: float = 2.0,
        server_clock: bool = False,
    ) -> None:
        super().__init__(
            database,
            fallback_poll_s=fallback_poll_s,
            channel=sql.CHANNEL,
            about="queued runs",
            what="the run queue",
        )
        self._giving_back: set[asyncio.Task[None]] = set()
        self._server_clock = server_clock

    async def _lease_time(self, given: float) -> float:
        """The time leases are measured by: the server's, with `server_clock`, else `given`."""
        if not self._server_clock:
            return given

        async def work(conn: AsyncConnection[Any], _retrying: bool) -> float:
            cur = await conn.execute(sql.SERVER_NOW)
            row = await cur.fetchone()
            assert row is not None
            return float(row[0])

        return await self._db.run(work, what="read the database server's clock")

    async def submit(self, run: QueuedRun) -> QueuedRun:
        """Store `run` as queued and notify; `UsageError` when its id is queued already."""
        self._check_open()
        rules.check_submit(run)
        stored = rules.submitted(run)
        params = _params(stored)

        async def work(conn: AsyncConnection[Any], retrying: bool) -> QueuedRun:
            async with conn.transaction():
                inserted = await _one(conn, sql.INSERT, params)
                if inserted is None:
                    found = await _one(conn, sql.GET, (run.id,)) if retrying else None
                    if found is not None and rules.submitted(found) == stored:
                        return found  # committed before the connection was lost
                    raise rules.duplicate(run.id)
                await conn.execute(sql.NOTIFY)
                return inserted

        return await self._db.run(work, what=f"queue run {run.id!r}")

    async def claim(
        self, worker: str, projects: Sequence[str], *, lease_s: float, max_attempts: int, now: float
    ) -> Lease | None:
        """Take the oldest claimable run of `projects` (`FOR UPDATE SKIP LOCKED`).

        A caller cancelled while the claim is under way does not lose the run: a run claimed
        for it is given back (`release`) at once."""
        self._check_open()
        rules.check_claim(worker, lease_s, max_attempts)
        served = rules.served(projects)
        listener = self._here()
        await listener.listen()  # a submit from now on is noticed by the next wait
        listener.notified = False
        if not served:
            return None
        now = await self._lease_time(now)
        expires = now + lease_s
        names = {"worker": worker, "expires": expires, "projects": served, "now": now}

        async def work(conn: AsyncConnection[Any], retrying: bool) -> Lease | None:
            if retrying and (taken := await _one(conn, sql.CLAIMED, names)) is not None:
                return Lease(taken, worker, taken.fence, expires)  # the lost attempt took it
            async with conn.transaction():
                while (run := await _one(conn, sql.CLAIMABLE, names)) is not None:
                    step = rules.claim_step(
                        run.status, run.attempts, run.cancel_requested, max_attempts
                    )
                    if step == "take":
                        taken = await _one(conn, sql.TAKE, {**names, "id": run.id})
                        assert taken is not None
                        return Lease(taken, worker, taken.fence, expires)
                    if step == "cancel":
                        status, reason = "cancelled", rules.CANCELLED_ABANDONED
                    else:
                        cur = await conn.execute(sql.SESSION_RUNS, (run.session_id,))
                        found = [(str(i), str(s), r) for i, s, r in await cur.fetchall()]
                        status, reason = rules.recorded_end(run, found) or (
                            "failed",
                            rules.exhausted_reason(run.attempts, max_attempts),
                        )
                    ending = {"id": run.id, "status": status, "reason": reason, "now": now}
                    await conn.execute(sql.END, ending)
            return None

        task = asyncio.ensure_future(self._db.run(work, what="claim a queued run"))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(self._give_back)
            raise

    def _give_back(self, task: asyncio.Future[Lease | None]) -> None:
        """Release the lease of a claim whose caller stopped waiting."""
        if task.cancelled() or task.exception() is not None:
            return
        lease = task.result()
        if lease is None or self._closed:
            return
        back = asyncio.ensure_future(self._release_quietly(lease))
        self._giving_back.add(back)
        back.add_done_callback(self._giving_back.discard)

    async def _release_quietly(self, lease: Lease) -> None:
        try:
            await self._release(lease, time.time())
        except SoongAgentError as exc:  # the lease runs out and the run is taken over
            log.warning(
                "could not give back run %s after its claim was cancelled: %s", lease.run.id, exc
            )

    # --- the holder's calls ----------------------------------------------------------------

    async def renew(self, lease: Lease, *, lease_s: float, now: float) -> Lease:
        """Extend the lease to `now + lease_s`; `LeaseLost` when the run's fence moved on."""
        self._check_open()
        rules.check_lease(lease_s)
        expires = await self._lease_time(now) + lease_s
        params = {"id": lease.run.id, "fence": lease.fence, "expires": expires}

        async def work(conn: AsyncConnection[Any], _retrying: bool) -> QueuedRun | None:
            return await _one(conn, sql.RENEW, params)

        run = await self._db.run(work, what=f"renew the lease of run {lease.run.id!r}")
        if run is None:
            raise LeaseLost(lease.run.id, lease.fence)
        return Lease(run, lease.worker, lease.fence, expires)

    async def finish(
        self, lease: Lease, status: QueueStatus, *, reason: str = "", now: float
    ) -> QueuedRun:
        """End the held run with `status`; `LeaseLost` as for `renew`."""
        self._check_open()
        rules.check_end(status)
        params = {"id": lease.run.id, "fence": lease.fence, "status": status}
        params.update(reason=reason, now=now)

        async def work(conn: AsyncConnection[Any], retrying: bool) -> QueuedRun:
            ended = await _one(conn, sql.FINISH, params)
            if ended is None and retrying:  # committed before the connection was lost?
                ended = await _ended_by(conn, lease, (status,))
            if ended is None:
                raise LeaseLost(lease.run.id, lease.fence)
            return ended

        return await self._db.run(work, what=f"finish run {lease.run.id!r}")

    async def release(self, lease: Lease, *, now: float) -> QueuedRun:
        """Give the held run back, queued, its attempt not counted (`cancelled` instead when
        its cancellation was asked for), and notify; `LeaseLost` as for `renew`."""
        self._check_open()
        return await self._release(lease, now)

    async def _release(self, lease: Lease, now: float) -> QueuedRun:
        params = {"id": lease.run.id, "fence": lease.fence, "now": now}
        params["reason"] = rules.CANCELLED_RUNNING

        async def work(conn: AsyncConnection[Any], retrying: bool) -> QueuedRun:
            async with conn.transaction():
                back = await _one(conn, sql.RELEASE, params)
                if back is None and retrying:
                    back = await _ended_by(conn, lease, ("queued", "cancelled"))
                    if back is not None:
                        return back  # committed before the connection was lost
                if back is None:
                    raise LeaseLost(lease.run.id, lease.fence)
                await conn.execute(sql.NOTIFY)
                return back

        return await self._db.run(work, what=f"release run {lease.run.id!r}")

    # --- anyone's calls --------------------------------------------------------------------

    async def cancel(self, run_id: str, *, now: float) -> QueuedRun:
        """A queued run ends `cancelled`; a running one is marked `cancel_requested`; either
        notifies."""
        self._check_open()

        async def work(conn: AsyncConnection[Any], _retrying: bool) -> QueuedRun:
            async with conn.transaction():
                run = await _one(conn, sql.LOCK, (run_id,))
                if run is None:
                    raise RunNotQueued(run_id)
                if run.status == "queued":
                    ending = {"id": run_id, "status": "cancelled", "now": now}
                    changed = await _one(
                        conn, sql.END, {**ending, "reason": rules.CANCELLED_QUEUED}
                    )
                elif run.status == "running":
                    changed = await _one(conn, sql.ASK_CANCEL, (run_id,))
                else:
                    return run
                assert changed is not None
                await conn.execute(sql.NOTIFY)
                return changed

        return await self._db.run(work, what=f"cancel run {run_id!r}")

    async def get(self, run_id: str) -> QueuedRun | None:
        """The run, or None."""
        self._check_open()

        async def work(conn: AsyncConnection[Any], _retrying: bool) -> QueuedRun | None:
            return await _one(conn, sql.GET, (run_id,))

        return await self._db.run(work, what=f"read run {run_id!r}")

    async def wait_for_work(self, timeout_s: float) -> bool:
        """Wait for a submit, release or cancel notified since the last claim; False when
        `timeout_s` passed first (or the queue was closed meanwhile)."""
        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        listener = self._here()
        while True:
            listening = await listener.listen()
            if listener.notified:
                listener.notified = False
                return True
            left = deadline - loop.time()
            if left <= 0 or self._closed:
                return False
            wait = left if listening else min(left, self._fallback_poll_s)
            woken = listener.waiter()
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken, timeout=wait)
            finally:
                listener.forget(woken)
            if not listening and not listener.notified and wait < left:
                return True  # it could not listen: the caller looks at the queue

    async def close(self) -> None:
        """Stop listening and stop using the database (its pool closes with the last store)."""
        if self._closed:
            return
        await self._stop_listening()
        if self._giving_back:
            await asyncio.wait(list(self._giving_back))
        await self._db.detach()

    async def list(
        self, *, status: QueueStatus | None = None, limit: int = 100
    ) -> Sequence[QueuedRun]:
        """Runs, newest submitted first (only those with `status` when given)."""
        self._check_open()
        if limit <= 0:
            return []
        statement, params = (
            (sql.LIST, (limit,)) if status is None else (sql.LIST_STATUS, (status, limit))
        )

        async def work(conn: AsyncConnection[Any], _retrying: bool) -> Sequence[QueuedRun]:
            cur = await conn.execute(statement, params)
            return [rules.queued_run(r) for r in await cur.fetchall()]

        return await self._db.run(work, what="list the queued runs")
