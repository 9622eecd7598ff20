"""Transactions and schema creation shared by the SQLite session and artifact stores."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from soong_agent.ports.errors import UsageError

if TYPE_CHECKING:
    import sqlite3

    from sqlalchemy.engine import Connection, Engine

BEGIN_ATTEMPTS = 5


def is_locked(exc: BaseException) -> bool:
    """Whether a database error says another connection holds the lock."""
    text = str(getattr(exc, "orig", exc)).lower()
    return "database is locked" in text or "database is busy" in text


def enable_wal(conn: sqlite3.Connection) -> None:
    """Switch a new connection to WAL; another process switching at the same time may hold
    the lock for a moment, so a locked answer is retried."""
    import sqlite3

    for attempt in range(BEGIN_ATTEMPTS):
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if not is_locked(exc) or attempt == BEGIN_ATTEMPTS - 1:
                raise
            time.sleep(0.02 * (attempt + 1))


def write(conn: Connection, work: Callable[[Connection], None]) -> None:
    """Run `work` in one `BEGIN IMMEDIATE` transaction, retrying a locked BEGIN a few times."""
    from sqlalchemy.exc import OperationalError

    for attempt in range(BEGIN_ATTEMPTS):
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            break
        except OperationalError as exc:
            conn.rollback()
            if not is_locked(exc) or attempt == BEGIN_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    try:
        work(conn)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def ensure_schema(conn: Connection, path: Path) -> None:
    """Create the tables once; two processes may race to do it, and a newer file is refused."""
    from sqlalchemy.exc import OperationalError

    from soong_agent.adapters.storage.tables import SCHEMA_VERSION, create_schema

    version = conn.exec_driver_sql("PRAGMA user_version").scalar_one()
    conn.rollback()
    if version > SCHEMA_VERSION:
        raise UsageError(
            f"the session database {path} has schema version {version}, newer than"
            f" this soong-agent understands ({SCHEMA_VERSION})"
        )
    if version == SCHEMA_VERSION:
        return
    try:  # BEGIN IMMEDIATE serialises two processes creating the schema at once
        write(conn, create_schema)
    except OperationalError as exc:
        if "already exists" not in str(exc.orig):
            raise
        write(conn, create_schema)


def open_engine(path: Path, connect: Callable[[], sqlite3.Connection]) -> tuple[Engine, Connection]:
    """An engine over one pinned driver connection to `path`, its schema ensured; the folder
    is created. Problems with the file become `UsageError`s naming it."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the folder of the session database {path}: {exc}") from exc
    if path.is_dir():
        raise UsageError(f"the session database path {path} is a directory")
    from sqlalchemy import create_engine
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.pool import StaticPool

    engine = create_engine("sqlite+pysqlite://", creator=connect, poolclass=StaticPool)
    try:
        conn = engine.connect()
        ensure_schema(conn, path)
    except DBAPIError as exc:
        engine.dispose()
        raise UsageError(f"cannot open the session database {path}: {exc.orig}") from exc
    except BaseException:
        engine.dispose()
        raise
    return engine, conn
