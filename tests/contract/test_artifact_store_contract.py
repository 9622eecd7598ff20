"""The ArtifactStore contract, run against the in-memory fake, the SQLite store on real files and
the PostgreSQL store on a real server (`tests/support/postgres.py`)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Protocol

import pytest

from soong_agent.adapters.storage.artifacts import SqliteArtifactStore
from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.errors import UsageError
from soong_agent.testing import InMemoryArtifactStore
from tests.support import postgres

DATA = ("héllo wörld\n" * 2000).encode()


class ClosableArtifactStore(ArtifactStore, Protocol):
    """The port plus `close`, which both implementations have."""

    async def close(self) -> None: ...


FACTORIES: dict[str, Callable[[Path, pytest.FixtureRequest], ClosableArtifactStore]] = {
    "inmemory": lambda _tmp, _request: InMemoryArtifactStore(),
    "sqlite": lambda tmp, _request: SqliteArtifactStore(
        tmp / "home" / "sessions.sqlite", tmp / "home"
    ),
    "postgres": lambda _tmp, request: postgres.artifact_store(
        request.getfixturevalue("postgres_url")
    ),
}


@pytest.fixture(params=sorted(FACTORIES))
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ClosableArtifactStore]:
    s = FACTORIES[request.param](tmp_path, request)
    yield s
    await s.close()


async def save(
    store: ArtifactStore,
    data: bytes = b"x",
    *,
    session_id: str = "s1",
    filename: str = "out.txt",
    preview_chars: int = 1,
) -> str:
    info = await store.save(
        session_id=session_id,
        run_id="r1",
        filename=filename,
        data=data,
        preview_chars=preview_chars,
    )
    return info.id


def test_implements_the_port(store: ArtifactStore) -> None:
    assert isinstance(store, ArtifactStore)


async def test_save_returns_the_metadata_and_get_finds_it(store: ArtifactStore) -> None:
    info = await store.save(
        session_id="s1", run_id="r1", filename="run_command-output.txt", data=DATA, preview_chars=8
    )
    assert re.fullmatch(r"art_[0-9a-f]{24}", info.id)
    assert info.session_id == "s1"
    assert info.filename == "run_command-output.txt"
    assert info.size == len(DATA)
    assert info.sha256 == hashlib.sha256(DATA).hexdigest()
    assert info.preview == "héllo wö"  # characters, not bytes
    assert await store.get("s1", info.id) == info


async def test_preview_of_bytes_that_are_not_utf8(store: ArtifactStore) -> None:
    info = await store.save(
        session_id="s1", run_id="r1", filename="b", data=b"\xff\xfeab", preview_chars=100
    )
    assert info.preview == "\ufffd\ufffdab"
    none = await store.save(
        session_id="s1", run_id="r1", filename="b", data=b"ab", preview_chars=-5
    )
    assert none.preview == ""


async def test_ids_are_unique(store: ArtifactStore) -> None:
    ids = {await save(store) for _ in range(20)}
    assert len(ids) == 20


async def test_read_returns_byte_ranges(store: ArtifactStore) -> None:
    aid = await save(store, DATA)
    assert await store.read("s1", aid, offset=0, length=5) == DATA[:5]
    assert await store.read("s1", aid, offset=100, length=1000) == DATA[100:1100]
    assert await store.read("s1", aid, offset=len(DATA) - 3, length=100) == DATA[-3:]
    assert await store.read("s1", aid, offset=len(DATA) + 10, length=10) == b""
    assert await store.read("s1", aid, offset=3, length=0) == b""


async def test_negative_ranges_are_refused(store: ArtifactStore) -> None:
    aid = await save(store, DATA)
    with pytest.raises(ValueError):
        await store.read("s1", aid, offset=-1, length=5)
    with pytest.raises(ValueError):
        await store.read("s1", aid, offset=0, length=-1)


async def test_empty_data_is_an_artifact_too(store: ArtifactStore) -> None:
    info = await store.save(session_id="s1", run_id="r1", filename="e", data=b"", preview_chars=9)
    assert (info.size, info.preview) == (0, "")
    assert await store.read("s1", info.id, offset=0, length=10) == b""


async def test_other_sessions_cannot_see_it(store: ArtifactStore) -> None:
    aid = await save(store)
    assert await store.get("s2", aid) is None
    with pytest.raises(FileNotFoundError):
        await store.read("s2", aid, offset=0, length=1)


@pytest.mark.parametrize(
    "unknown", ["art_0000000000", "art_nope", "../../etc/passwd", "", "ART_00000001"]
)
async def test_unknown_ids_are_not_found(store: ArtifactStore, unknown: str) -> None:
    await save(store)
    assert await store.get("s1", unknown) is None
    with pytest.raises(FileNotFoundError):
        await store.read("s1", unknown, offset=0, length=1)


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("../../evil name?.txt", "evil_name_.txt"),
        ("..", "artifact"),
        (".hidden", "hidden"),
        ("a\\b\\c.log", "c.log"),
        ("", "artifact"),
        ("dir/sub/ok-name_1.json", "ok-name_1.json"),
    ],
)
async def test_filenames_are_reduced_to_a_safe_name(
    store: ArtifactStore, given: str, kept: str
) -> None:
    info = await store.save(
        session_id="s1", run_id="r1", filename=given, data=b"x", preview_chars=1
    )
    assert info.filename == kept


async def test_long_filenames_keep_their_extension(store: ArtifactStore) -> None:
    info = await store.save(
        session_id="s1", run_id="r1", filename="x" * 500 + ".json", data=b"x", preview_chars=1
    )
    assert len(info.filename) <= 120
    assert info.filename.endswith(".json")


@pytest.mark.parametrize("bad", ["../x", "a/b", "", "..", ".", "a b", "-x"])
async def test_unsafe_session_ids_are_refused(store: ArtifactStore, bad: str) -> None:
    with pytest.raises(UsageError):
        await save(store, session_id=bad)


async def test_closed_store_refuses_calls_and_close_is_idempotent(
    store: ClosableArtifactStore,
) -> None:
    aid = await save(store)
    await store.close()
    await store.close()
    with pytest.raises(UsageError):
        await store.get("s1", aid)
    with pytest.raises(UsageError):
        await store.read("s1", aid, offset=0, length=1)
    with pytest.raises(UsageError):
        await save(store)
