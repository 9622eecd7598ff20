"""The session database of `SqliteSessionStore` (CTX-1): the connection and every operation,
used only on the store's worker thread.

The database (its folder, tables and connection) is set up lazily by the first call. Message
parent links are resolved when a message is written: `parent_ordinal` points at the row of the
parent, which must be an earlier message of the same session (otherwise the message is a root
of the active-path walk). The walk is a recursive CTE over that integer key.
"""

from __future__ import annotations

import gc
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic_core import PydanticSerializationError

from soong_agent.adapters import state_rows
from soong_agent.adapters.storage import queue_sql, sql, transactions
from soong_agent.adapters.storage import rows as dbrows
from soong_agent.adapters.storage.run_locks import RunLocks
from soong_agent.adapters.storage.session_claims import SessionLocks
from soong_agent.ports.errors import RunError, UsageError
from soong_agent.ports.events import RunEvent
from soong_agent.ports.messages import MESSAGE_LIST, Message
from soong_agent.ports.run_queue import LeaseLost
from soong_agent.ports.storage import RunFence, RunInfo, SessionInfo

if TYPE_CHECKING:
    from pydantic import TypeAdapter

_T = TypeVar("_T")
log = logging.getLogger("soong_agent.adapters.storage.sqlite_store")

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


class SessionDatabase:
    """The connection and every query; used only on the store's worker thread."""

    def __init__(self, path: Path, busy_timeout_ms: int) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._conn: sqlite3.Connection | None = None
        self._written_run: RunInfo | None = None  # as last committed (only the writer writes)
        self.locks = RunLocks(path)
        self.claims = SessionLocks(path)

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
        self.claims.close()
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
        fence: RunFence | None = None,
    ) -> None:
        """Write one turn in one `BEGIN IMMEDIATE` transaction. With a `fence`, the run queue's
        row of its run must still be `running` under that fence, read in the same transaction
        (a claim, which takes the same write lock, cannot come between): else `LeaseLost` and
        nothing is written."""
        if any(not m.id for m in messages):
            raise UsageError("every committed message needs an id")
        conn = self.connection()
        updated_at = max(session.updated_at, at)
        session_row = dbrows.session_row(session, updated_at)
        # a run's row changes at its start and its end only: the turns between leave it be
        run_row = None if run == self._written_run else dbrows.run_row(run)
        if run_row is not None and run.status == "running":
            self.locks.hold(run.id)  # before the row exists: see `run_locks`
        try:
            message_rows = dbrows.message_params(session.id, messages, at or updated_at)
            event_values = dbrows.event_values(events)
        except PydanticSerializationError:
            # text no UTF-8 can hold that came past the run's own boundaries is stored as the
            # rule of `ports.text` writes it, rather than the turn lost; any other value JSON
            # cannot take fails the commit, nothing written
            try:
                message_rows = dbrows.message_params(
                    session.id, messages, at or updated_at, safe=True
                )
                event_values = dbrows.event_values(events, safe=True)
            except (PydanticSerializationError, TypeError, ValueError) as exc:
                first = str(exc).strip().splitlines()[-1].strip()
                raise UsageError(
                    f"cannot commit the turn to {self.path}: a message or event holds a value "
                    f"that cannot be stored ({first})"
                ) from exc

        def work(c: sqlite3.Connection, rows: tuple[Any, Any, list[Any], list[Any]]) -> None:
            session_params, run_params, message_params, event_params = rows
            cursor = c.cursor()
            if fence is not None:
                held = (fence.run_id, fence.fence)
                if cursor.execute(queue_sql.FENCE_HELD, held).fetchone() is None:
                    raise LeaseLost(fence.run_id, fence.fence)
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
                transactions.write(conn, lambda c: work(c, dbrows.safe_params(rows)))
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
        return state_rows.session_info(rows[0]) if rows else None

    def list_sessions(self, limit: int) -> list[SessionInfo]:
        if limit <= 0:
            return []
        return [state_rows.session_info(r) for r in self._rows(sql.LIST_SESSIONS, {"limit": limit})]

    def child_sessions(self, session_id: str) -> list[SessionInfo]:
        return [
            state_rows.session_info(r) for r in self._rows(sql.CHILD_SESSIONS, {"sid": session_id})
        ]

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
        runs = [state_rows.run_info(r) for r in self._rows(sql.LIST_RUNS, {"sid": session_id})]
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
            c.execute(sql.UPSERT_MARK, dbrows.mark_row(session_id, key, value, time.time()))
            written = True

        try:
            transactions.write(self.connection(), work)
        except sqlite3.IntegrityError as exc:
            raise UsageError(
                f"cannot set the mark {key!r} of session {session_id!r} in {self.path}: {exc}"
            ) from exc
        return written
