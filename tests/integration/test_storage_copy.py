"""`storage copy` under the CLI (`adapters.storage_copy`): SQLite → PostgreSQL → another
PostgreSQL database keeps every session, run, message, event, mark and artifact; an artifact
whose file is gone is named and the rest still copied."""

from __future__ import annotations

from pathlib import Path

from soong_agent.adapters.postgres import PostgresDatabase, PostgresSettings
from soong_agent.adapters.postgres.export import PostgresExport
from soong_agent.adapters.storage.artifacts import SqliteArtifactStore
from soong_agent.adapters.storage.export import SqliteExport
from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
from soong_agent.adapters.storage_copy import CopyReport, copy_store
from tests.support.postgres import TestServer, artifact_store, session_store
from tests.support.store_child import turn


async def _copy(source: SqliteExport | PostgresExport, url: str) -> CopyReport:
    sessions, artifacts = session_store(url), artifact_store(url)
    try:
        return await copy_store(source, sessions, artifacts)
    finally:
        await sessions.close()
        await artifacts.close()
        await source.close()


async def test_sqlite_to_postgres_to_postgres_keeps_everything(
    tmp_path: Path, postgres_server: TestServer, postgres_url: str
) -> None:
    db = tmp_path / "sessions.sqlite"
    sessions, artifacts = SqliteSessionStore(db), SqliteArtifactStore(db, tmp_path)
    for sid in ("s1", "s2"):
        for n in range(3):
            await sessions.commit(turn(sid, n, status="running" if n < 2 else "completed"))
    assert await sessions.set_mark("s1", "extract", "m1", previous=None)
    kept = await artifacts.save(
        session_id="s1", run_id="run-s1", filename="out.txt", data=b"x" * 5000, preview_chars=4
    )
    gone = await artifacts.save(
        session_id="s2", run_id="run-s2", filename="gone.txt", data=b"y", preview_chars=4
    )
    artifacts.path_of(gone).unlink()
    await artifacts.close()

    report = await _copy(SqliteExport(db, tmp_path), postgres_url)
    assert (report.sessions, report.runs, report.messages, report.artifacts) == (2, 2, 6, 1)
    assert report.lost_artifacts == [f"{gone.id} of session s2: its bytes are gone"]

    other = postgres_server.url(postgres_server.create_database())
    try:
        source = PostgresExport(PostgresDatabase(PostgresSettings(postgres_url)))
        report = await _copy(source, other)
        assert (report.sessions, report.messages, report.artifacts) == (2, 6, 1)
        assert report.lost_artifacts == []
        target = session_store(other)
        copied = artifact_store(other)
        try:
            for sid in ("s1", "s2"):
                assert await target.get_session(sid) == await sessions.get_session(sid)
                assert await target.all_messages(sid) == await sessions.all_messages(sid)
                assert await target.list_runs(sid) == await sessions.list_runs(sid)
                for run in await sessions.list_runs(sid):
                    assert list(await target.run_events(run.id)) == list(
                        await sessions.run_events(run.id)
                    )
            assert await target.get_mark("s1", "extract") == "m1"
            assert await copied.get("s1", kept.id) == kept
            assert await copied.read("s1", kept.id, offset=0, length=9999) == b"x" * 5000
        finally:
            await target.close()
            await copied.close()
            await sessions.close()
    finally:
        postgres_server.drop_database(other.rsplit("/", maxsplit=1)[-1].split("?", maxsplit=1)[0])
