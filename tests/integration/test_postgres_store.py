"""The PostgreSQL stores against a real server: a commit whose connection is killed, turns that
are never half written, artifacts read by another host, the connection settings in force."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from soong_agent.adapters.postgres import (
    PostgresArtifactStore,
    PostgresDatabase,
    PostgresSessionStore,
    PostgresSettings,
)
from soong_agent.adapters.postgres import turns as pg_turns
from soong_agent.adapters.postgres.artifact_sql import CHUNK_BYTES
from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
from soong_agent.ports.errors import RunError, UsageError
from soong_agent.ports.events import TextDeltaEvent
from soong_agent.ports.messages import Message, TextBlock
from soong_agent.ports.storage import RunInfo, SessionInfo, TurnCommit
from soong_agent.testing import InMemoryArtifactStore, InMemorySessionStore
from tests.support.postgres import TestServer
from tests.support.store_child import T0, turn


def admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


def kill_connections(url: str) -> int:
    """End every other connection to the test's database, as an operator (or a failover)
    would: `pg_terminate_backend`."""
    with admin(url) as conn:
        cur = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


def stored_ids(url: str) -> list[str]:
    with admin(url) as conn:
        rows = conn.execute("SELECT id FROM soong_agent.messages ORDER BY ordinal").fetchall()
    return [r[0] for r in rows]


async def test_a_commit_on_a_killed_connection_is_retried_once_on_a_new_one(
    postgres_url: str,
) -> None:
    store = PostgresSessionStore(PostgresDatabase(PostgresSettings(postgres_url)))
    try:
        await store.commit(turn("s1", 0))
        assert kill_connections(postgres_url) >= 1  # the pooled one (and the lock holder's)
        await store.commit(turn("s1", 1))
        await store.commit(turn("s1", 2, status="completed"))
        assert [m.id for m in await store.active_path("s1")] == ["m0", "m1", "m2"]
        assert [r.status for r in await store.list_runs("s1")] == ["completed"]
    finally:
        await store.close()
    assert stored_ids(postgres_url) == ["m0", "m1", "m2"]  # each turn once


async def test_a_commit_that_fails_again_on_a_new_connection_raises_and_writes_nothing(
    postgres_url: str, postgres_server: TestServer
) -> None:
    store = PostgresSessionStore(PostgresDatabase(PostgresSettings(postgres_url)))
    dbname = str(conninfo_to_dict(postgres_url)["dbname"])
    try:
        await store.commit(turn("s1", 0))
        with postgres_server.admin() as conn:  # the server stays up, the database shuts its door
            conn.execute(f"ALTER DATABASE {dbname} ALLOW_CONNECTIONS false")
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (dbname,),
            )
        with pytest.raises(RunError) as failed:
            await store.commit(turn("s1", 1))
        message = str(failed.value)
        assert "\n" not in message
        assert "commit the turn" in message
        assert "connection was lost" in message
        assert dbname in message
    finally:
        with postgres_server.admin() as conn:
            conn.execute(f"ALTER DATABASE {dbname} ALLOW_CONNECTIONS true")
        await store.close()
    assert stored_ids(postgres_url) == ["m0"]  # nothing of the failed turn


async def test_a_turn_found_written_is_not_written_twice_when_retried(postgres_url: str) -> None:
    # the connection may be lost after the server committed: the retry finds the turn whole
    store = PostgresSessionStore(PostgresDatabase(PostgresSettings(postgres_url)))
    try:
        await store.commit(turn("s1", 0))  # creates the schema, the session and the run
    finally:
        await store.close()
    batch = turn("s1", 1)
    rows = pg_turns.turn_rows(batch.session, None, batch.messages, [], batch.at, where="db")
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
        await pg_turns.write_turn(conn, rows, False)
        await pg_turns.write_turn(conn, rows, True)  # found: nothing written again
        with pytest.raises(psycopg.errors.UniqueViolation):
            await pg_turns.write_turn(conn, rows, False)  # not looked for: refused
    assert stored_ids(postgres_url) == ["m0", "m1"]


async def test_a_turn_with_many_events_is_one_transaction_too(postgres_url: str) -> None:
    store = PostgresSessionStore(PostgresDatabase(PostgresSettings(postgres_url)))
    count = pg_turns.PIPELINED_EVENTS * 4  # sent by COPY
    events = [
        TextDeltaEvent(seq=i, run_id="run-s1", session_id="s1", at=float(i), text=f"d{i}")
        for i in range(count)
    ]
    try:
        first = turn("s1", 0)
        await store.commit(
            TurnCommit(session=first.session, run=first.run, messages=first.messages, events=events)
        )
        assert list(await store.run_events("run-s1")) == events
        # a duplicate among many: the whole turn is refused, its message too
        again = turn("s1", 1)
        with pytest.raises(UsageError, match="commit the turn"):
            await store.commit(
                TurnCommit(
                    session=again.session,
                    run=again.run,
                    messages=again.messages,
                    events=[*events[-1:], *events[:-1]],
                )
            )
        assert [m.id for m in await store.all_messages("s1")] == ["m0"]
        assert len(await store.run_events("run-s1")) == count
    finally:
        await store.close()


async def test_headers_holding_nul_or_lone_surrogates_are_stored_not_lost(
    postgres_url: str,
) -> None:
    store = PostgresSessionStore(PostgresDatabase(PostgresSettings(postgres_url)))
    try:
        batch = turn("s1", 0)
        batch.session = replace(batch.session, title="a\x00b caf\udce9")
        await store.commit(batch)
        got = await store.get_session("s1")
        assert got is not None
        assert got.title == "a\ufffdb caf\\xe9"
        assert [m.id for m in await store.active_path("s1")] == ["m0"]
    finally:
        await store.close()


async def test_an_artifact_saved_on_one_host_is_read_on_another(postgres_url: str) -> None:
    # two databases objects, two pools: what two hosts have
    writer = PostgresArtifactStore(PostgresDatabase(PostgresSettings(postgres_url)))
    reader = PostgresArtifactStore(PostgresDatabase(PostgresSettings(postgres_url)))
    data = bytes(range(256)) * ((CHUNK_BYTES * 2 + 1000) // 256)  # three chunks, NUL bytes too
    try:
        info = await writer.save(
            session_id="s1", run_id="r1", filename="out.bin", data=data, preview_chars=4
        )
        assert info.preview == "\ufffd\x01\x02\x03"  # NUL shown as U+FFFD
        assert await reader.get("s1", info.id) == info
        assert info.sha256 == hashlib.sha256(data).hexdigest()
        whole = await reader.read("s1", info.id, offset=0, length=len(data))
        assert whole == data
        for offset, length in [
            (CHUNK_BYTES - 10, 20),  # across the first boundary
            (CHUNK_BYTES, CHUNK_BYTES),  # exactly the second chunk
            (CHUNK_BYTES - 1, CHUNK_BYTES + 2),  # three chunks
            (len(data) - 5, 100),  # past the end
            (7, 0),
        ]:
            got = await reader.read("s1", info.id, offset=offset, length=length)
            assert got == data[offset : offset + length], (offset, length)
    finally:
        await writer.close()
        await reader.close()


async def test_connections_carry_the_statement_timeout_and_the_application_name(
    postgres_url: str,
) -> None:
    database = PostgresDatabase(PostgresSettings(postgres_url, statement_timeout_ms=250))

    async def settings(conn: psycopg.AsyncConnection[Any], _retrying: bool) -> tuple[Any, ...]:
        cur = await conn.execute(
            "SELECT current_setting('statement_timeout'), current_setting('application_name')"
        )
        row = await cur.fetchone()
        assert row is not None
        return tuple(row)

    async def slow(conn: psycopg.AsyncConnection[Any], _retrying: bool) -> None:
        await conn.execute("SELECT pg_sleep(30)")

    try:
        assert await database.run(settings, what="read the settings") == ("250ms", "soong-agent")
        with pytest.raises(RunError, match="statement timeout"):
            await database.run(slow, what="sleep")
    finally:
        await database.close()


async def test_long_and_branched_paths_read_as_the_in_memory_store_reads_them(
    postgres_url: str,
) -> None:
    # longer than one slice of the backwards read, branched deep down: every way of reading
    # (one slice, growing slices, the recursive walk) gives what the fake gives
    def chain(prefix: str, count: int, parent: str | None) -> list[Message]:
        out = []
        for i in range(count):
            out.append(
                Message(
                    id=f"{prefix}{i}",
                    parent_id=parent,
                    role="user" if i % 2 == 0 else "assistant",
                    content=[TextBlock(text=f"{prefix}{i}")],
                )
            )
            parent = out[-1].id
        return out

    main = chain("m", 1500, None)
    branch = chain("b", 700, "m100")
    root = chain("r", 3, None)  # a second root after it all (compaction's summary)
    leaves = [main[-1].id, branch[-1].id, root[-1].id]
    fake = InMemorySessionStore()
    store = PostgresSessionStore(PostgresDatabase(PostgresSettings(postgres_url)))
    try:
        for messages, leaf in zip((main, branch, root), leaves, strict=True):
            for s in (fake, store):
                session = SessionInfo(
                    id="s1", project_dir="/p", created_at=1, updated_at=2, active_leaf_id=leaf
                )
                await s.commit(
                    TurnCommit(
                        session=session,
                        run=RunInfo(id="r1", session_id="s1", started_at=1),
                        messages=messages,
                    )
                )
            for limit in (None, 1, 300, 512, 513, 801, 5000):
                got = [m.id for m in await store.active_path("s1", limit=limit)]
                assert got == [m.id for m in await fake.active_path("s1", limit=limit)], limit
        for target in ("m100", "m1499", "b0", "b699", "r2", "nope"):
            got = [m.id for m in await store.path_to("s1", target)]
            assert got == [m.id for m in await fake.path_to("s1", target)], target
        assert len(await store.path_to("s1", "b699")) == 801
    finally:
        await store.close()
        await fake.close()


async def test_a_session_copied_from_sqlite_reads_the_same_and_is_copied_once(
    postgres_url: str, tmp_path: Path
) -> None:
    # what `storage copy` does: read a session whole from one store, write it whole here
    source = SqliteSessionStore(tmp_path / "sessions.sqlite")
    target = PostgresSessionStore(PostgresDatabase(PostgresSettings(postgres_url)))
    try:
        for n in range(3):
            await source.commit(turn("s1", n, status="running" if n < 2 else "completed"))
        branch = turn("s1", 3)
        branch.run = RunInfo(id="run-2", session_id="s1", started_at=T0 + 5, status="completed")
        branch.messages[0].parent_id = "m0"  # a second branch off the first message
        branch.events = [
            TextDeltaEvent(seq=i, run_id="run-2", session_id="s1", at=T0 + i, text=f"t{i}")
            for i in range(40)
        ]
        await source.commit(branch)
        assert await source.set_mark("s1", "extract", "m2", previous=None)
        header = await source.get_session("s1")
        assert header is not None
        runs = await source.list_runs("s1")
        events = [e for r in runs for e in await source.run_events(r.id)]
        copied = await target.import_session(
            header,
            runs=runs,
            messages=await source.all_messages("s1"),
            events=events,
            marks={"extract": "m2"},
        )
        assert copied is True
        assert await target.get_session("s1") == header
        assert await target.list_runs("s1") == runs
        assert await target.all_messages("s1") == await source.all_messages("s1")
        assert await target.active_path("s1") == await source.active_path("s1")
        assert await target.path_to("s1", "m2") == await source.path_to("s1", "m2")
        for r in runs:
            assert list(await target.run_events(r.id)) == list(await source.run_events(r.id))
        assert await target.get_mark("s1", "extract") == "m2"
        again = await target.import_session(
            header, runs=runs, messages=await source.all_messages("s1"), events=events
        )
        assert again is False  # here already: nothing written twice
        assert len(await target.all_messages("s1")) == 4
    finally:
        await source.close()
        await target.close()


async def test_an_artifact_copied_in_keeps_its_id_once(postgres_url: str) -> None:
    source = InMemoryArtifactStore()
    target = PostgresArtifactStore(PostgresDatabase(PostgresSettings(postgres_url)))
    data = b"x" * (CHUNK_BYTES + 3)
    try:
        info = await source.save(
            session_id="s1", run_id="r1", filename="out.txt", data=data, preview_chars=5
        )
        assert await target.put(info, run_id="r1", data=data, created_at=T0) is True
        assert await target.put(info, run_id="r1", data=data, created_at=T0) is False
        assert await target.get("s1", info.id) == info
        assert await target.read("s1", info.id, offset=0, length=len(data)) == data
        with pytest.raises(UsageError, match="not its own"):
            await target.put(
                replace(info, id="art_" + "0" * 24), run_id=None, data=b"other", created_at=T0
            )
    finally:
        await target.close()
