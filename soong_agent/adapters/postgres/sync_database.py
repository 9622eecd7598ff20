"""The same PostgreSQL database for the synchronous stores (the task log and the mailbox, whose
ports are called from worker threads): a pool of blocking connections built from the same
`PostgresSettings` as `PostgresDatabase`, the same schema, the same one-line errors.

Constructing it does no I/O (the settings are checked at once, as `PostgresDatabase` does). The
first call opens the pool and makes sure the schema is this code's: one query when it is
current; otherwise the shared migration (`schema.migrate`, under its advisory lock) runs on an
event loop of its own in a short-lived thread, so it works from any thread, a thread running an
event loop included. `run` does one piece of work on a pooled connection; a connection found
lost is replaced and the work tried once more, as `PostgresDatabase.run` does. Every method may
be called from any thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from soong_agent.adapters.postgres import schema
from soong_agent.adapters.postgres.connect import (
    APPLICATION_NAME,
    CONFIGURE,
    PostgresSettings,
    connect,
    connection_error,
    conninfo,
    describe,
    pool_timeout,
    url_params,
)
from soong_agent.adapters.postgres.database import PostgresDatabase
from soong_agent.adapters.postgres.driver import require_driver
from soong_agent.adapters.postgres.errors import database_error, is_lost, primary
from soong_agent.ports.errors import RunError, UsageError

if TYPE_CHECKING:
    import psycopg
    from psycopg import AsyncConnection, Connection
    from psycopg.rows import TupleRow
    from psycopg_pool import ConnectionPool

_T = TypeVar("_T")
SyncWork = Callable[["Connection[TupleRow]", bool], _T]
"""Work on a connection; the flag says it is the retry after a lost connection."""


class PostgresSyncDatabase:
    """The blocking pool and the schema of one PostgreSQL database, shared by its synchronous
    stores (`PostgresTaskLog`, `PostgresMailbox`)."""

    def __init__(self, settings: PostgresSettings) -> None:
        require_driver()
        self.settings = settings
        self.where = describe(url_params(settings.url))
        """The database, for messages (host, port, database, user; never the password)."""
        self._conninfo = conninfo(settings)
        self._pool: ConnectionPool[Connection[TupleRow]] | None = None
        self._opening = threading.Lock()
        self._ready = False
        self._users = 0
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresSyncDatabase({self.where!r})"

    # --- lifecycle -------------------------------------------------------------------------

    def attach(self) -> None:
        """A store starts using the database."""
        with self._opening:
            self._users += 1

    def detach(self) -> None:
        """A store is done with the database; the last one closes it."""
        with self._opening:
            self._users -= 1
            last = self._users <= 0
        if last:
            self.close()

    @property
    def closed(self) -> bool:
        """Whether `close` has been called."""
        return self._closed

    def close(self) -> None:
        """Close the pool (idempotent); later calls raise `UsageError`."""
        with self._opening:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"the storage in the {self.where} is closed")

    # --- connections -----------------------------------------------------------------------

    def ready(self) -> ConnectionPool[Connection[TupleRow]]:
        """The open pool, the schema made sure of (once per database object)."""
        self._check_open()
        with self._opening:
            self._check_open()
            if self._pool is None:
                self._pool = self._open_pool()
            if not self._ready:
                self._ensure_schema(self._pool)
                self._ready = True
            return self._pool

    async def connect_async(self) -> AsyncConnection[TupleRow]:
        """An asynchronous autocommit connection of its own, outside the pool (for LISTEN)."""
        self._check_open()
        return await connect(self.settings, self._conninfo)

    def run(self, work: SyncWork[_T], *, what: str) -> _T:
        """`work` on a pooled connection, tried once more on a new connection when the first
        is lost; failures raised as `UsageError`/`RunError` saying `what` and where."""
        import psycopg

        pool = self.ready()
        try:
            return self._attempt(pool, work, retrying=False)
        except _Lost as lost:
            first = lost.cause
        except psycopg.Error as exc:
            raise self._error(exc, what) from exc
        try:
            pool.check()  # after a server restart the others are gone too
            self._probe()
        except UsageError as exc:
            raise RunError(
                f"cannot {what}: the connection was lost ({primary(first)}) and {exc}"
            ) from first
        try:
            return self._attempt(pool, work, retrying=True)
        except _Lost as lost:
            raise RunError(
                f"cannot {what} in {self.where}: the connection was lost ({primary(first)}),"
                f" and again on a new one ({primary(lost.cause)})"
            ) from lost.cause
        except psycopg.Error as exc:
            raise self._error(exc, what) from exc

    def _attempt(
        self, pool: ConnectionPool[Connection[TupleRow]], work: SyncWork[_T], *, retrying: bool
    ) -> _T:
        import psycopg

        with pool.connection() as conn:
            try:
                return work(conn, retrying)
            except psycopg.Error as exc:
                if is_lost(exc, conn):
                    raise _Lost(exc) from exc
                raise

    def _error(self, exc: psycopg.Error, what: str) -> Exception:
        from psycopg_pool import PoolTimeout

        if isinstance(exc, PoolTimeout):
            return RunError(
                f"cannot {what} in {self.where}: no connection came free within"
                f" {pool_timeout(self.settings):.0f} s (pool size {self.settings.pool_size})"
            )
        return database_error(exc, what=what, where=self.where)

    def _probe(self) -> None:
        """One connection made and closed: a server that cannot be reached is said plainly
        (`connection_error`), where a pool only says that it timed out."""
        import psycopg

        try:
            conn = psycopg.connect(self._conninfo, autocommit=True)
        except psycopg.OperationalError as exc:
            raise connection_error(exc, self.settings) from None
        conn.close()

    def _open_pool(self) -> ConnectionPool[Connection[TupleRow]]:
        from psycopg_pool import ConnectionPool, PoolTimeout

        self._probe()
        timeout_ms = str(self.settings.statement_timeout_ms)

        def setup(conn: Connection[Any]) -> None:
            conn.execute(CONFIGURE, {"ms": timeout_ms})

        pool: ConnectionPool[Connection[TupleRow]] = ConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=self.settings.pool_size,
            kwargs={"autocommit": True},
            configure=setup,
            open=False,
            name=f"{APPLICATION_NAME}-sync",
            timeout=pool_timeout(self.settings),
        )
        try:
            pool.open(wait=True, timeout=float(self.settings.connect_timeout_s))
        except PoolTimeout as exc:
            pool.close()
            raise connection_error(exc, self.settings) from None
        except BaseException:
            pool.close()
            raise
        return pool

    # --- the schema ------------------------------------------------------------------------

    def _ensure_schema(self, pool: ConnectionPool[Connection[TupleRow]]) -> None:
        """The schema this code uses: found current with one query, else created or migrated
        by the shared migration; a newer one refused (`UsageError`)."""
        import psycopg

        try:
            with pool.connection() as conn:
                found = _read_version(conn)
        except psycopg.Error as exc:
            raise database_error(exc, what="read the schema version", where=self.where) from exc
        if found == schema.CODE_VERSION:
            return
        schema.refuse_newer(found, schema.CODE_VERSION, self.where)
        settings = self.settings

        async def migrate() -> None:
            database = PostgresDatabase(settings)
            try:
                await database.ready()  # creates or migrates, under the advisory lock
            finally:
                await database.close()

        with ThreadPoolExecutor(1, thread_name_prefix="soong-pg-migrate") as one:
            one.submit(asyncio.run, migrate()).result()


def _read_version(conn: Connection[Any]) -> int:
    """The database's schema version (0: nothing created yet), as `schema.read_version`."""
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (schema.VERSION_TABLE,)).fetchone()
    if row is None or not row[0]:
        return 0
    row = conn.execute(f"SELECT coalesce(max(version), 0) FROM {schema.VERSION_TABLE}").fetchone()
    return int(row[0]) if row is not None else 0


class _Lost(Exception):
    """The connection went away during the work (`cause` says how)."""

    def __init__(self, cause: psycopg.Error) -> None:
        super().__init__(str(cause))
        self.cause = cause
