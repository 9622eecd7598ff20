"""The PostgreSQL artifact store (CTX-5): whole tool outputs kept in the database, readable by
any host that reaches it.

The metadata is a row of `artifacts`, the bytes rows of `artifact_chunks` (`artifact_sql`),
written in one transaction: an artifact is there whole or not at all. An artifact is only
visible to its own session. Naming follows `ports.artifacts`, as every artifact store does.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import TYPE_CHECKING, Any

from soong_agent.adapters import state_rows
from soong_agent.adapters.postgres import artifact_sql as sql
from soong_agent.ports.artifacts import (
    ArtifactInfo,
    check_session_id,
    is_artifact_id,
    safe_filename,
)
from soong_agent.ports.errors import UsageError

if TYPE_CHECKING:
    from psycopg import AsyncConnection

    from soong_agent.adapters.postgres.database import PostgresDatabase


class PostgresArtifactStore:
    """An `ArtifactStore` in a PostgreSQL database (`PostgresDatabase`).

    Ids are ``art_`` + 24 random hex digits; file names are reduced to a safe base name. `save`
    raises `UsageError` for a session id that is not a plain name; `read` raises
    FileNotFoundError for an artifact unknown to the session. Database failures raise
    `RunError` (`UsageError` when the database cannot be reached at all).
    """

    def __init__(self, database: PostgresDatabase) -> None:
        self._db = database
        database.attach()
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresArtifactStore({self._db.where!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"the artifact store in the {self._db.where} is closed")

    async def save(
        self, *, session_id: str, run_id: str, filename: str, data: bytes, preview_chars: int
    ) -> ArtifactInfo:
        """Write `data` whole and record its metadata; returns the new artifact."""
        self._check_open()
        check_session_id(session_id)
        info = ArtifactInfo(
            id="art_" + secrets.token_hex(12),
            session_id=session_id,
            filename=safe_filename(filename),
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            # PostgreSQL text holds no NUL: a binary output's preview shows U+FFFD for it
            preview=data.decode("utf-8", errors="replace")[: max(0, preview_chars)].replace(
                "\x00", "\ufffd"
            ),
        )
        row = (
            info.id,
            info.session_id,
            run_id or None,
            info.filename,
            info.size,
            info.sha256,
            info.preview,
            time.time(),
        )
        chunks = _chunks(info.id, data)

        async def work(conn: AsyncConnection[Any], retrying: bool) -> None:
            if retrying and await self._found(conn, info):
                return  # written before the connection was lost
            async with conn.pipeline(), conn.transaction():
                await conn.execute(sql.INSERT_ARTIFACT, row)
                if chunks:
                    async with conn.cursor() as cur:
                        await cur.executemany(sql.INSERT_CHUNK, chunks)

        await self._db.run(work, what="save an artifact")
        return info

    async def put(
        self, info: ArtifactInfo, *, run_id: str | None, data: bytes, created_at: float
    ) -> bool:
        """Store an artifact read from another store (`storage copy`) under its own id, in one
        transaction; False, writing nothing, when it is here already. `UsageError` when
        `data` is not the artifact's (size or sha256) or its id or session is not a valid one."""
        self._check_open()
        check_session_id(info.session_id)
        if not is_artifact_id(info.id):
            raise UsageError(f"{info.id!r} is not an artifact id")
        if len(data) != info.size or hashlib.sha256(data).hexdigest() != info.sha256:
            raise UsageError(f"the bytes given for artifact {info.id} are not its own")
        row = (
            info.id,
            info.session_id,
            run_id or None,
            safe_filename(info.filename),
            info.size,
            info.sha256,
            info.preview.replace("\x00", "\ufffd"),
            created_at,
        )
        chunks = _chunks(info.id, data)

        async def work(conn: AsyncConnection[Any], _retrying: bool) -> bool:
            async with conn.transaction():
                cur = await conn.execute(sql.INSERT_NEW_ARTIFACT, row)
                if await cur.fetchone() is None:
                    return False
                if chunks:
                    async with conn.pipeline(), conn.cursor() as many:
                        await many.executemany(sql.INSERT_CHUNK, chunks)
            return True

        return await self._db.run(work, what=f"copy artifact {info.id}")

    @staticmethod
    async def _found(conn: AsyncConnection[Any], info: ArtifactInfo) -> bool:
        cur = await conn.execute(sql.GET_ARTIFACT, (info.id, info.session_id))
        return await cur.fetchone() is not None

    async def get(self, session_id: str, artifact_id: str) -> ArtifactInfo | None:
        """Metadata of an artifact of this session, or None."""
        self._check_open()
        if not is_artifact_id(artifact_id):
            return None

        async def work(conn: AsyncConnection[Any], _retrying: bool) -> ArtifactInfo | None:
            cur = await conn.execute(sql.GET_ARTIFACT, (artifact_id, session_id))
            found = await cur.fetchone()
            return state_rows.artifact_info(found) if found is not None else None

        return await self._db.run(work, what="read an artifact")

    async def read(self, session_id: str, artifact_id: str, *, offset: int, length: int) -> bytes:
        """Bytes `offset … offset+length` of an artifact; FileNotFoundError when unknown."""
        self._check_open()
        if offset < 0 or length < 0:
            raise ValueError("offset and length must not be negative")
        info = await self.get(session_id, artifact_id)
        if info is None:
            raise FileNotFoundError(2, "no such artifact in this session", artifact_id)
        end = min(offset + length, info.size)
        if end <= offset:
            return b""
        params = {
            "aid": artifact_id,
            "start": offset,
            "end": end,
            "chunk": sql.CHUNK_BYTES,
            "first": offset // sql.CHUNK_BYTES,
            "last": (end - 1) // sql.CHUNK_BYTES,
        }

        async def work(conn: AsyncConnection[Any], _retrying: bool) -> bytes:
            cur = await conn.execute(sql.READ_RANGE, params)
            return b"".join(bytes(r[0]) for r in await cur.fetchall())

        return await self._db.run(work, what="read an artifact")

    async def close(self) -> None:
        """Stop using the database (the pool closes with the last store using it)."""
        if self._closed:
            return
        self._closed = True
        await self._db.detach()


def _chunks(artifact_id: str, data: bytes) -> list[tuple[str, int, memoryview]]:
    """The rows of `artifact_chunks` for `data`."""
    view = memoryview(data)
    return [
        (artifact_id, n, view[start : start + sql.CHUNK_BYTES])
        for n, start in enumerate(range(0, len(data), sql.CHUNK_BYTES))
    ]
