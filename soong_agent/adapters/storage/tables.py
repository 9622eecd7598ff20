"""The session database schema (CTX-1), declared with sqlmodel, and the statements over it.

The tables live on their own `MetaData` (not `SQLModel.metadata`), so importing or reloading this
module twice never clashes with itself or with anyone else's sqlmodel tables. Only the SQLite
store imports this module, lazily, so sqlmodel's import cost is paid on first database use.

Timestamps are Unix seconds as floats (the ports' clock unit). JSON columns hold the exact
pydantic JSON of a message or an event, so loading is one `validate_json` per query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import (
    BindParameter,
    Column,
    Connection,
    Index,
    Integer,
    Select,
    Text,
    UniqueConstraint,
    bindparam,
    insert,
    literal_column,
    select,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import registry
from sqlalchemy.schema import CreateIndex, CreateTable
from sqlalchemy.sql.dml import Insert
from sqlmodel import Field, SQLModel

from soong_agent.ports.events import RunEvent, RunStatus
from soong_agent.ports.messages import Message
from soong_agent.ports.storage import RunInfo, SessionInfo

SCHEMA_VERSION = 1
"""Stored in `PRAGMA user_version` once the schema below has been created."""

_REGISTRY = registry()


class _Base(SQLModel, registry=_REGISTRY):
    """Abstract base binding the tables below to this module's own metadata."""


METADATA = _REGISTRY.metadata


class SessionRow(_Base, table=True):
    """One session: its project folder and the tip of its active path."""

    __tablename__ = "sessions"
    __table_args__ = (Index("ix_sessions_updated_at", "updated_at"),)

    id: str = Field(primary_key=True)
    project_dir: str
    title: str = ""
    agent: str | None = None
    active_leaf_id: str | None = None
    parent_session_id: str | None = None
    created_at: float
    updated_at: float


class RunRow(_Base, table=True):
    """One run of a session."""

    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_session_started", "session_id", "started_at"),)

    id: str = Field(primary_key=True)
    session_id: str = Field(foreign_key="sessions.id")
    status: str = "running"
    model: str = ""
    reason: str | None = None
    started_at: float
    finished_at: float | None = None


class MessageRow(_Base, table=True):
    """One message of a session's tree; `ordinal` is the global write order (the rowid).

    `content` holds the whole message as `Message.model_dump_json()`; `id`, `parent_id`, `role`
    and `kind` are copies kept for querying. `parent_ordinal` is the parent's `ordinal`, resolved
    when the message is written (NULL when `parent_id` names no earlier message of the session):
    walking it is an integer-key lookup per step, and it is always smaller than `ordinal`, so a
    walk always ends.
    """

    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("session_id", "id", name="uq_messages_session_id"),
        Index("ix_messages_session_ordinal", "session_id", "ordinal"),
        Index("ix_messages_id", "id"),
    )

    ordinal: int | None = Field(
        default=None, sa_column=Column(Integer, primary_key=True, autoincrement=True)
    )
    id: str
    session_id: str = Field(foreign_key="sessions.id")
    parent_id: str | None = None
    parent_ordinal: int | None = None
    role: str
    kind: str = "normal"
    content: str = Field(sa_column=Column(Text, nullable=False))
    created_at: float


class EventRow(_Base, table=True):
    """One run event; `payload` holds the whole event as JSON, `seq` its per-run order."""

    __tablename__ = "events"
    __table_args__ = (UniqueConstraint("run_id", "seq", name="uq_events_run_seq"),)

    id: int | None = Field(
        default=None, sa_column=Column(Integer, primary_key=True, autoincrement=True)
    )
    run_id: str = Field(foreign_key="runs.id")
    session_id: str
    seq: int
    type: str
    payload: str = Field(sa_column=Column(Text, nullable=False))
    at: float


class ArtifactRow(_Base, table=True):
    """Metadata of a stored artifact (CTX-5); the bytes live on disk under the session folder."""

    __tablename__ = "artifacts"
    __table_args__ = (Index("ix_artifacts_session", "session_id"),)

    id: str = Field(primary_key=True)
    session_id: str = Field(foreign_key="sessions.id")
    run_id: str | None = None
    filename: str
    size: int
    sha256: str
    preview: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))
    created_at: float


