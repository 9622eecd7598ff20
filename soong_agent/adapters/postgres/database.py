"""One PostgreSQL database shared by the stores of a process (sessions, artifacts, and the
task and mailbox stores built on this family).

Constructing it does no I/O: it checks the settings (a password in the URL, a missing password
variable and a missing driver are `ConfigError`s at once). The first call opens the pool and
makes sure the schema is this code's (created on first use, migrated when older, refused when
newer). `run` does one piece of work on a pooled connection: a connection that turns out lost
(the server restarted, `pg_terminate_backend`, the network broke) is replaced and the work tried
once more; any other failure is said in one line (`errors.database_error`).

Stores `attach` themselves when they are made and `detach` when they close: the pool closes
with the last of them (or at `close`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from soong_agent.adapters.postgres import schema
from soong_agent.adapters.postgres.connect import (
    PostgresSettings,
    connect,
    conninfo,
    describe,
    open_pool,
    pool_timeout,
    url_params,
)
from soong_agent.adapters.postgres.driver import require_driver
from soong_agent.adapters.postgres.errors import database_error, is_lost, primary
from soong_agent.ports.errors import RunError, UsageError

if TYPE_CHECKING:
    import psycopg
    from psycopg import AsyncConnection
    from psycopg.rows import TupleRow
    from psycopg_pool import AsyncConnectionPool

_T = TypeVar("_T")
Work = Callable[["AsyncConnection[TupleRow]", bool], Awaitable[_T]]
"""Work on a connection; the flag says it is the retry after a lost connection."""


class PostgresDatabase:
    """The pool and schema of one PostgreSQL database, shared by its stores."""

    def __init__(self, settings: PostgresSettings) -> None:
        require_driver()
        self.settings = settings
        self.where = describe(url_params(settings.url))
        """The database, for messages (host, port, database, user; never the password)."""
        self._conninfo = conninfo(settings)
        self._pool: AsyncConnectionPool[AsyncConnection[TupleRow]] | None = None
        self._opening: asyncio.Lock | None = None
        self._ready = False
        self._users = 0
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresDatabase({self.where!r})"

    # --- lifecycle -------------------------------------------------------------------------

    def attach(self) -> None:
        """A store starts using the database."""
        self._users += 1

    async def detach(self) -> None:
        """A store is done with the database; the last one closes it."""
        self._users -= 1
        if self._users <= 0:
            await self.close()

    @property
    def closed(self) -> bool:
        """Whether `close` has been called."""
        return self._closed

    async def close(self) -> None:
        """Close the pool (idempotent); later calls raise `UsageError`."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"the storage in the {self.where} is closed")

    # --- connections -----------------------------------------------------------------------

    async def pool(self) -> AsyncConnectionPool[AsyncConnection[TupleRow]]:
        """The open pool (opened by the first call); the schema is not looked at."""
        self._check_open()
        if self._pool is not None:
            return self._pool
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is None:
                self._pool = await open_pool(self.settings, self._conninfo)
                if self._closed:  # closed while it opened
                    await self.close()
                    self._check_open()
        return self._pool

    async def ready(self) -> AsyncConnectionPool[AsyncConnection[TupleRow]]:
        """The open pool, the schema made sure of (once per database object)."""
        pool = await self.pool()
        if not self._ready:
            assert self._opening is not None
            async with self._opening:
                if not self._ready:
                    await schema.ensure_schema(pool)
                    self._ready = True
        return pool

    async def connect(self) -> AsyncConnection[TupleRow]:
        """A connection of its own, outside the pool (for session-level advisory locks)."""
        self._check_open()
        return await connect(self.settings, self._conninfo)

    async def run(self, work: Work[_T], *, what: str) -> _T:
        """`work` on a pooled connection, tried once more on a new connection when the first
        is lost; failures raised as `UsageError`/`RunError` saying `what` and where."""
        import psycopg

        pool = await self.ready()
        try:
            return await self._attempt(pool, work, retrying=False)
        except _Lost as lost:
            first = lost.cause
        except psycopg.Error as exc:
            raise self._error(exc, what) from exc
        try:
            await self._discard_broken(pool)
        except UsageError as exc:
            raise RunError(
                f"cannot {what}: the connection was lost ({primary(first)}) and {exc}"
            ) from first
        try:
            return await self._attempt(pool, work, retrying=True)
        except _Lost as lost:
            raise RunError(
                f"cannot {what} in {self.where}: the connection was lost ({primary(first)}),"
                f" and again on a new one ({primary(lost.cause)})"
            ) from lost.cause
        except psycopg.Error as exc:
            raise self._error(exc, what) from exc

    async def _attempt(
        self,
        pool: AsyncConnectionPool[AsyncConnection[TupleRow]],
        work: Work[_T],
        *,
        retrying: bool,
    ) -> _T:
        import psycopg

        async with pool.connection() as conn:
            try:
                return await work(conn, retrying)
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

    async def _discard_broken(self, pool: AsyncConnectionPool[AsyncConnection[TupleRow]]) -> None:
        """After a lost connection the others may be gone too (a server restart): they are
        checked, so the retry runs on a working one, and a server that cannot be reached now
        is said at once (`UsageError` from `connect`) rather than after the pool's wait."""
        await pool.check()
        probe = await connect(self.settings, self._conninfo)
        await probe.close()


class _Lost(Exception):
    """The connection went away during the work (`cause` says how)."""

    def __init__(self, cause: psycopg.Error) -> None:
        super().__init__(str(cause))
        self.cause = cause
