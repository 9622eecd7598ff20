"""The versioned schema (STORE-2): created on first use, an older one migrated, a newer one
refused and left alone, two processes migrating at once, status that creates nothing."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from soong_agent.adapters.postgres import (
    CODE_VERSION,
    PostgresDatabase,
    PostgresSettings,
    migrate,
    schema_status,
)
from soong_agent.adapters.postgres.ddl import Step, assemble
from soong_agent.adapters.postgres.schema import STEPS
from soong_agent.ports.errors import UsageError
from tests.support.postgres import artifact_store, session_store
from tests.support.store_child import turn

ROOT = Path(__file__).resolve().parents[2]
CHILD = (sys.executable, "-m", "tests.support.store_child")


def tables(url: str) -> list[tuple[str, int]]:
    """The tables of the stores' schema with their row counts, and its recorded versions."""
    with psycopg.connect(url, autocommit=True) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'soong_agent' ORDER BY 1"
            ).fetchall()
        ]
        counts = []
        for name in names:
            row = conn.execute(f"SELECT count(*) FROM soong_agent.{name}").fetchone()
            assert row is not None
            counts.append((name, int(row[0])))
    return counts


def versions(url: str) -> list[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT version FROM soong_agent.schema_version ORDER BY 1").fetchall()
    return [int(r[0]) for r in rows]


async def test_status_reports_versions_and_creates_nothing(postgres_url: str) -> None:
    database = PostgresDatabase(PostgresSettings(postgres_url))
    try:
        status = await schema_status(await database.pool())
        assert (status.db_version, status.code_version) == (0, CODE_VERSION)
        assert status.server_version.startswith("18.")
        assert not status.current
        assert tables(postgres_url) == []  # nothing was created
        assert await migrate(await database.pool()) == CODE_VERSION
        assert (await schema_status(await database.pool())).current
        assert await migrate(await database.pool()) == CODE_VERSION  # again: nothing to do
    finally:
        await database.close()
    assert versions(postgres_url) == list(range(1, CODE_VERSION + 1))


async def test_the_first_use_creates_the_schema(postgres_url: str) -> None:
    store = session_store(postgres_url)
    try:
        assert await store.get_session("s1") is None
    finally:
        await store.close()
    assert versions(postgres_url) == list(range(1, CODE_VERSION + 1))
    assert {"sessions", "runs", "messages", "events", "artifacts"} <= {
        name for name, _ in tables(postgres_url)
    }


async def test_an_older_schema_is_migrated_and_keeps_its_rows(postgres_url: str) -> None:
    database = PostgresDatabase(PostgresSettings(postgres_url))
    try:
        assert await migrate(await database.pool(), steps=STEPS[:1]) == 1  # an older release
    finally:
        await database.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # what the older one wrote
        conn.execute(
            "INSERT INTO soong_agent.sessions (id, project_dir, created_at, updated_at)"
            " VALUES ('s1', '/p', 1, 2)"
        )
    assert "artifacts" not in dict(tables(postgres_url))

    store = artifact_store(postgres_url)  # this release: the first use migrates
    try:
        info = await store.save(
            session_id="s1", run_id="r1", filename="a.txt", data=b"abc", preview_chars=3
        )
        assert await store.read("s1", info.id, offset=0, length=3) == b"abc"
    finally:
        await store.close()
    assert versions(postgres_url) == list(range(1, CODE_VERSION + 1))
    sessions = session_store(postgres_url)
    try:
        found = await sessions.get_session("s1")
    finally:
        await sessions.close()
    assert found is not None
    assert (found.project_dir, found.updated_at) == ("/p", 2)


async def test_a_newer_schema_is_refused_and_left_as_it_is(postgres_url: str) -> None:
    store = session_store(postgres_url)
    try:
        await store.commit(turn("s1", 0))
    finally:
        await store.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # a newer soong-agent's
        conn.execute(
            "INSERT INTO soong_agent.schema_version (version, name) VALUES (%s, 'from the future')",
            (CODE_VERSION + 1,),
        )
    before = tables(postgres_url)

    later = session_store(postgres_url)
    try:
        with pytest.raises(UsageError) as refused:
            await later.get_session("s1")
    finally:
        await later.close()
    message = str(refused.value)
    assert f"version {CODE_VERSION + 1}" in message
    assert "newer than this soong-agent" in message
    database = PostgresDatabase(PostgresSettings(postgres_url))
    try:
        with pytest.raises(UsageError, match="newer"):
            await migrate(await database.pool())
        status = await schema_status(await database.pool())
        assert (status.db_version, status.current) == (CODE_VERSION + 1, False)
    finally:
        await database.close()
    assert tables(postgres_url) == before


def test_steps_are_numbered_once_each() -> None:
    step = STEPS[0]
    with pytest.raises(ValueError, match="once each"):
        assemble(STEPS, [Step(step.version, "again", ())])
    with pytest.raises(ValueError, match="once each"):
        assemble(STEPS, [Step(CODE_VERSION + 2, "a gap", ())])
    assert assemble(STEPS[1:], STEPS[:1]) == STEPS


async def test_processes_migrating_at_once_apply_each_step_once(
    postgres_url: str, tmp_path: Path
) -> None:
    barrier = tmp_path / "go"
    ready = [tmp_path / f"ready-{i}" for i in range(4)]
    procs: list[subprocess.Popen[str]] = [
        subprocess.Popen(
            [*CHILD, "migrate", postgres_url, str(r), str(barrier)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in ready
    ]
    outputs: list[Any] = []
    try:
        # every child has its pool open, then they are let go together
        for _ in range(3000):
            if all(r.exists() for r in ready) or any(p.poll() is not None for p in procs):
                break
            await asyncio.sleep(0.02)
        barrier.touch()
        outputs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0] * 4, outputs
    assert [out.strip() for out, _err in outputs] == [str(CODE_VERSION)] * 4
    assert versions(postgres_url) == list(range(1, CODE_VERSION + 1))
