"""Opening, transactions and schema creation shared by the SQLite session and artifact stores.

Everything here works on a plain `sqlite3` connection in autocommit mode (`isolation_level=None`):
writes are explicit `BEGIN IMMEDIATE` … `COMMIT`/`ROLLBACK`, reads are single statements. A
database is created from the pinned DDL of `sql.py`; the schema declarations (`tables.py`,
sqlmodel) are never imported at run time, only by the tests that keep the pins honest.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from soong_agent.adapters.storage.sql import SCHEMA_DDL, SCHEMA_VERSION
from soong_agent.ports.errors import UsageError

BEGIN_ATTEMPTS = 5
"""BEGIN IMMEDIATE attempts when the busy timeout alone did not get the write lock."""


def is_locked(exc: BaseException) -> bool:
    """Whether a database error says another connection holds the lock."""
    text = str(exc).lower()
    return "database is locked" in text or "database is busy" in text


def enable_wal(conn: sqlite3.Connection) -> None:
    """Switch a new connection to WAL; another process switching at the same time may hold
    the lock for a moment, so a locked answer is retried."""
    for attempt in range(BEGIN_ATTEMPTS):
        try:
            conn.execute("PRAGMA journal_mode = WAL").fetchall()
            return
        except sqlite3.OperationalError as exc:
            if not is_locked(exc) or attempt == BEGIN_ATTEMPTS - 1:
                raise
            time.sleep(0.02 * (attempt + 1))


def write(conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], None]) -> None:
    """Run `work` in one `BEGIN IMMEDIATE` transaction, retrying a locked BEGIN a few times.

    Any exception rolls the transaction back and propagates (sqlite3 errors unchanged).
    """
    for attempt in range(BEGIN_ATTEMPTS):
        try:
            conn.execute("BEGIN IMMEDIATE")
            break
        except sqlite3.OperationalError as exc:
            if not is_locked(exc) or attempt == BEGIN_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    try:
        work(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def user_version(conn: sqlite3.Connection) -> int:
    """`PRAGMA user_version` (read to the end, so no read transaction stays open)."""
    return int(conn.execute("PRAGMA user_version").fetchall()[0][0])


def _refuse_newer(version: int, path: Path) -> None:
    if version > SCHEMA_VERSION:
        raise UsageError(
            f"the session database {path} has schema version {version}, newer than"
            f" this soong-agent understands ({SCHEMA_VERSION})"
        )


def ensure_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Create the tables once; two processes may race to do it, and a newer file is refused.

    The DDL is the pinned copy in `sql.SCHEMA_DDL` (of `tables.schema_ddl()`): creating a
    database imports no sqlmodel or sqlalchemy.
    """
    version = user_version(conn)
    _refuse_newer(version, path)
    if version == SCHEMA_VERSION:
        return

    def create(c: sqlite3.Connection) -> None:
        if user_version(c) < SCHEMA_VERSION:  # another process may have created it meanwhile
            for ddl in SCHEMA_DDL:
                c.execute(ddl)
            c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    try:  # BEGIN IMMEDIATE serialises two processes creating the schema at once
        write(conn, create)
    except sqlite3.OperationalError as exc:
        if "already exists" not in str(exc):
            raise
        write(conn, create)
    _refuse_newer(user_version(conn), path)


def open_database(path: Path, connect: Callable[[], sqlite3.Connection]) -> sqlite3.Connection:
    """A connection to `path` made by `connect`, its schema ensured; the folder is created.
    Problems with the file become `UsageError`s naming it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the folder of the session database {path}: {exc}") from exc
    if path.is_dir():
        raise UsageError(f"the session database path {path} is a directory")
    try:
        conn = connect()
    except sqlite3.Error as exc:
        raise UsageError(f"cannot open the session database {path}: {exc}") from exc
    try:
        ensure_schema(conn, path)
    except sqlite3.Error as exc:
        conn.close()
        raise UsageError(f"cannot open the session database {path}: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def connect(path: Path, busy_timeout_ms: int, *pragmas: str) -> sqlite3.Connection:
    """A new autocommit connection to `path`: busy timeout, WAL, synchronous NORMAL, then
    `pragmas` (each a `PRAGMA` statement). Usable from any thread (each store uses one)."""
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        enable_wal(conn)
        conn.execute("PRAGMA synchronous = NORMAL")
        for pragma in pragmas:
            conn.execute(pragma).fetchall()
    except BaseException:
        conn.close()
        raise
    return conn
