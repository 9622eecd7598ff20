"""Waking a reader when its mail arrives (TEAM-2 over PostgreSQL): one connection of its own per
event loop LISTENs on the channel of every team this process waits on (`mail_sql.channel`).

A send notifies its team's channel with the recipient's name when it commits; the reader task
hands each notification to the waits of that member (`waiter`). LISTEN is confirmed before a
wait looks at the inbox, so a mail is either seen by that look or wakes the wait.

When the connection cannot be made or is lost, `listen` says so (False) and waits poll
instead; every wait under way is woken to look at its inbox, and a new connection is tried
again after `retry_s`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from soong_agent.adapters.postgres.errors import primary
from soong_agent.adapters.postgres.mail_sql import channel
from soong_agent.ports.errors import RunError, UsageError

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from soong_agent.adapters.postgres.sync_database import PostgresSyncDatabase

log = logging.getLogger(__name__)


class MailListener:
    """The notifications of this event loop's waits for mail (made inside the loop)."""

    def __init__(self, database: PostgresSyncDatabase, *, retry_s: float) -> None:
        self.loop = asyncio.get_running_loop()
        self._db = database
        self._retry_s = retry_s
        self._conn: AsyncConnection[Any] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._teams: dict[str, str] = {}  # channel -> team
        self._waiters: dict[tuple[str, str], set[asyncio.Future[None]]] = {}
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

    async def listen(self, team: str) -> bool:
        """LISTEN on the team's channel (once); whether notifications come now (False: the
        connection could not be made, said in the log, and a wait must poll)."""
        import psycopg

        name = channel(team)
        if name in self._teams and self._up():
            return True
        async with self._guard:
            if name in self._teams and self._up():
                return True
            if self.loop.time() < self._retry_at:
                return False
            try:
                await self._listen(team, name)
            except (UsageError, RunError, psycopg.Error) as exc:
                self._retry_at = self.loop.time() + self._retry_s
                log.warning(
                    "cannot listen for mail in the %s (%s); looking every %.0f s instead",
                    self._db.where,
                    primary(exc),
                    self._retry_s,
                )
                await self._stop()
                return False
            return True

    async def _listen(self, team: str, name: str) -> None:
        from psycopg import sql

        if not self._up():
            await self._stop()
            fresh = await self._db.connect_async()
            self._conn = fresh
            if fresh.info.server_version >= 140000:  # an idle listener must not be ended
                await fresh.execute("SELECT set_config('idle_session_timeout', '0', false)")
            for known in self._teams:
                await fresh.execute(sql.SQL("LISTEN {}").format(sql.Identifier(known)))
        conn = self._conn
        assert conn is not None
        if name not in self._teams:
            await self._stop_reader()  # the reader holds the connection while it waits
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))
            self._teams[name] = team
        if self._reader is None or self._reader.done():
            self._reader = self.loop.create_task(self._read(conn), name="soong-mail-listener")

    async def _read(self, conn: AsyncConnection[Any]) -> None:
        import psycopg

        try:
            async for note in conn.notifies():
                team = self._teams.get(note.channel)
                for waiting in self._waiters.get((team or "", note.payload), ()):
                    if not waiting.done():
                        waiting.set_result(None)
        except psycopg.Error as exc:
            log.warning("stopped listening for mail in the %s: %s", self._db.where, primary(exc))
            await conn.close()
            self._wake_all()  # each wait looks at its inbox, and listens again or polls

    def waiter(self, team: str, member: str) -> asyncio.Future[None]:
        """A future done when a mail to `member` of `team` is notified (or listening stops);
        `forget` it after use."""
        waiting: asyncio.Future[None] = self.loop.create_future()
        self._waiters.setdefault((team, member), set()).add(waiting)
        return waiting

    def forget(self, team: str, member: str, waiting: asyncio.Future[None]) -> None:
        """Stop handing notifications to `waiting`."""
        found = self._waiters.get((team, member))
        if found is not None:
            found.discard(waiting)
            if not found:
                del self._waiters[(team, member)]

    def _wake_all(self) -> None:
        for waits in self._waiters.values():
            for waiting in waits:
                if not waiting.done():
                    waiting.set_result(None)

    async def _stop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None and not reader.done():
            reader.cancel()
            await asyncio.wait([reader])  # never raises: a cancel of ours is not swallowed

    async def _stop(self) -> None:
        await self._stop_reader()
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        """Stop listening: the connection ends, every wait under way looks at its inbox."""
        async with self._guard:
            await self._stop()
            self._teams.clear()
        self._wake_all()