sessions = METADATA.tables["sessions"]
runs = METADATA.tables["runs"]
messages = METADATA.tables["messages"]
events = METADATA.tables["events"]
artifacts = METADATA.tables["artifacts"]


def create_schema(conn: Connection) -> None:
    """Create every table and index that does not exist yet (inside the caller's transaction)."""
    for table in METADATA.sorted_tables:
        conn.execute(CreateTable(table, if_not_exists=True))
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            conn.execute(CreateIndex(index, if_not_exists=True))
    conn.exec_driver_sql(f"PRAGMA user_version = {SCHEMA_VERSION}")


# --- writes: SQLAlchemy Core statements and their parameter rows ------------------------------


_SQLITE = sqlite.dialect(paramstyle="named")


def _sql(statement: Insert, keys: list[str] | None = None) -> str:
    return str(statement.compile(dialect=_SQLITE, column_keys=keys))


class Statements:
    """The store's statements, built once per store.

    Writes are SQLAlchemy Core statements compiled once to SQLite SQL (named parameters) and run
    with `exec_driver_sql`, one `executemany` per table: SQLAlchemy's per-execution work (cache
    lookup, parameter processing) would otherwise cost ~60 µs of a ~135 µs turn commit. Every
    parameter row therefore carries every column. Reads run the Core selects directly.
    """

    def __init__(self) -> None:
        s = sqlite_insert(sessions)
        self.upsert_session = _sql(
            s.on_conflict_do_update(
                index_elements=[sessions.c.id],
                set_={
                    "title": s.excluded.title,
                    "agent": s.excluded.agent,
                    "active_leaf_id": s.excluded.active_leaf_id,
                    "updated_at": s.excluded.updated_at,
                },
            ),
            _SESSION_KEYS,
        )
        r = sqlite_insert(runs)
        self.upsert_run = _sql(
            r.on_conflict_do_update(
                index_elements=[runs.c.id],
                set_={
                    "status": r.excluded.status,
                    "model": r.excluded.model,
                    "reason": r.excluded.reason,
                    "finished_at": r.excluded.finished_at,
                },
            ),
            _RUN_KEYS,
        )
        # The parent's row is looked up as each message is inserted, so a parent written
        # earlier in the same executemany batch is found too.
        parent = messages.alias("parent")
        parent_ordinal = (
            select(parent.c.ordinal)
            .where(parent.c.session_id == bindparam("m_sid"), parent.c.id == bindparam("m_pid"))
            .scalar_subquery()
        )
        self.insert_messages = _sql(
            insert(messages).values(
                id=bindparam("m_id"),
                session_id=bindparam("m_sid"),
                parent_id=bindparam("m_pid"),
                parent_ordinal=parent_ordinal,
                role=bindparam("m_role"),
                kind=bindparam("m_kind"),
                content=bindparam("m_content"),
                created_at=bindparam("m_at"),
            )
        )
        self.insert_events = _sql(insert(events), _EVENT_KEYS)

        # --- reads (the active path, the hot read, is `PATH_SQL` on the driver) ---
        sid: BindParameter[str] = bindparam("sid")
        self.get_session: Select[Any] = select(*_SESSION_COLUMNS).where(sessions.c.id == sid)
        self.list_sessions: Select[Any] = (
            select(*_SESSION_COLUMNS)
            .order_by(sessions.c.updated_at.desc(), literal_column("sessions.rowid").desc())
            .limit(bindparam("limit"))
        )
        self.all_messages: Select[Any] = (
            select(messages.c.content)
            .where(messages.c.session_id == sid)
            .order_by(messages.c.ordinal)
        )
        self.list_runs: Select[Any] = (
            select(*_RUN_COLUMNS)
            .where(runs.c.session_id == sid)
            .order_by(runs.c.started_at, literal_column("runs.rowid"))
        )
        self.run_events: Select[Any] = (
            select(events.c.payload)
            .where(events.c.run_id == bindparam("rid"))
            .order_by(events.c.seq)
        )


