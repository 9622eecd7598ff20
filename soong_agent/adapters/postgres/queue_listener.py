"""Waking a waiting worker when a run is submitted, released or cancelled (WORK-2 over
PostgreSQL): one connection of the queue's own LISTENs on `queue_sql.CHANNEL`. The approval
store listens the same way on its own channel (`approval_sql.CHANNEL`, WORK-3).

The reader task marks every notification (`notified`, which the queue clears when it claims)
and wakes the waits under way, so a notification that comes while the worker is busy is not
lost: its next wait returns at once. LISTEN is confirmed before `listen` returns.

When the connection cannot be made or is lost, `listen` says so (False) and waits poll
instead; a lost connection counts as a notification (what it would have said is unknown), and
a new connection is tried again after `retry_s`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from soong_agent.adapters.postgres.errors import primary
from soong_agent.adapters.postgres.queue_sql import CHANNEL
from soong_agent.ports.errors import RunError, UsageError

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from soong_agent.adapters.postgres.database import PostgresDatabase

log = logging.getLogger(__name__)


class QueueListener:
    """The notifications of one channel in one event loop (made inside the loop): the run
    queue's by default; `about` says what they are about, in the log."""

    def __init__(
        self,
        database: PostgresDatabase,
        *,
        retry_s: float,
        channel: str = CHANNEL,
        about: str = "queued runs",
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.channel = channel
        self.about = about
        self.notified = False
        """A notification came (or listening stopped) since the queue last cleared this."""
        self._db = database
        self._retry_s = retry_s
        self._conn: AsyncConnection[Any] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiters: set[asyncio.Future[None]] = set()
        self._guard = asyncio.Lock()
        self._retry_at = 0.0

    def _up(self) -> bool:
        conn, reader = self._conn, self._reader
        return (
            conn is not None
            and not conn.closed
            and not conn.broken
            and reader is not None
            and not reader.done()
        )

    async def listen(self) -> bool:
        """LISTEN (once); whether notifications come now (False: the connection could not
        be made, said in the log, and a wait must poll)."""
        import psycopg

        if self._up():
            return True
        async with self._guard:
            if self._up():
                return True
            if self.loop.time() < self._retry_at:
                return False
            try:
                await self._listen()
            except (UsageError, RunError, psycopg.Error) as exc:
                self._retry_at = self.loop.time() + self._retry_s
                log.warning(
                    "cannot listen for %s in the %s (%s); looking every %.0f s instead",
                    self.about,
                    self._db.where,
                    primary(exc),
                    self._retry_s,
                )
                await self._stop()
                return False
            return True

    async def _listen(self) -> None:
        await self._stop()
        conn = await self._db.connect()
        self._conn = conn
        if conn.info.server_version >= 140000:  # an idle listener must not be ended
            await conn.execute("SELECT set_config('idle_session_timeout', '0', false)")
        await conn.execute(f"LISTEN {self.channel}")
        self._reader = self.loop.create_task(self._read(conn), name=f"soong-{self.channel}")

    async def _read(self, conn: AsyncConnection[Any]) -> None:
        import psycopg

        try:
            async for _note in conn.notifies():
                self._wake()
        except psycopg.Error as exc:
            log.warning(
                "stopped listening for %s in the %s: %s", self.about, self._db.where, primary(exc)
            )
            await conn.close()
            self._wake()  # each wait looks at the queue, and listens again or polls

    def _wake(self) -> None:
        self.notified = True
        for waiting in self._waiters:
            if not waiting.done():
                waiting.set_result(None)

    def waiter(self) -> asyncio.Future[None]:
        """A future done at the next notification (or when listening stops); `forget` it
        after use."""
        waiting: asyncio.Future[None] = self.loop.create_future()
        self._waiters.add(waiting)
        return waiting

    def forget(self, waiting: asyncio.Future[None]) -> None:
        """Stop handing notifications to `waiting`."""
        self._waiters.discard(waiting)

    async def _stop(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None and not reader.done():
            reader.cancel()
            await asyncio.wait([reader])  # never raises: a cancel of ours is not swallowed
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        """Stop listening: the connection ends, every wait under way returns."""
        async with self._guard:
            await self._stop()
        for waiting in self._waiters:
            if not waiting.done():
                waiting.set_result(None)


class ListeningStore:
    """What the PostgreSQL stores that LISTEN share (the run queue, the approvals): the
    database they use, a listener per event loop on their channel, and their closing."""

    def __init__(
        self,
        database: PostgresDatabase,
        *,
        fallback_poll_s: float,
        channel: str,
        about: str,
        what: str,
    ) -> None:
        if not fallback_poll_s > 0:
            raise ValueError(f"fallback_poll_s must be positive, not {fallback_poll_s}")
        self._db = database
        database.attach()
        self._fallback_poll_s = fallback_poll_s
        self._channel, self._about, self._what = channel, about, what
        self._listener: QueueListener | None = None
        self._closed = False

    @property
    def database(self) -> PostgresDatabase:
        """The database this store is in."""
        return self._db

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._db.where!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"{self._what} in the {self._db.where} is closed")

    def _here(self) -> QueueListener:
        """The listener of the running event loop (made when first needed)."""
        listener = self._listener
        if listener is None or listener.loop is not asyncio.get_running_loop():
            listener = self._listener = QueueListener(
                self._db, retry_s=self._fallback_poll_s, channel=self._channel, about=self._about
            )
        return listener

    async def _stop_listening(self) -> None:
        """Mark the store closed and close its listener (if of this loop)."""
        self._closed = True
        listener, self._listener = self._listener, None
        if listener is not None and listener.loop is asyncio.get_running_loop():
            await listener.close()
