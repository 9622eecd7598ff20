"""The PostgreSQL session store (STORE-1): the same behaviour as the SQLite store, shared by any
number of processes and hosts.

A turn is one transaction (`turns`); its commit runs in a task of its own, so a caller that is
cancelled does not abandon it, and each commit starts after the one before it. A run still
`running` whose process is gone is reported and written as `interrupted` (`leases`); a session
is claimed by one process at a time (`claim_session`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from soong_agent.adapters import state_rows
from soong_agent.adapters.postgres import rows as dbrows
from soong_agent.adapters.postgres import session_sql as sql
from soong_agent.adapters.postgres import turns
from soong_agent.adapters.postgres.errors import is_lost
from soong_agent.adapters.postgres.leases import Leases
from soong_agent.adapters.postgres.paths import path_docs
from soong_agent.ports.errors import RunError, UsageError
from soong_agent.ports.events import RunEvent
from soong_agent.ports.messages import Message
from soong_agent.ports.storage import RunInfo, SessionClaim, SessionInfo, TurnCommit

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from soong_agent.adapters.postgres.database import PostgresDatabase

log = logging.getLogger(__name__)

INTERRUPTED_REASON = (
    "the process running it stopped before the run's end was saved; resume the session to go on"
)


class PostgresSessionStore:
    """A `SessionStore` in a PostgreSQL database (`PostgresDatabase`), shared by processes.

    `commit` writes the session and run rows (upserted), the turn's messages and events in one
    transaction; a batch fenced with a queued run's lease only while the run queue's row of the
    run still holds that fence (`LeaseLost` otherwise, nothing written). A batch that breaks a
    constraint (duplicate message id or event seq, a run of an unknown session, a message
    without id) raises `UsageError` and writes nothing; a commit whose connection is lost is
    tried once more on a new one, then raises `RunError`.
    """

    commit_survives_cancel = True
    """A commit runs in a task of its own: it goes through when its caller is cancelled, and
    the next commit waits for it (and raises its failure)."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._db = database
        database.attach()
        self._leases = Leases(database)
        self._written_run: RunInfo | None = None  # as last committed by this store
        self._pending: asyncio.Task[None] | None = None
        self._abandoned: list[BaseException] = []
        self._closed = False

    @property
    def database(self) -> PostgresDatabase:
        """The database this store writes to."""
        return self._db

    def __repr__(self) -> str:
        return f"PostgresSessionStore({self._db.where!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"the session store in the {self._db.where} is closed")

    # --- writes ----------------------------------------------------------------------------

    async def commit(self, batch: TurnCommit) -> None:
        """Write one turn's messages, events, and session/run state atomically.

        Once called, the commit goes through even when its caller is cancelled meanwhile; if
        it then fails, the next commit (the cancelled run's last) raises that failure and
        writes nothing."""
        self._check_open()
        task = asyncio.get_running_loop().create_task(self._after(self._pending, batch))
        self._pending = task
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(self._keep_abandoned)
            raise

    def _keep_abandoned(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        assert exc is not None
        log.error("a commit whose caller stopped waiting failed: %s", exc)
        self._abandoned.append(exc)

    async def _after(self, previous: asyncio.Task[None] | None, batch: TurnCommit) -> None:
        if previous is not None and not previous.done():
            await asyncio.wait([previous])  # its outcome belongs to its own caller
        if self._abandoned:
            exc = self._abandoned.pop(0)
            raise RunError(f"an earlier commit, whose caller was cancelled, failed: {exc}") from exc
        await self._write(batch)

    async def _write(self, batch: TurnCommit) -> None:
        run = batch.run
        # a run's row changes at its start and its end only: the turns between leave it be
        write_run = run != self._written_run
        rows = turns.turn_rows(
            batch.session,
            run if write_run else None,
            list(batch.messages),
            list(batch.events),
            batch.at,
            where=self._db.where,
            fence=batch.fence,
        )
        if write_run and run.status == "running":
            await self._leases.hold_run(run.id)  # before the row exists: see `leases`

        async def work(conn: AsyncConnection[Any], retrying: bool) -> None:
            await turns.write_turn(conn, rows, retrying)

        try:
            await self._db.run(work, what="commit the turn")
        finally:
            if write_run and run.status != "running":
                # the run's end, written or not: this process is done with the run
                await self._leases.release_run(run.id)
        self._written_run = run

    async def _settled(self) -> None:
        """Reads see every commit called before them (a cancelled caller's too)."""
        self._check_open()
        pending = self._pending
        if pending is not None and not pending.done():
            await asyncio.wait([pending])

    # --- reads -----------------------------------------------------------------------------

    async def _rows(self, statement: str, params: tuple[Any, ...], what: str) -> list[Any]:
        await self._settled()

        async def work(conn: AsyncConnection[Any], _retrying: bool) -> list[Any]:
            cur = await conn.execute(statement, params)
            return await cur.fetchall()

        return await self._db.run(work, what=what)

    async def get_session(self, session_id: str) -> SessionInfo | None:
        """The session with this id, or None."""
        rows = await self._rows(sql.GET_SESSION, (session_id,), "read a session")
        return state_rows.session_info(rows[0]) if rows else None

    async def list_sessions(self, *, limit: int = 50) -> list[SessionInfo]:
        """The most recently updated sessions first."""
        if limit <= 0:
            self._check_open()
            return []
        rows = await self._rows(sql.LIST_SESSIONS, (limit,), "list the sessions")
        return [state_rows.session_info(r) for r in rows]

    async def child_sessions(self, session_id: str) -> list[SessionInfo]:
        """The sessions whose parent is `session_id`, oldest first."""
        rows = await self._rows(sql.CHILD_SESSIONS, (session_id,), "list child sessions")
        return [state_rows.session_info(r) for r in rows]

    async def active_path(self, session_id: str, *, limit: int | None = None) -> list[Message]:
        """Messages from the root to the active leaf (the last `limit` of them when given)."""
        return await self._path(session_id, limit, None)

    async def path_to(self, session_id: str, message_id: str) -> list[Message]:
        """Messages from the root to `message_id` (empty when the session has no such message)."""
        return await self._path(session_id, None, message_id)

    async def _path(self, session_id: str, limit: int | None, to: str | None) -> list[Message]:
        await self._settled()

        async def work(conn: AsyncConnection[Any], _retrying: bool) -> list[str]:
            return await path_docs(conn, session_id, limit, to)

        docs = await self._db.run(work, what="read a session's messages")
        return dbrows.messages(docs)

    async def all_messages(self, session_id: str) -> list[Message]:
        """Every message of the session (all branches) in the order they were written."""
        rows = await self._rows(sql.ALL_MESSAGES, (session_id,), "read a session's messages")
        return dbrows.messages([r[0] for r in rows])

    async def run_events(self, run_id: str) -> Sequence[RunEvent]:
        """A run's events in sequence order."""
        rows = await self._rows(sql.RUN_EVENTS, (run_id,), "read a run's events")
        return dbrows.events([r[0] for r in rows])

    async def list_runs(self, session_id: str) -> list[RunInfo]:
        """The session's runs, oldest first; a run left `running` by a process that is gone
        is reported, and written, as `interrupted`."""
        await self._settled()

        async def work(conn: AsyncConnection[Any], _retrying: bool) -> list[RunInfo]:
            cur = await conn.execute(sql.LIST_RUNS, (session_id,))
            runs = [state_rows.run_info(r) for r in await cur.fetchall()]
            running = [
                r.id for r in runs if r.status == "running" and not self._leases.holds_run(r.id)
            ]
            if not running:
                return runs
            ended = await self._interrupt(conn, running)
            return [_interrupted(r) if r.id in ended else r for r in runs]

        return await self._db.run(work, what="list a session's runs")

    async def _interrupt(self, conn: AsyncConnection[Any], run_ids: list[str]) -> set[str]:
        """Which of these runs nobody holds, written `interrupted` (a database that cannot be
        written now leaves them as they are, and says so)."""
        import psycopg

        try:
            cur = await conn.execute(sql.INTERRUPT_RUNS, (INTERRUPTED_REASON, run_ids))
            return {str(r[0]) for r in await cur.fetchall()}
        except psycopg.Error as exc:
            if is_lost(exc, conn):
                raise
            log.warning("could not mark runs interrupted in the %s: %s", self._db.where, exc)
            return set()

    # --- marks -----------------------------------------------------------------------------

    async def get_mark(self, session_id: str, key: str) -> str | None:
        """The session's mark named `key`, or None."""
        rows = await self._rows(sql.GET_MARK, (session_id, key), "read a session's mark")
        return str(rows[0][0]) if rows else None

    async def set_mark(
        self, session_id: str, key: str, value: str, *, previous: str | None
    ) -> bool:
        """Set the mark to `value` if it is still `previous` (None: not set yet), in one
        statement; whether it was written. `UsageError` for an unknown session."""
        import time

        now = time.time()
        statement: str
        params: tuple[Any, ...]
        if previous is None:
            statement, params = sql.INSERT_MARK, (session_id, key, value, now)
        else:
            statement, params = sql.UPDATE_MARK, (value, now, session_id, key, previous)
        what = f"set the mark {key!r} of session {session_id!r}"
        return bool(await self._rows(statement, params, what))

    # --- copying in -------------------------------------------------------------------------

    async def import_session(
        self,
        session: SessionInfo,
        *,
        runs: Sequence[RunInfo],
        messages: Sequence[Message],
        events: Sequence[RunEvent],
        marks: Mapping[str, str] | None = None,
    ) -> bool:
        """Write a whole session read from another store (`storage copy`) in one transaction:
        its header, runs, messages (in the order they were written there), events and marks.
        False, writing nothing, when a session with its id is here already, so a copy that
        stopped half way can be run again. `UsageError` for rows that break a constraint."""
        self._check_open()
        rows = turns.turn_rows(
            session, None, list(messages), list(events), session.updated_at, where=self._db.where
        )
        header = dbrows.session_params(session, session.updated_at)
        run_rows = [dbrows.run_params(r) for r in runs]
        mark_rows = [(session.id, k, v, session.updated_at) for k, v in (marks or {}).items()]

        async def work(conn: AsyncConnection[Any], _retrying: bool) -> bool:
            return await turns.write_session(conn, header, run_rows, rows, mark_rows)

        return await self._db.run(work, what=f"copy session {session.id!r}")

    # --- claims and the end ----------------------------------------------------------------

    async def claim_session(self, session_id: str) -> SessionClaim:
        """Hold the session until the claim is released (`SessionBusy` while another holds
        it): a session-level advisory lock on this store's own connection (`leases`)."""
        self._check_open()
        await self._db.ready()
        await self._leases.claim(session_id)

        async def release() -> None:
            if not self._closed:  # closing the store lets every claim go
                await self._leases.release_claim(session_id)

        return SessionClaim(session_id, release)

    async def close(self) -> None:
        """Finish the pending commit, let every lock go, and close the pool with the last
        store using it."""
        if self._closed:
            return
        self._closed = True
        try:
            pending = self._pending
            if pending is not None and not pending.done():
                await asyncio.wait([pending])
        finally:
            await self._leases.close()
            await self._db.detach()


def _interrupted(run: RunInfo) -> RunInfo:
    return RunInfo(
        id=run.id,
        session_id=run.session_id,
        started_at=run.started_at,
        status="interrupted",
        finished_at=run.finished_at,
        reason=INTERRUPTED_REASON,
        model=run.model,
    )
