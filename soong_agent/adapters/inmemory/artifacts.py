"""An artifact store in memory, for tests."""

from __future__ import annotations

import hashlib

from soong_agent.ports.artifacts import ArtifactInfo


class InMemoryArtifactStore:
    """Artifacts in a dict; ids ``art_000001`` …"""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.infos: dict[str, ArtifactInfo] = {}

    async def save(
        self, *, session_id: str, run_id: str, filename: str, data: bytes, preview_chars: int
    ) -> ArtifactInfo:
        artifact_id = f"art_{len(self.infos) + 1:06d}"
        info = ArtifactInfo(
            id=artifact_id,
            session_id=session_id,
            filename=filename,
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            preview=data.decode("utf-8", errors="replace")[:preview_chars],
        )
        self.infos[artifact_id] = info
        self.data[artifact_id] = data
        return info

    async def get(self, session_id: str, artifact_id: str) -> ArtifactInfo | None:
        info = self.infos.get(artifact_id)
        return info if info is not None and info.session_id == session_id else None

    async def read(self, session_id: str, artifact_id: str, *, offset: int, length: int) -> bytes:
        if await self.get(session_id, artifact_id) is None:
            raise FileNotFoundError(2, "no such artifact", artifact_id)
        return self.data[artifact_id][offset : offset + length]
