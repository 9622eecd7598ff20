"""The artifact store port (CTX-5): whole tool outputs kept outside the context.

Every store follows the same naming rules (`safe_filename`, `is_artifact_id`,
`check_session_id`), so an artifact saved by one reads the same in another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from soong_agent.ports.errors import UsageError

_ID_RE = re.compile(r"art_[0-9a-f]{8,64}")
_SESSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
FILENAME_MAX = 120
"""The longest file name an artifact keeps (its extension is kept when it is short)."""


def safe_filename(name: str) -> str:
    """A plain file name for `name`: its last path part, only ``[A-Za-z0-9._-]``, no leading dot."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = _UNSAFE.sub("_", base).lstrip(".")
    if len(base) > FILENAME_MAX:
        _, dot, ext = base.rpartition(".")
        keep = ext if dot and 0 < len(ext) <= 16 else ""
        base = base[: FILENAME_MAX - len(keep) - 1].rstrip(".") + ("." + keep if keep else "")
    return base or "artifact"


def is_artifact_id(text: str) -> bool:
    """Whether `text` has an artifact id's shape (``art_`` and 8 to 64 hex digits)."""
    return _ID_RE.fullmatch(text) is not None


def check_session_id(session_id: str) -> None:
    """UsageError unless `session_id` is a plain name an artifact's folder may be named for."""
    if not _SESSION_RE.fullmatch(session_id) or session_id.strip(".") == "":
        raise UsageError(f"cannot store an artifact for session id {session_id!r}")


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
