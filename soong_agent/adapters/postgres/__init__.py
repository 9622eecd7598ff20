"""State in PostgreSQL (STORE-1, STORE-2): the session, artifact, task-log and mailbox stores, and
what they build on (the shared `PostgresDatabase`, the versioned schema, leases).

Importing this package imports no driver: psycopg is imported when a `PostgresDatabase` is made
(`driver.require_driver` says what to install when it is missing). Typical wiring::

    database = PostgresDatabase(PostgresSettings(url, password_env="PGPASSWORD_SOONG"))
    sessions = PostgresSessionStore(database)
    artifacts = PostgresArtifactStore(database)
    ...
    await sessions.close(); await artifacts.close()  # the pool closes with the last

The task log and the mailbox have synchronous ports (called from worker threads): they share
a blocking pool of the same database, made from the same settings::

    blocking = PostgresSyncDatabase(database.settings)
    tasks = PostgresTaskLog(blocking)
    mailbox = PostgresMailbox(blocking)  # its wait_for_mail LISTENs on a connection of its own
    ...
    await tasks.close(); await mailbox.close()

A store of this family that needs tables adds a module with its `Step`s (see `ddl`) and lists
them in `schema.STEPS`; it does its work through `PostgresDatabase.run` (or
`PostgresSyncDatabase.run`).
"""

from soong_agent.adapters.postgres.artifacts import PostgresArtifactStore
from soong_agent.adapters.postgres.connect import PostgresSettings, is_postgres_url
from soong_agent.adapters.postgres.database import PostgresDatabase
from soong_agent.adapters.postgres.mailbox import PostgresMailbox
from soong_agent.adapters.postgres.schema import (
    CODE_VERSION,
    SchemaStatus,
    migrate,
    schema_status,
)
from soong_agent.adapters.postgres.session_store import PostgresSessionStore
from soong_agent.adapters.postgres.sync_database import PostgresSyncDatabase
from soong_agent.adapters.postgres.task_log import PostgresTaskLog

__all__ = [
    "CODE_VERSION",
    "PostgresArtifactStore",
    "PostgresDatabase",
    "PostgresMailbox",
    "PostgresSessionStore",
    "PostgresSettings",
    "PostgresSyncDatabase",
    "PostgresTaskLog",
    "SchemaStatus",
    "is_postgres_url",
    "migrate",
    "schema_status",
]