_SESSION_KEYS = [
    "id",
    "project_dir",
    "title",
    "agent",
    "active_leaf_id",
    "parent_session_id",
    "created_at",
    "updated_at",
]
_RUN_KEYS = ["id", "session_id", "status", "model", "reason", "started_at", "finished_at"]
_EVENT_KEYS = ["run_id", "session_id", "seq", "type", "payload", "at"]


def session_row(session: SessionInfo, updated_at: float) -> dict[str, Any]:
    return {
        "id": session.id,
        "project_dir": session.project_dir,
        "title": session.title,
        "agent": session.agent,
        "active_leaf_id": session.active_leaf_id,
        "parent_session_id": session.parent_session_id,
        "created_at": session.created_at,
        "updated_at": updated_at,
    }


def run_row(run: RunInfo) -> dict[str, Any]:
    return {
        "id": run.id,
        "session_id": run.session_id,
        "status": run.status,
        "model": run.model,
        "reason": run.reason,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
    }


def message_rows(session_id: str, batch: list[Message], at: float) -> list[dict[str, Any]]:
    """Parameters of `Statements.insert_messages`; the caller has checked that ids are set."""
    return [
        {
            "m_id": m.id,
            "m_sid": session_id,
            "m_pid": m.parent_id,
            "m_role": m.role,
            "m_kind": m.kind,
            "m_content": m.model_dump_json(),
            "m_at": at,
        }
        for m in batch
    ]


def event_rows(batch: list[RunEvent]) -> list[dict[str, Any]]:
    return [
        {
            "run_id": e.run_id,
            "session_id": e.session_id,
            "seq": e.seq,
            "type": e.type,
            "payload": e.model_dump_json(),
            "at": e.at,
        }
        for e in batch
    ]


# --- reads ---------------------------------------------------------------------------------------

PATH_SQL = """
WITH RECURSIVE path(n, parent_ordinal, content) AS (
    SELECT 1, m.parent_ordinal, m.content
    FROM messages AS m
    WHERE m.session_id = :sid
      AND m.id = (SELECT s.active_leaf_id FROM sessions AS s WHERE s.id = :sid)
    UNION ALL
    SELECT p.n + 1, m.parent_ordinal, m.content
    FROM path AS p JOIN messages AS m ON m.ordinal = p.parent_ordinal
    WHERE p.n < :limit
)
SELECT n, content FROM path
"""
"""The active path, leaf first (`n` = 1 for the leaf), at most `:limit` messages."""

PATH_TO_SQL = PATH_SQL.replace(
    "AND m.id = (SELECT s.active_leaf_id FROM sessions AS s WHERE s.id = :sid)", "AND m.id = :mid"
)
"""The path from the root to message `:mid`, leaf first, at most `:limit` messages."""

_SESSION_COLUMNS = (
    sessions.c.id,
    sessions.c.project_dir,
    sessions.c.created_at,
    sessions.c.updated_at,
    sessions.c.title,
    sessions.c.agent,
    sessions.c.active_leaf_id,
    sessions.c.parent_session_id,
)
_RUN_COLUMNS = (
    runs.c.id,
    runs.c.session_id,
    runs.c.started_at,
    runs.c.status,
    runs.c.finished_at,
    runs.c.reason,
    runs.c.model,
)


def session_info(r: Sequence[Any]) -> SessionInfo:
    return SessionInfo(
        id=r[0],
        project_dir=r[1],
        created_at=r[2],
        updated_at=r[3],
        title=r[4],
        agent=r[5],
        active_leaf_id=r[6],
        parent_session_id=r[7],
    )


def run_info(r: Sequence[Any]) -> RunInfo:
    return RunInfo(
        id=r[0],
        session_id=r[1],
        started_at=r[2],
        status=cast(RunStatus, r[3]),
        finished_at=r[4],
        reason=r[5],
        model=r[6],
    )
