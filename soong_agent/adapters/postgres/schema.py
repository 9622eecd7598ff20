"""The versioned schema of the PostgreSQL stores (STORE-2): created on first use, migrated under
an advisory lock, a newer one refused.

`STEPS` is assembled from the `STEPS` of every module of this family that has tables (a new
store adds its module's steps to the `assemble` call below, numbered after the last; nothing
else changes). The database records each step applied in `schema_version`; its version is the
highest. A migration runs in one transaction holding `pg_advisory_xact_lock`, so two processes
starting together apply each step once (the second waits, then finds the work done). A database
whose version is higher than this code knows was written by a newer soong-agent: it is refused,
never altered.

The CLI calls `schema_status(pool)` (which creates nothing) and `migrate(pool)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from soong_agent.adapters.postgres import (
    approval_sql,
    artifact_sql,
    mail_sql,
    queue_sql,
    session_sql,
    task_sql,
)
from soong_agent.adapters.postgres.connect import describe, server_version
from soong_agent.adapters.postgres.ddl import SCHEMA, Step, assemble
from soong_agent.adapters.postgres.errors import database_error
from soong_agent.ports.errors import UsageError

if TYPE_CHECKING:
    from psycopg import AsyncConnection
    from psycopg_pool import AsyncConnectionPool

STEPS: tuple[Step, ...] = assemble(
    session_sql.STEPS,
    artifact_sql.STEPS,
    task_sql.STEPS,
    mail_sql.STEPS,
    queue_sql.STEPS,
    approval_sql.STEPS,
)
"""Every migration step, in order (add a new module's `STEPS` here)."""
CODE_VERSION = STEPS[-1].version
"""The schema version this code reads and writes."""

MIGRATION_LOCK = "soong-agent/schema"
MIGRATION_TIMEOUT_MS = 600_000
"""A migration (and the wait for another process's) may take longer than one statement."""

VERSION_TABLE = f"{SCHEMA}.schema_version"
_CREATE_VERSION_TABLE = (
    f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version integer PRIMARY KEY,"
    " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
)


class SchemaStatus(NamedTuple):
    """What `schema_status` found: the database's schema version (0: none yet), the version
    this code knows, and the server's version."""

    db_version: int
    code_version: int
    server_version: str

    @property
    def current(self) -> bool:
        """Whether the database holds exactly the schema this code uses."""
        return self.db_version == self.code_version


def _where(pool: AsyncConnectionPool[Any]) -> str:
    from psycopg.conninfo import conninfo_to_dict

    info = pool.conninfo
    if not isinstance(info, str):  # a pool that makes its connection string itself
        return "PostgreSQL database"
    params = conninfo_to_dict(info)
    return describe({k: str(v) for k, v in params.items() if v is not None})


def refuse_newer(found: int, known: int, where: str) -> None:
    """`UsageError` when the database's schema is newer than this code's."""
    if found > known:
        raise UsageError(
            f"the {where} holds storage schema version {found}, newer than this soong-agent"
            f" knows ({known}): upgrade soong-agent to use it (the database is left as it is)"
        )


async def read_version(conn: AsyncConnection[Any]) -> int:
    """The database's schema version; 0 when it has none (nothing created yet)."""
    cur = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", (VERSION_TABLE,))
    row = await cur.fetchone()
    if row is None or not row[0]:
        return 0
    cur = await conn.execute(f"SELECT coalesce(max(version), 0) FROM {VERSION_TABLE}")
    row = await cur.fetchone()
    return int(row[0]) if row is not None else 0


async def schema_status(pool: AsyncConnectionPool[Any]) -> SchemaStatus:
    """The database's schema version, this code's, and the server's version; creates nothing."""
    import psycopg

    try:
        async with pool.connection() as conn:
            return SchemaStatus(await read_version(conn), CODE_VERSION, server_version(conn))
    except psycopg.Error as exc:
        raise database_error(exc, what="read the schema version", where=_where(pool)) from exc


async def migrate(pool: AsyncConnectionPool[Any], *, steps: Sequence[Step] = STEPS) -> int:
    """Bring the database's schema to the last of `steps`, in one transaction under an
    advisory lock; returns the version it has now. A newer schema is refused (`UsageError`)."""
    import psycopg

    where = _where(pool)
    try:
        async with pool.connection() as conn, conn.transaction():
            return await _migrate(conn, steps, where)
    except psycopg.Error as exc:
        raise database_error(exc, what="create or migrate the tables", where=where) from exc


async def _migrate(conn: AsyncConnection[Any], steps: Sequence[Step], where: str) -> int:
    await conn.execute(
        "SELECT set_config('statement_timeout', %s, true)", (str(MIGRATION_TIMEOUT_MS),)
    )
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (MIGRATION_LOCK,))
    cur = await conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (SCHEMA,))
    if await cur.fetchone() is None:
        await conn.execute(f"CREATE SCHEMA {SCHEMA}")
    await conn.execute(_CREATE_VERSION_TABLE)
    found = await read_version(conn)
    known = steps[-1].version if steps else 0
    refuse_newer(found, known, where)
    for step in steps[found:]:
        for statement in step.statements:
            await conn.execute(statement)
        await conn.execute(
            f"INSERT INTO {VERSION_TABLE} (version, name) VALUES (%s, %s)",
            (step.version, step.name),
        )
    return max(found, known)


async def ensure_schema(pool: AsyncConnectionPool[Any]) -> None:
    """The schema this code uses, created or migrated when older; a newer one refused."""
    import psycopg

    try:
        async with pool.connection() as conn:
            found = await read_version(conn)
    except psycopg.Error as exc:
        raise database_error(exc, what="read the schema version", where=_where(pool)) from exc
    if found == CODE_VERSION:
        return
    refuse_newer(found, CODE_VERSION, _where(pool))
    await migrate(pool)
