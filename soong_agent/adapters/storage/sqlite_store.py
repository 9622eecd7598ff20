"""The SQLite session store (CTX-1): WAL, a busy timeout, one transaction per turn.

All database work runs on one dedicated worker thread, so writes are serialised in call order and
the event loop only waits on a future. The database (its folder, tables and connection) is set
up lazily by the first call; constructing a store does no I/O. Statements run on a plain
`sqlite3` connection (the SQL text is pinned in `sql.py`); sqlalchemy/sqlmodel, which declare the
schema, are imported only when a database has to be created (~0.3 s, once per machine), never to
open a current one.

Message parent links are resolved when a message is written: `parent_ordinal` points at the row
of the parent, which must be an earlier message of the same session (otherwise the message is a
root of the active-path walk). The walk is a recursive CTE over that integer key.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic_core import PydanticSerializationError

from soong_agent.adapters.storage import sql, transactions
from soong_agent.adapters.storage.run_locks import RunLocks
from soong_agent.adapters.storage.worker import SerialWorker
from soong_agent.ports.errors import RunError, UsageError
from soong_agent.ports.events import RunEvent
from soong_agent.ports.messages import MESSAGE_LIST, Message
from soong_agent.ports.storage import RunInfo, SessionInfo, TurnCommit

if TYPE_CHECKING:
    from pydantic import TypeAdapter

_T = TypeVar("_T")
log = logging.getLogger(__name__)

INTERRUPTED_REASON = (
    "the process running it stopped before the run's end was saved; resume the session to go on"
)
_CHUNK = 2000
"""Rows validated per pydantic call when loading, so the event loop gets the GIL in between."""
_MMAP_BYTES = 256 * 1024 * 1024
_TAIL_SLICE = 1024
"""Rows fetched at a time while following a path backwards in write order."""


@cache
def _event_list() -> TypeAdapter[list[RunEvent]]:
    from pydantic import TypeAdapter

    return TypeAdapter(list[RunEvent])


def _validate_json_rows(rows: Sequence[str], validate: Callable[[str], list[_T]]) -> list[_T]:
    """Validate JSON documents by joining them into arrays of `_CHUNK` documents.

    Loading a long session creates ~10 GC-tracked objects per message, none of them garbage.
    With the cyclic GC running, young-generation passes traverse them again and again (more
    than half of the load time); merely pausing the GC defers one large pass to whichever
    thread allocates next. So the GC is paused while validating, and the new objects are then
    moved straight to the oldest generation (`gc.freeze()` + `gc.unfreeze()`, both O(1)),
    where long-lived objects end up anyway. Skipped when the application uses `gc.freeze()`.
    """
    out: list[_T] = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for start in range(0, len(rows), _CHUNK):
            out.extend(validate("[" + ",".join(rows[start : start + _CHUNK]) + "]"))
    finally:
        if len(rows) >= _CHUNK and gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if gc_was_enabled:
            gc.enable()
    return out


class _Database:
    """The connection and every query; used only on the store's worker thread."""

    def __init__(self, path: Path, busy_timeout_ms: int) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None
        self._written_run: RunInfo | None = None  # as last committed (only the writer writes)
        self.locks = RunLocks(path)

    # --- connection ------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        return transactions.connect(
            self.path,
            self.busy_timeout_ms,
            "PRAGMA foreign_keys = ON",
            # Reads of long sessions copy far less through memory-mapped pages (~2x faster).
            f"PRAGMA mmap_size = {_MMAP_BYTES}",
        )

    def connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = transactions.open_database(self.path, self._connect)
        return self._conn

    def warm_up(self) -> None:
        try:
            self.connection()
        except (UsageError, sqlite3.Error):  # reported by the next real call, which opens again
            return

    def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run one operation; database failures become `RunError`s naming the file."""
        try:
            return fn(*args)
        except sqlite3.Error as exc:
            raise RunError(f"session database {self.path}: {exc}") from exc

    def _rows(self, statement: str, params: dict[str, Any]) -> list[Any]:
        """All rows of one read (autocommit: the statement is its own read transaction)."""
        return self.connection().execute(statement, params).fetchall()

    def close(self) -> None:
        self.locks.close()
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    # --- writes ----------------------------------------------------------------------------

    def commit(
        self,
        session: SessionInfo,
        run: RunInfo,
        messages: list[Message],
        events: list[RunEvent],
        at: float,
    ) -> None:
        if any(not m.id for m in messages):
            raise UsageError("every committed message needs an id")
        conn = self.connection()
        updated_at = max(session.updated_at, at)
        session_row = sql.session_row(session, updated_at)
        # a run's row changes at its start and its end only: the turns between leave it be
        run_row = None if run == self._written_run else sql.run_row(run)
        if run_row is not None and run.status == "running":
            self.locks.hold(run.id)  # before the row exists: see `run_locks`
        try:
            message_rows = sql.message_params(session.id, messages, at or updated_at)
            event_values = sql.event_values(events)
        except PydanticSerializationError:
            # text no UTF-8 can hold that came past the run's own boundaries is stored as the
            # rule of `ports.text` writes it, rather than the turn lost; any other value JSON
            # cannot take fails the commit, nothing written
            try:
                message_rows = sql.message_params(session.id, messages, at or updated_at, safe=True)
                event_values = sql.event_values(events, safe=True)
            except (PydanticSerializationError, TypeError, ValueError) as exc:
                first = str(exc).strip().splitlines()[-1].strip()
                raise UsageError(
                    f"cannot commit the turn to {self.path}: a message or event holds a value "
                    f"that cannot be stored ({first})"
                ) from exc

        def work(c: sqlite3.Connection, rows: tuple[Any, Any, list[Any], list[Any]]) -> None:
            session_params, run_params, message_params, event_params = rows
            cursor = c.cursor()
            cursor.execute(sql.UPSERT_SESSION, session_params)
            if run_params is not None:
                cursor.execute(sql.UPSERT_RUN, run_params)
            if message_params:
                cursor.executemany(sql.INSERT_MESSAGE_BY_POSITION, message_params)
            step = sql.EVENTS_PER_INSERT * len(sql.EVENT_PARAMS)
            for start in range(0, len(event_params), step):
                chunk = event_params[start : start + step]
                cursor.execute(sql.insert_events(len(chunk) // len(sql.EVENT_PARAMS)), chunk)

        rows = (session_row, run_row, message_rows, event_values)
        try:
            try:
                transactions.write(conn, lambda c: work(c, rows))
            except UnicodeEncodeError:  # a header (title, reason, ...) holds a lone surrogate
                transactions.write(conn, lambda c: work(c, sql.safe_params(rows)))
        except sqlite3.IntegrityError as exc:
            raise UsageError(f"cannot commit the turn to {self.path}: {exc}") from exc
        finally:
            if run_row is not None and run.status != "running":
                # the run's end, written or not: the process is done with the run, so a
                # reader may now call it interrupted if the end never arrives (a later write
                # of the end wins; marking touches only a row still `running`)
                self.locks.release(run.id)
        self._written_run = run

    # --- reads -----------------------------------------------------------------------------

    def get_session(self, session_id: str) -> SessionInfo | None:
        rows = self._rows(sql.GET_SESSION, {"sid": session_id})
        return sql.session_info(rows[0]) if rows else None

    def list_sessions(self, limit: int) -> list[SessionInfo]:
        if limit <= 0:
            return []
        return [sql.session_info(r) for r in self._rows(sql.LIST_SESSIONS, {"limit": limit})]

    def child_sessions(self, session_id: str) -> list[SessionInfo]:
        return [sql.session_info(r) for r in self._rows(sql.CHILD_SESSIONS, {"sid": session_id})]

    def active_path(
        self, session_id: str, limit: int | None, message_id: str | None = None
    ) -> list[Message]:
        if limit is not None and limit <= 0:
            return []
        params: dict[str, Any] = {"sid": session_id, "limit": -1 if limit is None else limit}
        tail, walk = sql.TAIL_SQL, sql.PATH_SQL
        if message_id is not None:
            params["mid"] = message_id
            tail, walk = sql.TAIL_TO_SQL, sql.PATH_TO_SQL
        docs = self._linear_tail(tail, params, limit)
        if docs is None:  # the path branches off within the tail: walk it link by link
            docs = [r[0] for r in self._rows(walk, params)]
        docs.reverse()  # both read the leaf first
        return _validate_json_rows(docs, MESSAGE_LIST.validate_json)

    def _linear_tail(
        self, statement: str, params: dict[str, Any], limit: int | None
    ) -> list[str] | None:
        """The path, leaf first, when the newest rows up to the leaf are exactly its messages
        (each row the parent of the one before, down to the root or to `limit` rows); None as
        soon as a row is not. Read in slices, so a path that ends at a root long before the
        session's first row stops reading there."""
        cursor = self.connection().execute(statement, params)
        docs: list[str] = []
        expected: int | None = None
        try:
            while rows := cursor.fetchmany(_TAIL_SLICE):
                for ordinal, parent, content in rows:
                    if expected is not None and ordinal != expected:
                        return None
                    docs.append(content)
                    if parent is None:
                        return docs  # the root
                    expected = parent
        finally:
            cursor.close()
        if limit is not None and len(docs) == limit:
            return docs
        return None if docs else []

    def all_messages(self, session_id: str) -> list[Message]:
        rows = self._rows(sql.ALL_MESSAGES, {"sid": session_id})
        return _validate_json_rows([r[0] for r in rows], MESSAGE_LIST.validate_json)

    def list_runs(self, session_id: str) -> list[RunInfo]:
        runs = [sql.run_info(r) for r in self._rows(sql.LIST_RUNS, {"sid": session_id})]
        return [
            self._interrupted(r)
            if r.status == "running" and not self.locks.held_elsewhere_or_here(r.id)
            else r
            for r in runs
        ]

    def _interrupted(self, run: RunInfo) -> RunInfo:
        """`run`, left `running` by a process that is gone, as `interrupted` (written, unless
        the database cannot be written now: it is reported so all the same)."""
        ended = RunInfo(
            id=run.id,
            session_id=run.session_id,
            started_at=run.started_at,
            status="interrupted",
            finished_at=run.finished_at,
            reason=INTERRUPTED_REASON,
            model=run.model,
        )
        params = {
            "rid": run.id,
            "was": "running",
            "status": ended.status,
            "reason": ended.reason,
            "finished_at": ended.finished_at,
        }

        def work(c: sqlite3.Connection) -> None:
            c.execute(sql.INTERRUPT_RUN, params)

        try:
            transactions.write(self.connection(), work)
        except sqlite3.Error as exc:  # read-only or busy: reported all the same, written later
            log.warning("could not mark run %s interrupted in %s: %s", run.id, self.path, exc)
        return ended

    def run_events(self, run_id: str) -> list[RunEvent]:
        rows = self._rows(sql.RUN_EVENTS, {"rid": run_id})
        return _validate_json_rows([r[0] for r in rows], _event_list().validate_json)

    # --- marks -----------------------------------------------------------------------------

    def get_mark(self, session_id: str, key: str) -> str | None:
        rows = self._rows(sql.GET_MARK, {"sid": session_id, "key": key})
        return str(rows[0][0]) if rows else None

    def set_mark(self, session_id: str, key: str, value: str, previous: str | None) -> bool:
        """Compare and set in one `BEGIN IMMEDIATE` transaction: no other writer, in this
        process or another, can come between the read and the write."""
        written = False

        def work(c: sqlite3.Connection) -> None:
            nonlocal written
            rows = c.execute(sql.GET_MARK, {"sid": session_id, "key": key}).fetchall()
            if (str(rows[0][0]) if rows else None) != previous:
                return
            c.execute(sql.UPSERT_MARK, sql.mark_row(session_id, key, value, time.time()))
            written = True

        try:
            transactions.write(self.connection(), work)
        except sqlite3.IntegrityError as exc:
            raise UsageError(
                f"cannot set the mark {key!r} of session {session_id!r} in {self.path}: {exc}"
            ) from exc
        return written


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
    `BEGIN IMMEDIATE` transaction. `updated_at` of the session becomes the later of
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
        self._db = _Database(Path(db_path), busy_timeout_ms)
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
        """Write one turn's messages, events, and session/run state atomically.

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
