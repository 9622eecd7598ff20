"""An artifact store in memory, for tests: the SQLite store's rules without disk or database.

It refuses what `SqliteArtifactStore` refuses (the shared contract suite runs on both): a session
id that is not a plain name raises `UsageError`, a negative offset or length `ValueError`, any
call after `close()` `UsageError`. File names are reduced to the same safe base name, ids have
the same shape (``art_`` + 24 hex digits, here counting up), and an id of another session or of
another shape is unknown.
"""

from __future__ import annotations

import hashlib

from soong_agent.ports.artifacts import (
    ArtifactInfo,
    check_session_id,
    is_artifact_id,
    safe_filename,
)
from soong_agent.ports.errors import UsageError


class InMemoryArtifactStore:
    """Artifacts in dicts: `infos` (metadata by id) and `data` (bytes by id)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.infos: dict[str, ArtifactInfo] = {}
        self.run_ids: dict[str, str] = {}
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("the in-memory artifact store is closed")

    async def save(
        self, *, session_id: str, run_id: str, filename: str, data: bytes, preview_chars: int
    ) -> ArtifactInfo:
        """Keep `data` whole and its metadata; returns the new artifact."""
        self._check_open()
        check_session_id(session_id)
        data = bytes(data)
        artifact_id = f"art_{len(self.infos) + 1:024x}"
        info = ArtifactInfo(
            id=artifact_id,
            session_id=session_id,
            filename=safe_filename(filename),
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            preview=data.decode("utf-8", errors="replace")[: max(0, preview_chars)],
        )
        self.infos[artifact_id] = info
        self.data[artifact_id] = data
        self.run_ids[artifact_id] = run_id
        return info

    async def get(self, session_id: str, artifact_id: str) -> ArtifactInfo | None:
        """Metadata of an artifact of this session, or None."""
        self._check_open()
        if not is_artifact_id(artifact_id):
            return None
        info = self.infos.get(artifact_id)
        return info if info is not None and info.session_id == session_id else None

    async def read(self, session_id: str, artifact_id: str, *, offset: int, length: int) -> bytes:
        """Bytes `offset … offset+length` of an artifact; FileNotFoundError when unknown."""
        self._check_open()
        if offset < 0 or length < 0:
            raise ValueError("offset and length must not be negative")
        if await self.get(session_id, artifact_id) is None:
            raise FileNotFoundError(2, "no such artifact in this session", artifact_id)
        return self.data[artifact_id][offset : offset + length]

    async def close(self) -> None:
        """Mark the store closed; later calls raise `UsageError` (closing twice is fine)."""
        self._closed = True
