"""The artifact store port (CTX-5): whole tool outputs kept outside the context."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class ArtifactInfo:
    """Metadata of one stored artifact."""

    id: str
    session_id: str
    filename: str
    size: int
    sha256: str
    preview: str


@runtime_checkable
class ArtifactStore(Protocol):
    """Stores artifacts at `${SOONG_AGENT_HOME}/sessions/<session>/artifacts/<id>/<filename>`."""

    async def save(
        self, *, session_id: str, run_id: str, filename: str, data: bytes, preview_chars: int
    ) -> ArtifactInfo:
        """Write `data` whole and record its metadata; returns the new artifact."""
        ...

    async def get(self, session_id: str, artifact_id: str) -> ArtifactInfo | None:
        """Metadata of an artifact of this session, or None."""
        ...

    async def read(self, session_id: str, artifact_id: str, *, offset: int, length: int) -> bytes:
        """Bytes `offset … offset+length` of an artifact; FileNotFoundError when unknown."""
        ...
