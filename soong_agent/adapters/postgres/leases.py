"""The advisory locks a PostgreSQL store holds, on a connection of its own (STORE-2).

- **Runs.** Before a run's first row says `running`, the store takes a session-level advisory
  lock for it, and lets it go once the run's end is written. The server lets every lock of a
  connection go when the connection ends, however its process ended (kill -9, a host that
  went away: once the server sees the connection drop). So a run whose row still says `running`
  while nobody holds its lock was left by a process that stopped before it could save the end:
  `list_runs`, in any process, reports and writes it as `interrupted` (`INTERRUPT_RUNS`).
- **Sessions.** `claim` takes a session's lock without waiting: a session is run by one process
  at a time. Who holds it (pid and host) is written beside it, for the refusal's message.

The connection is opened by the first lock. If it is lost (the server restarted, the network
broke), the locks went with it: the next lock operation opens a new connection and takes the
locks of the runs again (a run another process marked interrupted meanwhile is written again
by its end); a session claim taken by another process meanwhile is given up, and said.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from soong_agent.adapters.postgres import session_sql as sql
from soong_agent.adapters.postgres.errors import database_error, is_lost
from soong_agent.ports.storage import SessionBusy

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from soong_agent.adapters.postgres.database import PostgresDatabase

_T = TypeVar("_T")
log = logging.getLogger(__name__)


def holder_text() -> str:
    """How this process is named to another that finds its claim."""
    return f"pid {os.getpid()} on {socket.gethostname()}"


class Leases:
    """The run and session locks of one store."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._db = database
        self._conn: AsyncConnection[Any] | None = None
        self._runs: set[str] = set()
        self._sessions: set[str] = set()
        self._guard = asyncio.Lock()
        self.holder = holder_text()

    async def _connection(self) -> AsyncConnection[Any]:
        conn = self._conn
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        if conn is not None:
            log.warning(
                "the lock connection to the %s was lost; taking its locks again", self._db.where
            )
        conn = await self._db.connect()
        if conn.info.server_version >= 140000:  # an idle lock holder must not be ended
            await conn.execute("SELECT set_config('idle_session_timeout', '0', false)")
        self._conn = conn
        for run_id in self._runs:
            await conn.execute(sql.LOCK, (sql.RUN_LOCK_PREFIX + run_id,))
        for session_id in list(self._sessions):
            if not await _try_lock(conn, sql.SESSION_LOCK_PREFIX + session_id):
                self._sessions.discard(session_id)
                log.warning("session %s was claimed by another process meanwhile", session_id)
        return conn

    async def _do(self, what: str, work: Callable[[AsyncConnection[Any]], Awaitable[_T]]) -> _T:
        """`work` on the lock connection, once more on a new one when it is found lost."""
        import psycopg

        async with self._guard:
            for attempt in (1, 2):
                conn = await self._connection()
                try:
                    return await work(conn)
                except psycopg.Error as exc:
                    if attempt == 1 and is_lost(exc, conn):
                        continue
                    raise database_error(exc, what=what, where=self._db.where) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    # --- runs ------------------------------------------------------------------------------

    def holds_run(self, run_id: str) -> bool:
        """Whether this store holds the run's lock."""
        return run_id in self._runs

    async def hold_run(self, run_id: str) -> None:
        """Take the run's lock (once; before its first `running` row is written)."""
        if run_id in self._runs:
            return

        async def work(conn: AsyncConnection[Any]) -> None:
            await conn.execute(sql.LOCK, (sql.RUN_LOCK_PREFIX + run_id,))
            self._runs.add(run_id)

        await self._do(f"take the lock of run {run_id!r}", work)

    async def release_run(self, run_id: str) -> None:
        """Let the run's lock go (its end is written, or will never be)."""
        if run_id not in self._runs:
            return
        self._runs.discard(run_id)
        await self._unlock(sql.RUN_LOCK_PREFIX + run_id)

    # --- sessions --------------------------------------------------------------------------

    async def claim(self, session_id: str) -> None:
        """Hold the session, or raise `SessionBusy` naming its holder."""
        if session_id in self._sessions:
            raise SessionBusy(session_id, holder=f"an earlier claim of this store ({self.holder})")

        async def work(conn: AsyncConnection[Any]) -> str | None:
            if await _try_lock(conn, sql.SESSION_LOCK_PREFIX + session_id):
                self._sessions.add(session_id)
                await conn.execute(sql.UPSERT_CLAIM, (session_id, self.holder, time.time()))
                return None
            cur = await conn.execute(sql.GET_CLAIM, (session_id,))
            row = await cur.fetchone()
            return str(row[0]) if row is not None else "another process"

        holder = await self._do(f"claim session {session_id!r}", work)
        if holder is not None:
            raise SessionBusy(session_id, holder=holder)

    async def release_claim(self, session_id: str) -> None:
        """Let the session go."""
        if session_id not in self._sessions:
            return
        self._sessions.discard(session_id)
        await self._unlock(sql.SESSION_LOCK_PREFIX + session_id, (sql.DELETE_CLAIM, session_id))

    # --- both ------------------------------------------------------------------------------

    async def _unlock(self, key: str, forget: tuple[str, str] | None = None) -> None:
        """Let the lock `key` go (and run `forget`, a statement on an id, with this holder);
        a release that fails leaves the lock to go with the connection (at `close`)."""
        import psycopg

        async with self._guard:
            conn = self._conn
            if conn is None or conn.closed or conn.broken:
                return  # the lock went with the connection
            try:
                if forget is not None:
                    await conn.execute(forget[0], (forget[1], self.holder))
                await conn.execute(sql.UNLOCK, (key,))
            except psycopg.Error as exc:
                log.warning("could not let a lock go in the %s: %s", self._db.where, exc)

    async def close(self) -> None:
        """Let every lock go: the connection ends."""
        async with self._guard:
            self._runs.clear()
            self._sessions.clear()
            conn, self._conn = self._conn, None
            if conn is not None:
                await conn.close()


async def _try_lock(conn: AsyncConnection[Any], key: str) -> bool:
    cur = await conn.execute(sql.TRY_LOCK, (key,))
    row = await cur.fetchone()
    return bool(row and row[0])
