"""`storage copy` (STORE-2, issue 33 item 6): every session (header, runs, messages in the order
they were written, events, marks) and every artifact (with its bytes) of one store, written
into another that can take whole sessions (`import_session`) and artifacts (`put`) — today the
PostgreSQL stores.

The copy is idempotent and resumable: each session is written in one transaction and each
artifact in another, and whatever the target holds already is skipped (looked for first, so a
resumed copy does not read it again). A session already at the target is not updated. The
source is only read (`SqliteExport`, `PostgresExport`); copy from a store nobody is writing to.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from soong_agent.ports.artifacts import ArtifactInfo
from soong_agent.ports.events import RunEvent
from soong_agent.ports.messages import Message
from soong_agent.ports.storage import RunInfo, SessionInfo


class CopySource(Protocol):
    """A store read whole (`adapters.storage.export.SqliteExport`,
    `adapters.postgres.export.PostgresExport`)."""

    where: str

    async def open(self) -> None: ...
    async def sessions(self) -> list[SessionInfo]: ...
    async def runs(self, session_id: str) -> list[RunInfo]: ...
    async def messages(self, session_id: str) -> list[Message]: ...
    async def events(self, run_id: str) -> list[RunEvent]: ...
    async def marks(self, session_id: str) -> dict[str, str]: ...
    async def artifacts(self) -> list[tuple[ArtifactInfo, str | None, float]]: ...
    async def artifact_bytes(self, info: ArtifactInfo) -> bytes | None: ...
    async def close(self) -> None: ...


class SessionTarget(Protocol):
    """A session store that takes whole sessions (`PostgresSessionStore`)."""

    async def get_session(self, session_id: str) -> SessionInfo | None: ...

    async def import_session(
        self,
        session: SessionInfo,
        *,
        runs: Sequence[RunInfo],
        messages: Sequence[Message],
        events: Sequence[RunEvent],
        marks: Mapping[str, str] | None = None,
    ) -> bool: ...


class ArtifactTarget(Protocol):
    """An artifact store that takes artifacts under their own ids (`PostgresArtifactStore`)."""

    async def get(self, session_id: str, artifact_id: str) -> ArtifactInfo | None: ...

    async def put(
        self, info: ArtifactInfo, *, run_id: str | None, data: bytes, created_at: float
    ) -> bool: ...


@dataclass
class CopyReport:
    """What a copy did."""

    sessions: int = 0
    runs: int = 0
    messages: int = 0
    events: int = 0
    artifacts: int = 0
    skipped_sessions: int = 0
    skipped_artifacts: int = 0
    lost_artifacts: list[str] = field(default_factory=list)
    """Artifacts not copied because their bytes are gone or are not theirs (a line each)."""

    def summary(self) -> str:
        """One line of counts."""
        return (
            f"copied {_n(self.sessions, 'session')} ({_n(self.runs, 'run')},"
            f" {_n(self.messages, 'message')}, {_n(self.events, 'event')}),"
            f" {_n(self.artifacts, 'artifact')}; skipped {_n(self.skipped_sessions, 'session')}"
            f" and {_n(self.skipped_artifacts, 'artifact')} already there"
        )


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


async def copy_store(
    source: CopySource,
    sessions: SessionTarget,
    artifacts: ArtifactTarget,
) -> CopyReport:
    """Copy every session and artifact of `source` not at the target yet."""
    report = CopyReport()
    await source.open()
    for session in await source.sessions():
        await _copy_session(source, sessions, session, report)
    for info, run_id, created_at in await source.artifacts():
        await _copy_artifact(source, artifacts, info, run_id, created_at, report)
    return report


async def _copy_session(
    source: CopySource, target: SessionTarget, session: SessionInfo, report: CopyReport
) -> None:
    if await target.get_session(session.id) is not None:
        report.skipped_sessions += 1
        return
    runs = await source.runs(session.id)
    messages = await source.messages(session.id)
    events = [event for run in runs for event in await source.events(run.id)]
    marks = await source.marks(session.id)
    written = await target.import_session(
        session, runs=runs, messages=messages, events=events, marks=marks
    )
    if not written:  # another copy wrote it meanwhile
        report.skipped_sessions += 1
        return
    report.sessions += 1
    report.runs += len(runs)
    report.messages += len(messages)
    report.events += len(events)


async def _copy_artifact(
    source: CopySource,
    target: ArtifactTarget,
    info: ArtifactInfo,
    run_id: str | None,
    created_at: float,
    report: CopyReport,
) -> None:
    if await target.get(info.session_id, info.id) is not None:
        report.skipped_artifacts += 1
        return
    data = await source.artifact_bytes(info)
    if data is None:
        report.lost_artifacts.append(f"{info.id} of session {info.session_id}: its bytes are gone")
        return
    if len(data) != info.size or hashlib.sha256(data).hexdigest() != info.sha256:
        report.lost_artifacts.append(
            f"{info.id} of session {info.session_id}: its bytes no longer match its sha256"
        )
        return
    if await target.put(info, run_id=run_id, data=data, created_at=created_at):
        report.artifacts += 1
    else:
        report.skipped_artifacts += 1
