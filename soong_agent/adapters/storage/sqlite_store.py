"""The SQLite session store (CTX-1): WAL, a busy timeout, one transaction per turn.

All database work runs on one dedicated worker thread, so writes are serialised in call order and
the event loop only waits on a future. The database (its folder, tables and connection) is set
up lazily by the first call; constructing a store does no I/O. sqlalchemy/sqlmodel are imported
on that first call too, never when this module is imported (they cost ~0.4 s).

Message parent links are resolved when a message is written: `parent_ordinal` points at the row
of the parent, which must be an earlier message of the same session (otherwise the message is a
root of the active-path walk). The walk is a recursive CTE over that integer key.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from soong_agent.adapters.storage import transactions
from soong_agent.ports.errors import RunError, UsageError
from soong_agent.ports.events import RunEvent
from soong_agent.ports.messages import MESSAGE_LIST, Message
from soong_agent.ports.storage import RunInfo, SessionInfo, TurnCommit

if TYPE_CHECKING:
    import sqlite3

    from pydantic import TypeAdapter
    from sqlalchemy.engine import Connection, Engine

    from soong_agent.adapters.storage.tables import Statements

_T = TypeVar("_T")

"""BEGIN IMMEDIATE attempts when the busy timeout alone did not get the write lock."""
_CHUNK = 2000
"""Rows validated per pydantic call when loading, so the event loop gets the GIL in between."""
_NO_LIMIT = 1 << 62
_MMAP_BYTES = 256 * 1024 * 1024


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
        self._engine: Engine | None = None
        self._conn: Connection | None = None
        self._st: Statements | None = None

    # --- connection ------------------------------------------------------------------------

    def _connect_dbapi(self) -> sqlite3.Connection:
        import sqlite3

        conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            transactions.enable_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            # Reads of long sessions copy far less through memory-mapped pages (~2x faster).
            conn.execute(f"PRAGMA mmap_size = {_MMAP_BYTES}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _open(self) -> tuple[Connection, Statements]:
        from soong_agent.adapters.storage.tables import Statements

        engine, conn = transactions.open_engine(self.path, self._connect_dbapi)
        self._engine, self._conn, self._st = engine, conn, Statements()
        return conn, self._st

    def connection(self) -> tuple[Connection, Statements]:
        if self._conn is None or self._st is None:
            return self._open()
        return self._conn, self._st

    def warm_up(self) -> None:
        try:
            self.connection()
        except Exception:  # reported by the next real call, which opens again
            return

    def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run one operation; database failures become `RunError`s naming the file."""
        import sqlite3

        from sqlalchemy.exc import DBAPIError

        try:
            return fn(*args)
        except DBAPIError as exc:
            raise RunError(f"session database {self.path}: {exc.orig}") from exc
        except sqlite3.Error as exc:
            raise RunError(f"session database {self.path}: {exc}") from exc

    def _write(self, conn: Connection, work: Callable[[Connection], None]) -> None:
        transactions.write(conn, work)

    def _read(self, work: Callable[[Connection], _T]) -> _T:
        conn, _ = self.connection()
        try:
            return work(conn)
        finally:
            conn.rollback()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._engine is not None:
            self._engine.dispose()
        self._conn = self._engine = self._st = None

    # --- writes ----------------------------------------------------------------------------

    def commit(
        self,
        session: SessionInfo,
        run: RunInfo,
        messages: list[Message],
        events: list[RunEvent],
        at: float,
    ) -> None:
        from sqlalchemy.exc import IntegrityError

        from soong_agent.adapters.storage import tables

        if any(not m.id for m in messages):
            raise UsageError("every committed message needs an id")
        conn, st = self.connection()
        updated_at = max(session.updated_at, at)
        session_row = tables.session_row(session, updated_at)
        run_row = tables.run_row(run)
        message_rows = tables.message_rows(session.id, messages, at or updated_at)
        event_rows = tables.event_rows(events)

        def work(c: Connection) -> None:
            c.exec_driver_sql(st.upsert_session, session_row)
            c.exec_driver_sql(st.upsert_run, run_row)
            if message_rows:
                c.exec_driver_sql(st.insert_messages, message_rows)
            if event_rows:
                c.exec_driver_sql(st.insert_events, event_rows)

        try:
            self._write(conn, work)
        except IntegrityError as exc:
            raise UsageError(f"cannot commit the turn to {self.path}: {exc.orig}") from exc

    # --- reads -----------------------------------------------------------------------------

    def get_session(self, session_id: str) -> SessionInfo | None:
        from soong_agent.adapters.storage.tables import session_info

        st = self.connection()[1]
        rows = self._read(lambda c: c.execute(st.get_session, {"sid": session_id}).all())
        return session_info(rows[0]) if rows else None

    def list_sessions(self, limit: int) -> list[SessionInfo]:
        from soong_agent.adapters.storage.tables import session_info

        if limit <= 0:
            return []
        st = self.connection()[1]
        rows = self._read(lambda c: c.execute(st.list_sessions, {"limit": limit}).all())
        return [session_info(r) for r in rows]

    def active_path(
        self, session_id: str, limit: int | None, message_id: str | None = None
    ) -> list[Message]:
        from soong_agent.adapters.storage.tables import PATH_SQL, PATH_TO_SQL

        if limit is not None and limit <= 0:
            return []
        params = {"sid": session_id, "limit": _NO_LIMIT if limit is None else limit}
        sql = PATH_SQL
        if message_id is not None:
            params["mid"] = message_id
            sql = PATH_TO_SQL

        def query(c: Connection) -> list[Any]:
            # The hot read: straight on the driver, no per-row wrapping.
            driver = c.connection.driver_connection
            assert driver is not None
            return driver.execute(sql, params).fetchall()  # type: ignore[no-any-return]

        rows = self._read(query)
        rows.sort(key=lambda r: -r[0])  # root first (the walk yields the leaf first)
        return _validate_json_rows([r[1] for r in rows], MESSAGE_LIST.validate_json)

    def all_messages(self, session_id: str) -> list[Message]:
        st = self.connection()[1]
        rows = self._read(lambda c: c.execute(st.all_messages, {"sid": session_id}).scalars().all())
        return _validate_json_rows(rows, MESSAGE_LIST.validate_json)

    def list_runs(self, session_id: str) -> list[RunInfo]:
        from soong_agent.adapters.storage.tables import run_info

        st = self.connection()[1]
        rows = self._read(lambda c: c.execute(st.list_runs, {"sid": session_id}).all())
        return [run_info(r) for r in rows]

    def run_events(self, run_id: str) -> list[RunEvent]:
        st = self.connection()[1]
        rows = self._read(lambda c: c.execute(st.run_events, {"rid": run_id}).scalars().all())
        return _validate_json_rows(rows, _event_list().validate_json)


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

    def __init__(self, db_path: Path, *, busy_timeout_ms: int = 5000) -> None:
        self._db = _Database(Path(db_path), busy_timeout_ms)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="soong-sqlite")
        self._closed = False

    @property
    def db_path(self) -> Path:
        """The database file."""
        return self._db.path

    def __repr__(self) -> str:
        return f"SqliteSessionStore({str(self._db.path)!r})"

    def warm_up(self) -> None:
        """Start opening the database on the worker thread (imports, folder, tables); return now.

        Optional: lets a caller overlap sqlalchemy's import cost with other start-up work. A
        failure here is not reported; the next call tries again and raises `UsageError`.
        """
        if not self._closed:
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                self._executor.submit(self._db.warm_up)

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        if self._closed:
            raise UsageError(f"the session store {self._db.path} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._db.call, fn, *args)

    async def commit(self, batch: TurnCommit) -> None:
        """Write one turn's messages, events, and session/run state atomically."""
        await self._run(
            self._db.commit,
            batch.session,
            batch.run,
            list(batch.messages),
            list(batch.events),
            batch.at,
        )

    async def get_session(self, session_id: str) -> SessionInfo | None:
        """The session with this id, or None."""
        return await self._run(self._db.get_session, session_id)

    async def list_sessions(self, *, limit: int = 50) -> list[SessionInfo]:
        """The most recently updated sessions first."""
        return await self._run(self._db.list_sessions, limit)

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

    async def close(self) -> None:
        """Finish pending work, then close the connection and stop the worker thread."""
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(self._executor, self._db.close)
        self._executor.shutdown(wait=True)
