"""SqliteArtifactStore on real files and a real SQLite database, and read_artifact over it.

What every artifact store does (ranges, sessions, ids, names, refusals) is in
tests/contract/test_artifact_store_contract.py; this file keeps what is about files and SQLite.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from soong_agent.adapters.inmemory.filesystem import InMemoryFileSystem
from soong_agent.adapters.storage import SqliteSessionStore
from soong_agent.adapters.storage.artifacts import SqliteArtifactStore
from soong_agent.application.tools.artifacts import read_artifact_tool
from soong_agent.application.tools.base import ToolContext, ToolOutput
from soong_agent.ports.artifacts import ArtifactStore, safe_filename
from soong_agent.ports.storage import RunInfo, SessionInfo, TurnCommit

DATA = ("héllo wörld\n" * 2000).encode()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteArtifactStore]:
    s = SqliteArtifactStore(tmp_path / "home" / "sessions.sqlite", tmp_path / "home")
    yield s
    await s.close()


def test_is_an_artifact_store(tmp_path: Path) -> None:
    store = SqliteArtifactStore(tmp_path / "db.sqlite", tmp_path)
    assert isinstance(store, ArtifactStore)
    assert not (tmp_path / "db.sqlite").exists()  # construction does no I/O


async def test_save_writes_the_file_and_the_metadata(
    store: SqliteArtifactStore, tmp_path: Path
) -> None:
    info = await store.save(
        session_id="s1", run_id="r1", filename="run_command-output.txt", data=DATA, preview_chars=8
    )
    assert re.fullmatch(r"art_[0-9a-f]{24}", info.id)
    path = tmp_path / "home" / "sessions" / "s1" / "artifacts" / info.id / "run_command-output.txt"
    assert path.read_bytes() == DATA
    assert store.path_of(info) == path
    assert info.size == len(DATA)
    assert info.sha256 == hashlib.sha256(DATA).hexdigest()
    assert info.preview == "héllo wö"
    assert await store.get("s1", info.id) == info
    with sqlite3.connect(tmp_path / "home" / "sessions.sqlite") as db:
        row = db.execute(
            "SELECT session_id, run_id, filename, size, sha256, preview FROM artifacts"
        ).fetchone()
    assert row == ("s1", "r1", "run_command-output.txt", len(DATA), info.sha256, "héllo wö")


async def test_survives_a_new_store_instance(tmp_path: Path) -> None:
    db, home = tmp_path / "db.sqlite", tmp_path / "home"
    first = SqliteArtifactStore(db, home)
    info = await first.save(session_id="s1", run_id="r1", filename="f", data=DATA, preview_chars=4)
    await first.close()
    second = SqliteArtifactStore(db, home)
    try:
        assert await second.get("s1", info.id) == info
        assert await second.read("s1", info.id, offset=12, length=12) == DATA[12:24]
    finally:
        await second.close()


async def test_shares_the_database_with_the_session_store(tmp_path: Path) -> None:
    db, home = tmp_path / "db.sqlite", tmp_path / "home"
    sessions = SqliteSessionStore(db)
    artifacts = SqliteArtifactStore(db, home)
    try:
        # an artifact may be stored before the session's first turn is committed
        info = await artifacts.save(
            session_id="s9", run_id="r9", filename="f", data=b"abc", preview_chars=3
        )
        session = SessionInfo(id="s9", project_dir="/p", created_at=1.0, updated_at=1.0)
        run = RunInfo(id="r9", session_id="s9", started_at=1.0)
        await sessions.commit(TurnCommit(session=session, run=run, messages=[], events=[], at=2.0))
        assert (await sessions.get_session("s9")) is not None
        assert await artifacts.get("s9", info.id) == info
    finally:
        await artifacts.close()
        await sessions.close()


async def test_files_stay_in_the_session_folder(store: SqliteArtifactStore, tmp_path: Path) -> None:
    info = await store.save(
        session_id="s1", run_id="r1", filename="../../evil name?.txt", data=b"x", preview_chars=1
    )
    assert store.path_of(info) == (
        tmp_path / "home" / "sessions" / "s1" / "artifacts" / info.id / "evil_name_.txt"
    )
    assert safe_filename("..") == "artifact"


# --- the read_artifact tool -------------------------------------------------------------------


def ctx(session_id: str = "s1") -> ToolContext:
    return ToolContext(fs=InMemoryFileSystem(), session_id=session_id, run_id="r1")


async def call(store: SqliteArtifactStore, session_id: str = "s1", **args: object) -> ToolOutput:
    tool = read_artifact_tool(store=store)
    return await tool.handler(tool.args_model.model_validate(args), ctx(session_id))


async def test_read_artifact_tool_reads_in_ranges(store: SqliteArtifactStore) -> None:
    data = b"0123456789" * 10
    info = await store.save(session_id="s1", run_id="r1", filename="o", data=data, preview_chars=0)
    first = await call(store, artifact_id=info.id, length=30)
    assert not first.is_error
    assert first.content == (
        "012345678901234567890123456789\n"
        f"[artifact {info.id}: bytes 0-30 of 100; 70 more bytes, continue with offset=30]"
    )
    last = await call(store, artifact_id=info.id, offset=90, length=30)
    assert last.content == f"0123456789\n[artifact {info.id}: bytes 90-100 of 100; the end]"
    past = await call(store, artifact_id=info.id, offset=500)
    assert not past.is_error
    assert "past the end" in past.content


async def test_read_artifact_tool_does_not_split_characters(store: SqliteArtifactStore) -> None:
    data = "aé€😀z".encode()  # 1 + 2 + 3 + 4 + 1 bytes
    info = await store.save(session_id="s1", run_id="r1", filename="o", data=data, preview_chars=0)
    out = await call(store, artifact_id=info.id, length=5)  # would end inside the euro sign
    assert out.content.startswith("aé\n")
    assert "continue with offset=3]" in out.content
    rest = await call(store, artifact_id=info.id, offset=3, length=100)
    assert rest.content.startswith("€😀z\n")


async def test_read_artifact_tool_unknown_or_foreign_id(store: SqliteArtifactStore) -> None:
    info = await store.save(session_id="s1", run_id="r1", filename="o", data=b"x", preview_chars=1)
    foreign = await call(store, session_id="s2", artifact_id=info.id)
    assert foreign.is_error
    assert info.id in foreign.content
    unknown = await call(store, artifact_id="art_nope")
    assert unknown.is_error
    assert "art_nope" in unknown.content


def test_read_artifact_tool_spec(tmp_path: Path) -> None:
    tool = read_artifact_tool(store=SqliteArtifactStore(tmp_path / "db", tmp_path))
    assert tool.name == "read_artifact"
    assert tool.permission_class == "read_only"
    props = tool.spec.parameters["properties"]
    assert props["length"]["maximum"] == 100_000
    assert set(props) == {"artifact_id", "offset", "length"}
