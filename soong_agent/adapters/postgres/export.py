"""A PostgreSQL database read for `storage copy` (STORE-2): every session with its runs,
messages, events and marks, and every artifact with its bytes.

A database without soong-agent's tables is refused (`UsageError`) before anything is created in
it. Reading goes through the stores (`PostgresSessionStore`, `PostgresArtifactStore`) where
they have a read for it; the lists they have none for (a session's marks, every artifact) are
read here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from soong_agent.adapters import state_rows
from soong_agent.adapters.postgres.artifacts import PostgresArtifactStore
from soong_agent.adapters.postgres.ddl import SCHEMA
from soong_agent.adapters.postgres.schema import schema_status
from soong_agent.adapters.postgres.session_store import PostgresSessionStore
from soong_agent.ports.artifacts import ArtifactInfo
from soong_agent.ports.errors import UsageError
from soong_agent.ports.events import RunEvent
from soong_agent.ports.messages import Message
from soong_agent.ports.storage import RunInfo, SessionInfo

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from soong_agent.adapters.postgres.database import PostgresDatabase

StoredArtifact = tuple[ArtifactInfo, str | None, float]
"""An artifact's metadata, the run that made it (if known) and when it was stored."""

_MARKS = f"SELECT key, value FROM {SCHEMA}.session_marks WHERE session_id = %s ORDER BY key"
_ARTIFACTS = (
    f"SELECT id, session_id, filename, size, sha256, preview, run_id, created_at"
    f" FROM {SCHEMA}.artifacts ORDER BY created_at, id"
)
_EVERY = 2**62
"""A limit no store reaches."""


class PostgresExport:
    """Everything one PostgreSQL database of soong-agent holds."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._db = database
        self.where = database.where
        self._sessions = PostgresSessionStore(database)
        self._artifacts = PostgresArtifactStore(database)

    async def open(self) -> None:
        """Check that the database holds soong-agent's tables (`UsageError` if not; a newer
        schema is refused at the first read)."""
        found = await schema_status(await self._db.pool())
        if found.db_version == 0:
            raise UsageError(f"the {self.where} holds no soong-agent storage (no tables yet)")

    async def sessions(self) -> list[SessionInfo]:
        """Every session."""
        return await self._sessions.list_sessions(limit=_EVERY)

    async def runs(self, session_id: str) -> list[RunInfo]:
        """The session's runs, oldest first."""
        return await self._sessions.list_runs(session_id)

    async def messages(self, session_id: str) -> list[Message]:
        """Every message of the session, all branches, in the order they were written."""
        return await self._sessions.all_messages(session_id)

    async def events(self, run_id: str) -> list[RunEvent]:
        """A run's events in sequence order."""
        return list(await self._sessions.run_events(run_id))

    async def marks(self, session_id: str) -> dict[str, str]:
        """The session's marks."""
        found = await self._read(_MARKS, (session_id,), "read a session's marks")
        return {str(k): str(v) for k, v in found}

    async def artifacts(self) -> list[StoredArtifact]:
        """Every artifact's metadata, oldest first."""
        found = await self._read(_ARTIFACTS, (), "list the artifacts")
        return [(state_rows.artifact_info(r), r[6], float(r[7])) for r in found]

    async def artifact_bytes(self, info: ArtifactInfo) -> bytes | None:
        """The artifact's bytes; None when it is gone."""
        try:
            return await self._artifacts.read(info.session_id, info.id, offset=0, length=info.size)
        except FileNotFoundError:
            return None

    async def _read(self, statement: str, params: tuple[Any, ...], what: str) -> list[Any]:
        async def work(conn: AsyncConnection[Any], _retrying: bool) -> list[Any]:
            cur = await conn.execute(statement, params)
            return await cur.fetchall()

        return await self._db.run(work, what=what)

    async def close(self) -> None:
        """Close both stores (and with them the database)."""
        try:
            await self._sessions.close()
        finally:
            await self._artifacts.close()
