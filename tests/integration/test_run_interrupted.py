"""A run left `running` by a process that is gone reads as `interrupted` (issue 39 item 1).

Real SQLite files and real processes: a process that dies after its run's first batch, one
that still runs (in another process, and in this one), and an SDK run whose end the store
refused; the next opener shows it interrupted, and the session resumes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from soong_agent import AgentRuntime
from soong_agent.adapters.storage.sqlite_store import INTERRUPTED_REASON, SqliteSessionStore
from soong_agent.ports.events import RunFinished
from soong_agent.ports.messages import Message
from soong_agent.ports.storage import RunInfo, SessionInfo, TurnCommit
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config

pytestmark = pytest.mark.asyncio

CHILD = textwrap.dedent(
    """
    import asyncio, os, sys
    from pathlib import Path
    from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
    from soong_agent.ports.storage import RunInfo, SessionInfo, TurnCommit

    async def main() -> None:
        store = SqliteSessionStore(Path(sys.argv[1]))
        session = SessionInfo(id="ses_1", project_dir="/p", created_at=1.0, updated_at=1.0)
        run = RunInfo(id=sys.argv[2], session_id="ses_1", started_at=1.0, model="m")
        await store.commit(TurnCommit(session=session, run=run, at=1.0))
        print("started", flush=True)
        if sys.argv[3] == "die":
            os._exit(0)  # as SIGKILL would: no end written, the store not closed
        sys.stdin.readline()  # running until told to end
        ended = RunInfo(id=run.id, session_id="ses_1", started_at=1.0, status="completed",
                        finished_at=2.0, model="m")
        await store.commit(TurnCommit(session=session, run=ended, at=2.0))
        await store.close()

    asyncio.run(main())
    """
)


def child(db: Path, run_id: str, mode: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), run_id, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    return proc


async def statuses(db: Path) -> list[tuple[str, str, str | None]]:
    store = SqliteSessionStore(db)
    try:
        return [(r.id, r.status, r.reason) for r in await store.list_runs("ses_1")]
    finally:
        await store.close()


async def test_a_run_whose_process_died_reads_and_is_written_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite"
    proc = child(db, "run_dead", "die")
    assert proc.wait(timeout=30) == 0
    assert await statuses(db) == [("run_dead", "interrupted", INTERRUPTED_REASON)]
    # written, not only shown: a plain reader of the file sees it too
    import sqlite3

    conn = sqlite3.connect(db)
    assert conn.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]
    conn.close()
    assert not (tmp_path / "sessions.sqlite.runs" / "run_dead.lock").exists()


async def test_a_run_live_in_another_process_stays_running(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite"
    proc = child(db, "run_live", "wait")
    try:
        assert await statuses(db) == [("run_live", "running", None)]
        # looking twice changes nothing
        assert await statuses(db) == [("run_live", "running", None)]
        assert proc.stdin is not None
        proc.stdin.write("end\n")
        proc.stdin.flush()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    assert await statuses(db) == [("run_live", "completed", None)]
    assert not (tmp_path / "sessions.sqlite.runs" / "run_live.lock").exists()


async def test_a_killed_live_process_leaves_its_run_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite"
    proc = child(db, "run_killed", "wait")
    assert await statuses(db) == [("run_killed", "running", None)]
    proc.kill()
    proc.wait(timeout=30)
    assert await statuses(db) == [("run_killed", "interrupted", INTERRUPTED_REASON)]


async def test_a_run_of_another_store_of_this_process_is_held_until_it_closes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "sessions.sqlite"
    writer = SqliteSessionStore(db)
    session = SessionInfo(id="ses_1", project_dir="/p", created_at=1.0, updated_at=1.0)
    run = RunInfo(id="run_1", session_id="ses_1", started_at=1.0, model="m")
    await writer.commit(TurnCommit(session=session, run=run, at=1.0))
    assert await statuses(db) == [("run_1", "running", None)]
    assert [r.status for r in await writer.list_runs("ses_1")] == ["running"]
    await writer.close()  # its run never got an end
    assert await statuses(db) == [("run_1", "interrupted", INTERRUPTED_REASON)]


class RefusingEnd(SqliteSessionStore):
    """A SQLite store whose database refuses every batch from the run's end on (each breaks
    a constraint, as a corrupt file or a second writer might make it)."""

    failing = False
    first: Message | None = None

    async def commit(self, batch: TurnCommit) -> None:
        if self.first is None and batch.messages:
            self.first = batch.messages[0]
        if self.failing or any(isinstance(e, RunFinished) for e in batch.events):
            self.failing = True
            assert self.first is not None
            batch = TurnCommit(
                session=batch.session,
                run=batch.run,
                messages=[*batch.messages, self.first],  # a message id already stored
                events=batch.events,
                at=batch.at,
            )
        await super().commit(batch)


async def test_an_sdk_run_whose_end_was_refused_shows_interrupted_and_resumes(
    tmp_path: Path,
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    write_minimal_config(home)
    project.mkdir()
    db = home / "sessions.sqlite"
    store = RefusingEnd(db)
    model = ScriptedModel([ScriptedResponse.text("first answer")])
    async with AgentRuntime(project, home, model=model, session_store=store) as runtime:
        run = await runtime.run("hello")
        result = await run.wait()
    assert result.status == "failed"
    assert result.reason is not None
    assert "the session shows the run as interrupted" in result.reason
    assert "UNIQUE constraint failed" in result.reason
    # the store the caller gave is still open (theirs to close): the run is not held any more
    assert [r.status for r in await store.list_runs(run.session_id)] == ["interrupted"]
    await store.close()
    reader = SqliteSessionStore(db)
    try:
        [only] = await reader.list_runs(run.session_id)
    finally:
        await reader.close()
    assert only.status == "interrupted"
    model = ScriptedModel([ScriptedResponse.text("second answer")])
    async with AgentRuntime(project, home, model=model) as runtime:
        again = await runtime.run("go on", session_id=run.session_id)
        resumed = await again.wait()
    assert resumed.status == "completed" and resumed.output == "second answer"
    sent = [m.text for m in model.calls[0].messages if m.role == "user"]
    assert sent[0] == "hello" and sent[-1] == "go on"
