"""The SQLite session store (CTX-1): WAL, a busy timeout, one transaction per turn.

All database work runs on one dedicated worker thread, so writes are serialised in call order and
the event loop only waits on a future. The database (its folder, tables and connection) is set
up lazily by the first call; constructing a store does no I/O. Statements run on a plain
`sqlite3` connection (the SQL text is pinned in `sql.py`); sqlalchemy/sqlmodel, which declare the
schema, are imported only when a database has to be created (~0.3 s, once per machine), never to
open a current one.

The database itself (the connection and every operation on the worker thread) is
`session_db.SessionDatabase`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from soong_agent.adapters.storage.session_db import INTERRUPTED_REASON, SessionDatabase
from soong_agent.adapters.storage.worker import SerialWorker
from soong_agent.ports.errors import RunError, UsageError
from soong_agent.ports.events import RunEvent
from soong_agent.ports.messages import Message
from soong_agent.ports.storage import RunInfo, SessionClaim, SessionInfo, TurnCommit

if TYPE_CHECKING:
    pass

_T = TypeVar("_T")
log = logging.getLogger(__name__)


def _settle(
    loop: asyncio.AbstractEventLoop,
    done: asyncio.Future[_T],
    abandoned: list[BaseException] | None,
    call: Callable[..., _T],
    *args: Any,
) -> None:
    """Run `call` on the worker thread and hand its result or exception to `done` on `loop`
    (nothing when the loop has closed meanwhile: nobody waits any more). A failure whose
    caller has already stopped waiting is kept in `abandoned` (when given), in order."""
    try:
        result = call(*args)
    except BaseException as exc:  # handed to the awaiting coroutine, raised there
        if abandoned is not None and done.cancelled():
            abandoned.append(exc)
        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(_fail, done, exc)
        return
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(_succeed, done, result)


def _succeed(done: asyncio.Future[_T], result: _T) -> None:
    if not done.done():  # the caller may have been cancelled meanwhile
        done.set_result(result)


def _after_abandoned(
    abandoned: list[BaseException], commit: Callable[..., None], *args: Any
) -> None:
    """On the worker: `commit(*args)`, unless a commit before it failed after its caller was
    cancelled; then that failure is raised (once) and nothing is written past the lost turn."""
    if abandoned:
        exc = abandoned.pop(0)
        raise RunError(f"an earlier commit, whose caller was cancelled, failed: {exc}") from exc
    commit(*args)


def _fail(done: asyncio.Future[Any], exc: BaseException) -> None:
    if not done.done():
        done.set_exception(exc)
    else:  # its caller was cancelled and waits no more: the failure is still said
        log.error("a session store call whose caller stopped waiting failed: %s", exc)


class SqliteSessionStore:
    """A `SessionStore` in one SQLite file; several stores and processes may share the file.

    `commit` writes the session and run rows (upserted), the turn's messages and events in one
    `BEGIN IMMEDIATE` transaction (a fenced batch also checks the run queue's row of its run,
    `SqliteRunQueue`, in that transaction). `updated_at` of the session becomes the later of
    `batch.session.updated_at` and `batch.at`. A batch that breaks a constraint (duplicate
    message id or event seq, a run of an unknown session, a message without id) raises
    `UsageError` and writes nothing; a database that cannot be created or opened raises
    `UsageError` naming the path; other database failures (still locked after the busy timeout
    and retries, disk full, ...) raise `RunError`.
    """

    commit_survives_cancel = True
    """A commit handed to the worker goes through when its caller is cancelled (the runtime
    awaits it without a shield, see `SessionStore.commit`)."""

    def __init__(self, db_path: Path, *, busy_timeout_ms: int = 5000) -> None:
        self._db = SessionDatabase(Path(db_path), busy_timeout_ms)
        self._abandoned: list[BaseException] = []
        self._worker = SerialWorker("soong-sqlite")
        self._closed = False

    @property
    def db_path(self) -> Path:
        """The database file."""
        return self._db.path

    def __repr__(self) -> str:
        return f"SqliteSessionStore({str(self._db.path)!r})"

    def warm_up(self) -> None:
        """Start opening the database on the worker thread (folder, file, pragmas); return now.

        Optional: lets a caller overlap the open (and, for a database still to be created, the
        sqlalchemy import) with other start-up work. A failure here is not reported; the next
        call tries again and raises `UsageError`.
        """
        if not self._closed:
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                self._worker.submit(self._db.warm_up)

    async def _run(
        self,
        fn: Callable[..., _T],
        *args: Any,
        abandoned: list[BaseException] | None = None,
    ) -> _T:
        if self._closed:
            raise UsageError(f"the session store {self._db.path} is closed")
        loop = asyncio.get_running_loop()
        done: asyncio.Future[_T] = loop.create_future()
        # one asyncio future settled from the worker, not run_in_executor's pair of futures
        # chained by callbacks: a commit a turn goes through here
        self._worker.submit(_settle, loop, done, abandoned, self._db.call, fn, *args)
        return await done

    async def commit(self, batch: TurnCommit) -> None:
        """Write one turn's messages, events, and session/run state atomically; with
        `batch.fence`, only while the run queue's row of that run still holds the fence
        (`LeaseLost` otherwise, nothing written), checked in the same transaction.

        Once called, the commit goes through on the worker even when its caller is cancelled
        meanwhile; if it then fails, the next commit (the cancelled run's last) raises that
        failure and writes nothing."""
        await self._run(
            _after_abandoned,
            self._abandoned,
            self._db.commit,
            batch.session,
            batch.run,
            list(batch.messages),
            list(batch.events),
            batch.at,
            batch.fence,
            abandoned=self._abandoned,
        )

    async def get_session(self, session_id: str) -> SessionInfo | None:
        """The session with this id, or None."""
        return await self._run(self._db.get_session, session_id)

    async def list_sessions(self, *, limit: int = 50) -> list[SessionInfo]:
        """The most recently updated sessions first."""
        return await self._run(self._db.list_sessions, limit)

    async def child_sessions(self, session_id: str) -> list[SessionInfo]:
        """The sessions whose parent is `session_id`, oldest first."""
        return await self._run(self._db.child_sessions, session_id)

    async def active_path(self, session_id: str, *, limit: int | None = None) -> list[Message]:
        """Messages from the root to the active leaf (the last `limit` of them when given)."""
        return await self._run(self._db.active_path, session_id, limit)

    async def path_to(self, session_id: str, message_id: str) -> list[Message]:
        """Messages from the root to `message_id` (empty when the session has no such message)."""
        return await self._run(self._db.active_path, session_id, None, message_id)

    async def all_messages(self, session_id: str) -> list[Message]:
        """Every message of the session (all branches) in the order they were written."""
        return await self._run(self._db.all_messages, session_id)

    async def list_runs(self, session_id: str) -> list[RunInfo]:
        """The session's runs, oldest first."""
        return await self._run(self._db.list_runs, session_id)

    async def run_events(self, run_id: str) -> Sequence[RunEvent]:
        """A run's events in sequence order."""
        return await self._run(self._db.run_events, run_id)

    async def get_mark(self, session_id: str, key: str) -> str | None:
        """The session's mark named `key`, or None."""
        return await self._run(self._db.get_mark, session_id, key)

    async def set_mark(
        self, session_id: str, key: str, value: str, *, previous: str | None
    ) -> bool:
        """Set the mark to `value` if it is still `previous`; whether it was written."""
        return await self._run(self._db.set_mark, session_id, key, value, previous)

    async def claim_session(self, session_id: str) -> SessionClaim:
        """Hold the session until the claim is released (`SessionBusy` while another holds
        it): an exclusive `flock` on a file beside the database, see `session_claims`."""
        await self._run(self._db.claims.claim, session_id)

        async def release() -> None:
            if not self._closed:  # closing the store lets every claim go
                await self._run(self._db.claims.release, session_id)

        return SessionClaim(session_id, release)

    async def close(self) -> None:
        """Finish pending work, then close the connection and stop the worker thread."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._worker.submit(_settle, loop, done, None, self._db.close)
        try:
            await asyncio.shield(done)  # a cancelled close still closes the connection …
        finally:
            self._worker.stop()  # … and ends the thread (after the queued calls)


__all__ = ["INTERRUPTED_REASON", "SqliteSessionStore"]
