"""The session database schema (CTX-1), declared with sqlmodel: the single source of truth.

The stores never import this module to run statements: they execute the SQL text pinned in
`sql.py` on a plain `sqlite3` connection. This module is imported only when a database has to be
created (`PRAGMA user_version` below `SCHEMA_VERSION`), once per machine, and by the test that
checks the pinned SQL against `compiled_statements()`, the same statements compiled here by
SQLAlchemy from the declarations below. sqlmodel/sqlalchemy cost ~0.3 s to import.

The tables live on their own `MetaData` (not `SQLModel.metadata`), so importing or reloading this
module twice never clashes with itself or with anyone else's sqlmodel tables.

Timestamps are Unix seconds as floats (the ports' clock unit). JSON columns hold the exact
pydantic JSON of a message or an event, so loading is one `validate_json` per chunk of rows.
"""

from __future__ import annotations

import functools
import sqlite3
from typing import Any

from sqlalchemy import (
    BindParameter,
    Column,
    Index,
    Integer,
    Select,
    Table,
    Text,
    UniqueConstraint,
    bindparam,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import registry
from sqlalchemy.schema import CreateIndex, CreateTable
from sqlmodel import Field, SQLModel

from soong_agent.adapters.storage import sql

SCHEMA_VERSION = sql.SCHEMA_VERSION
"""The version these declarations are; defined in `sql.py`, which opening a database reads."""

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


class SessionMarkRow(_Base, table=True):
    """A named mark of a session, e.g. the last message memory extraction read (MEM-3)."""

    __tablename__ = "session_marks"

    session_id: str = Field(foreign_key="sessions.id", primary_key=True)
    key: str = Field(primary_key=True)
    value: str
    updated_at: float


class QueuedRunRow(_Base, table=True):
    """One run of the run queue (WORK-1, WORK-2): what a worker needs to start it, and where it
    stands (`ports.run_queue.QueuedRun`). `options` holds the run's options as a JSON object;
    `wake` is the queue's change counter when the run was last submitted, released or cancelled
    (the largest is what a waiting worker polls). Submit order is the rowid."""

    __tablename__ = "run_queue"
    __table_args__ = (
        Index("ix_run_queue_status_submitted", "status", "submitted_at"),
        Index("ix_run_queue_submitted", "submitted_at"),
        Index("ix_run_queue_wake", "wake"),
    )

    id: str = Field(primary_key=True)
    session_id: str
    project_dir: str
    message: str = Field(sa_column=Column(Text, nullable=False))
    options: str = Field(sa_column=Column(Text, nullable=False))
    status: str
    submitted_at: float
    worker: str | None = None
    attempts: int = 0
    fence: int = 0
    lease_expires_at: float | None = None
    cancel_requested: bool = False
    reason: str = ""
    finished_at: float | None = None
    wake: int = 0


class ApprovalRow(_Base, table=True):
    """A run's approval question and its answer (WORK-3, `PendingApproval`); ask order: rowid."""

    __tablename__ = "approvals"
    __table_args__ = (
        Index("ix_approvals_status_asked", "status", "asked_at"),
        Index("ix_approvals_run_asked", "run_id", "asked_at"),
        Index("ix_approvals_asked", "asked_at"),
    )

    id: str = Field(primary_key=True)
    run_id: str
    session_id: str
    project_dir: str
    tool: str
    call_id: str = ""
    summary: str = Field(default="", sa_column=Column(Text, nullable=False))
    arguments: str = Field(default="", sa_column=Column(Text, nullable=False))
    detail: str = Field(default="", sa_column=Column(Text, nullable=False))
    scope: str = Field(default="", sa_column=Column(Text, nullable=False))
    asked_at: float
    status: str
    decision: str | None = None
    answered_by: str | None = None
    answered_at: float | None = None


sessions = METADATA.tables["sessions"]
runs = METADATA.tables["runs"]
messages = METADATA.tables["messages"]
events = METADATA.tables["events"]
artifacts = METADATA.tables["artifacts"]
session_marks = METADATA.tables["session_marks"]
run_queue = METADATA.tables["run_queue"]
approvals = METADATA.tables["approvals"]


# --- DDL -----------------------------------------------------------------------------------------

_SQLITE = sqlite.dialect(paramstyle="named")


def _compile(statement: Any) -> str:
    return str(statement.compile(dialect=_SQLITE))


def schema_ddl() -> list[str]:
    """`CREATE TABLE/INDEX IF NOT EXISTS` for every table and index, in dependency order."""
    return list(_schema_ddl())


@functools.cache
def _schema_ddl() -> tuple[str, ...]:
    """Compiled once per process (~0.6 ms): a process may create several databases."""
    out: list[str] = []
    for table in METADATA.sorted_tables:
        out.append(_compile(CreateTable(table, if_not_exists=True)).strip())
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            out.append(_compile(CreateIndex(index, if_not_exists=True)).strip())
    return tuple(out)


def create_schema(conn: sqlite3.Connection) -> None:
    """Create every table and index that does not exist yet and set `PRAGMA user_version`,
    inside the caller's transaction on a raw `sqlite3` connection (no Engine)."""
    for ddl in schema_ddl():
        conn.execute(ddl)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


# --- the statements the stores run, compiled from the declarations ------------------------------


def _columns(table: Table, *skip: str) -> list[str]:
    return [c.name for c in table.columns if c.name not in skip]


def _upsert(table: Table, keep: tuple[str, ...]) -> str:
    """INSERT of every column; on a duplicate id, every column but `keep` takes the new value."""
    statement = sqlite_insert(table)
    update = {c: statement.excluded[c] for c in _columns(table, "id", *keep)}
    upsert = statement.on_conflict_do_update(index_elements=[table.c.id], set_=update)
    return str(upsert.compile(dialect=_SQLITE, column_keys=_columns(table)))


def _upsert_mark() -> str:
    """INSERT of a mark; on the same (session, key), value and time take the new ones."""
    statement = sqlite_insert(session_marks)
    upsert = statement.on_conflict_do_update(
        index_elements=[session_marks.c.session_id, session_marks.c.key],
        set_={"value": statement.excluded.value, "updated_at": statement.excluded.updated_at},
    )
    return str(upsert.compile(dialect=_SQLITE, column_keys=_columns(session_marks)))


def _insert(table: Table, *skip: str) -> str:
    return str(insert(table).compile(dialect=_SQLITE, column_keys=_columns(table, *skip)))


MESSAGE_PARAMS = {
    "id": "m_id",
    "session_id": "m_sid",
    "parent_id": "m_pid",
    "role": "m_role",
    "kind": "m_kind",
    "content": "m_content",
    "created_at": "m_at",
}
"""Parameter names of the message insert (a bindparam may not share a column's name there)."""


def _insert_message() -> str:
    # The parent's row is looked up as each message is inserted, so a parent written earlier in
    # the same executemany batch is found too.
    parent = messages.alias("parent")
    parent_ordinal = (
        select(parent.c.ordinal)
        .where(
            parent.c.session_id == bindparam(MESSAGE_PARAMS["session_id"]),
            parent.c.id == bindparam(MESSAGE_PARAMS["parent_id"]),
        )
        .scalar_subquery()
    )
    values: dict[str, Any] = {}
    for name in _columns(messages, "ordinal"):  # a new column fails here until it has a name
        values[name] = (
            parent_ordinal if name == "parent_ordinal" else bindparam(MESSAGE_PARAMS[name])
        )
    return _compile(insert(messages).values(values))


_SESSION_COLUMNS = (
    "id",
    "project_dir",
    "created_at",
    "updated_at",
    "title",
    "agent",
    "active_leaf_id",
    "parent_session_id",
)
"""The order `state_rows.session_info` reads."""
_RUN_COLUMNS = ("id", "session_id", "started_at", "status", "finished_at", "reason", "model")
"""The order `state_rows.run_info` reads."""
_ARTIFACT_COLUMNS = ("id", "session_id", "filename", "size", "sha256", "preview")
"""The order `state_rows.artifact_info` reads."""


def _select(table: Table, names: tuple[str, ...]) -> Select[Any]:
    return select(*(table.c[n] for n in names))


def compiled_statements() -> dict[str, str]:
    """The statements of `sql.py`, by name, as SQLAlchemy compiles them from the tables above.

    Inserts carry every column (but the autoincrement keys), so adding a column changes them.
    """
    sid: BindParameter[str] = bindparam("sid")
    return {
        "UPSERT_SESSION": _upsert(
            sessions, keep=("project_dir", "parent_session_id", "created_at")
        ),
        "UPSERT_RUN": _upsert(runs, keep=("session_id", "started_at")),
        "INSERT_MESSAGE": _insert_message(),
        "INSERT_EVENT": _insert(events, "id"),
        "INSERT_ARTIFACT": _insert(artifacts),
        "GET_SESSION": _compile(_select(sessions, _SESSION_COLUMNS).where(sessions.c.id == sid)),
        "LIST_SESSIONS": _compile(
            _select(sessions, _SESSION_COLUMNS)
            .order_by(sessions.c.updated_at.desc(), literal_column("sessions.rowid").desc())
            .limit(bindparam("limit"))
            .offset(literal_column("0"))  # else SQLite's compiler adds OFFSET with a bound 0
        ),
        "ALL_MESSAGES": _compile(
            select(messages.c.content)
            .where(messages.c.session_id == sid)
            .order_by(messages.c.ordinal)
        ),
        "LIST_RUNS": _compile(
            _select(runs, _RUN_COLUMNS)
            .where(runs.c.session_id == sid)
            .order_by(runs.c.started_at, literal_column("runs.rowid"))
        ),
        "RUN_EVENTS": _compile(
            select(events.c.payload)
            .where(events.c.run_id == bindparam("rid"))
            .order_by(events.c.seq)
        ),
        "GET_ARTIFACT": _compile(
            _select(artifacts, _ARTIFACT_COLUMNS).where(
                artifacts.c.id == bindparam("aid"), artifacts.c.session_id == sid
            )
        ),
        "GET_MARK": _compile(
            select(session_marks.c.value).where(
                session_marks.c.session_id == sid, session_marks.c.key == bindparam("key")
            )
        ),
        "UPSERT_MARK": _upsert_mark(),
        "INTERRUPT_RUN": _compile(
            update(runs)
            .where(runs.c.id == bindparam("rid"), runs.c.status == bindparam("was"))
            .values(
                status=bindparam("status"),
                reason=bindparam("reason"),
                finished_at=bindparam("finished_at"),
            )
        ),
    }
