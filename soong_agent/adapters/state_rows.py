"""Rows of the session database read back as port types, shared by the SQLite and the
PostgreSQL stores: both select the same columns in the same order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from soong_agent.ports.artifacts import ArtifactInfo
from soong_agent.ports.events import RunStatus
from soong_agent.ports.storage import RunInfo, SessionInfo

__all__ = ["artifact_info", "run_info", "session_info"]


def session_info(r: Sequence[Any]) -> SessionInfo:
    """A row of `GET_SESSION` / `LIST_SESSIONS` / `CHILD_SESSIONS`."""
    return SessionInfo(
        id=r[0],
        project_dir=r[1],
        created_at=r[2],
        updated_at=r[3],
        title=r[4],
        agent=r[5],
        active_leaf_id=r[6],
        parent_session_id=r[7],
    )


def run_info(r: Sequence[Any]) -> RunInfo:
    """A row of `LIST_RUNS`."""
    return RunInfo(
        id=r[0],
        session_id=r[1],
        started_at=r[2],
        status=cast(RunStatus, r[3]),
        finished_at=r[4],
        reason=r[5],
        model=r[6],
    )


def artifact_info(r: Sequence[Any]) -> ArtifactInfo:
    """A row of `GET_ARTIFACT`."""
    return ArtifactInfo(
        id=r[0], session_id=r[1], filename=r[2], size=r[3], sha256=r[4], preview=r[5]
    )
