"""State in PostgreSQL (STORE-1, STORE-2): the session and artifact stores, and what the other
PostgreSQL stores build on (the shared `PostgresDatabase`, the versioned schema, leases).

Importing this package imports no driver: psycopg is imported when a `PostgresDatabase` is made
(`driver.require_driver` says what to install when it is missing). Typical wiring::

    database = PostgresDatabase(PostgresSettings(url, password_env="PGPASSWORD_SOONG"))
    sessions = PostgresSessionStore(database)
    artifacts = PostgresArtifactStore(database)
    ...
    await sessions.close(); await artifacts.close()  # the pool closes with the last

A store of this family that needs tables adds a module with its `Step`s (see `ddl`) and lists
them in `schema.STEPS`; it does its work through `PostgresDatabase.run`.
"""

from soong_agent.adapters.postgres.artifacts import PostgresArtifactStore
from soong_agent.adapters.postgres.connect import PostgresSettings, is_postgres_url
from soong_agent.adapters.postgres.database import PostgresDatabase
from soong_agent.adapters.postgres.schema import (
    CODE_VERSION,
    SchemaStatus,
    migrate,
    schema_status,
)
from soong_agent.adapters.postgres.session_store import PostgresSessionStore

__all__ = [
    "CODE_VERSION",
    "PostgresArtifactStore",
    "PostgresDatabase",
    "PostgresSessionStore",
    "PostgresSettings",
    "SchemaStatus",
    "is_postgres_url",
    "migrate",
    "schema_status",
]
