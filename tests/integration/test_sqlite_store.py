"""SQLite session store specifics: a real file, real pragmas, real concurrent processes."""

from __future__ import annotations

import asyncio
import itertools
import re
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from soong_agent.adapters.storage import SqliteSessionStore
from soong_agent.ports.errors import RunError, UsageError
from soong_agent.ports.events import TextDeltaEvent
from soong_agent.ports.messages import Message, TextBlock, user_text
from soong_agent.ports.storage import RunInfo, SessionInfo, TurnCommit

T0 = 1_700_000_000.0


def session(sid: str = "s1", leaf: str | None = None, at: float = T0) -> SessionInfo:
    return SessionInfo(id=sid, project_dir="/p", created_at=T0, updated_at=at, active_leaf_id=leaf)


def run(rid: str = "r1", sid: str = "s1") -> RunInfo:
    return RunInfo(id=rid, session_id=sid, started_at=T0)


def chain(prefix: str, count: int, parent: str | None = None) -> list[Message]:
    out = []
    for i in range(count):
        mid = f"{prefix}{i}"
        out.append(
            Message(
                id=mid,
                parent_id=parent,
                role="user" if i % 2 == 0 else "assistant",
                content=[TextBlock(text=f"message {mid}")],
            )
        )
        parent = mid
    return out


async def test_construction_does_no_io(tmp_path: Path) -> None:
    db = tmp_path / "home" / "deeper" / "sessions.sqlite"
    store = SqliteSessionStore(db)
    assert not db.parent.exists()
    assert await store.get_session("x") is None  # first call creates folder, file and tables
    assert db.exists()
    await store.close()


async def test_warm_up_opens_in_the_background(tmp_path: Path) -> None:
    db = tmp_path / "warm" / "sessions.sqlite"
    store = SqliteSessionStore(db)
    store.warm_up()
    assert await store.list_sessions() == []
    assert db.exists()
    await store.close()

    blocker = tmp_path / "file"
    blocker.write_text("")
    bad = SqliteSessionStore(blocker / "sessions.sqlite")
    bad.warm_up()  # the failure surfaces on the next real call
    with pytest.raises(UsageError):
        await bad.get_session("x")
    await bad.close()


async def test_data_survives_reopening(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite"
    first = SqliteSessionStore(db)
    messages = chain("m", 5)
    event = TextDeltaEvent(seq=0, run_id="r1", session_id="s1", at=T0, text="hi")
    await first.commit(
        TurnCommit(session=session(leaf="m4"), run=run(), messages=messages, events=[event])
    )
    await first.close()

    second = SqliteSessionStore(db)
    assert (await second.get_session("s1")) == session(leaf="m4")
    assert await second.active_path("s1") == messages
    assert list(await second.run_events("r1")) == [event]
    assert [r.id for r in await second.list_runs("s1")] == ["r1"]
    await second.close()


async def test_a_batch_of_many_events_is_written_whole_and_in_order(tmp_path: Path) -> None:
    # a turn's events go in as multi-row INSERTs of at most EVENTS_PER_INSERT rows each: a
    # batch of several such chunks (a group commit of many turns) keeps every event, in order
    store = SqliteSessionStore(tmp_path / "s.sqlite")
    events = [
        TextDeltaEvent(seq=i, run_id="r1", session_id="s1", at=T0 + i, text=f"piece {i}")
        for i in range(1, 251)
    ]
    await store.commit(TurnCommit(session=session(), run=run(), messages=[], events=events))
    with pytest.raises(UsageError):  # a duplicate seq, even in the last chunk: nothing written
        duplicate = TextDeltaEvent(seq=250, run_id="r1", session_id="s1", at=T0, text="again")
        more = [
            TextDeltaEvent(seq=i, run_id="r1", session_id="s1", at=T0, text="x")
            for i in range(300, 420)
        ]
        await store.commit(
            TurnCommit(session=session(), run=run(), messages=[], events=[*more, duplicate])
        )
    assert list(await store.run_events("r1")) == events
    await store.close()


async def test_an_event_holding_a_value_json_cannot_take_is_refused_and_nothing_written(
    tmp_path: Path,
) -> None:
    store = SqliteSessionStore(tmp_path / "s.sqlite")
    good = TextDeltaEvent(seq=1, run_id="r1", session_id="s1", at=T0, text="fine")
    bad = TextDeltaEvent.model_construct(seq=2, run_id="r1", session_id="s1", at=T0, text=object())
    with pytest.raises(UsageError, match="cannot be stored"):
        await store.commit(
            TurnCommit(session=session(), run=run(), messages=chain("m", 1), events=[good, bad])
        )
    assert await store.get_session("s1") is None
    assert list(await store.run_events("r1")) == []
    await store.commit(TurnCommit(session=session(), run=run(), messages=[], events=[good]))
    assert list(await store.run_events("r1")) == [good]
    await store.close()


async def test_pragmas_wal_and_schema(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite"
    store = SqliteSessionStore(db, busy_timeout_ms=1234)
    await store.get_session("x")

    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent in the file
    tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"sessions", "runs", "messages", "events", "artifacts"} <= tables
    raw.close()

    def connection_pragmas() -> tuple[object, ...]:
        conn = store._db.connection()
        return tuple(
            conn.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("busy_timeout", "synchronous", "foreign_keys", "journal_mode")
        )

    got = await store._run(connection_pragmas)  # on the store's own thread and connection
    assert got == (1234, 1, 1, "wal")  # synchronous 1 == NORMAL
    await store.close()


async def test_two_instances_in_one_process_interleave(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite"
    a, b = SqliteSessionStore(db), SqliteSessionStore(db)
    await asyncio.gather(
        *(
            s.commit(
                TurnCommit(
                    session=session(f"{name}{i}"),
                    run=run(f"r{name}{i}", f"{name}{i}"),
                    messages=chain(f"{name}{i}-", 3),
                )
            )
            for i in range(20)
            for name, s in (("a", a), ("b", b))
        )
    )
    assert len(await a.list_sessions(limit=100)) == 40
    assert len(await b.all_messages("a7")) == 3
    await a.close()
    await b.close()


async def test_concurrent_commits_keep_call_order(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "s.sqlite")
    msgs = chain("m", 60)
    await asyncio.gather(
        *(
            store.commit(TurnCommit(session=session(leaf=m.id), run=run(), messages=[m]))
            for m in msgs
        )
    )
    assert await store.all_messages("s1") == msgs
    assert await store.active_path("s1") == msgs
    await store.close()


async def test_a_lock_held_past_timeout_and_retries_is_a_run_error(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite"
    store = SqliteSessionStore(db, busy_timeout_ms=20)
    await store.get_session("x")  # create the schema
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(RunError, match="locked"):
            await store.commit(TurnCommit(session=session(), run=run()))
        # Released while the store is retrying: the commit goes through.
        loop = asyncio.get_running_loop()
        loop.call_later(0.1, blocker.execute, "ROLLBACK")
        await store.commit(TurnCommit(session=session(), run=run()))
    finally:
        blocker.close()
    assert await store.get_session("s1") is not None
    await store.close()


_WORKER = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from soong_agent.adapters.storage import SqliteSessionStore
    from soong_agent.ports.events import TextDeltaEvent
    from soong_agent.ports.messages import user_text
    from soong_agent.ports.storage import RunInfo, SessionInfo, TurnCommit

    db, name, turns, start = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])

    def wait_until(moment):
        while time.time() < moment:
            time.sleep(0.001)

    async def main():
        store = SqliteSessionStore(db, busy_timeout_ms=10000)
        wait_until(start)
        await store.get_session("warm-up")  # both create the file and the tables at once
        wait_until(start + 1.0)
        for t in range(turns):
            sid = f"{name}-s{t % 3}"
            mid = f"{name}-m{t}"
            ev = [TextDeltaEvent(seq=t * 2 + k, run_id=f"{name}-run", session_id=sid, at=t,
                                 text="x") for k in range(2)]
            await store.commit(TurnCommit(
                session=SessionInfo(id=sid, project_dir="/p", created_at=0, updated_at=t,
                                    active_leaf_id=mid),
                run=RunInfo(id=f"{name}-run", session_id=f"{name}-s0", started_at=0),
                messages=[user_text("hello", id=mid)],
                events=ev,
                at=t,
            ))
        await store.close()
        print("ok")

    asyncio.run(main())
    """
)


def test_two_processes_write_concurrently(tmp_path: Path) -> None:
    db = tmp_path / "shared" / "sessions.sqlite"  # fresh: both processes also race to create it
    turns = 600  # enough that the two writers overlap even when one starts a little late
    start = time.time() + 1.5
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(db), name, str(turns), str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("alpha", "beta")
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert out.strip() == "ok"

    raw = sqlite3.connect(db)
    assert raw.execute("SELECT count(*) FROM messages").fetchone()[0] == 2 * turns
    assert raw.execute("SELECT count(*) FROM events").fetchone()[0] == 2 * 2 * turns
    assert raw.execute("SELECT count(*) FROM sessions").fetchone()[0] == 6
    assert raw.execute("SELECT count(*) FROM runs").fetchone()[0] == 2
    per_run = dict(raw.execute("SELECT run_id, max(seq) FROM events GROUP BY run_id").fetchall())
    assert per_run == {"alpha-run": 2 * turns - 1, "beta-run": 2 * turns - 1}
    # The writes really overlapped: the two processes' messages interleave in write order.
    writers = [r[0].split("-")[0] for r in raw.execute("SELECT id FROM messages ORDER BY ordinal")]
    assert sum(a != b for a, b in itertools.pairwise(writers)) >= 2
    raw.close()


async def test_long_branched_session_loads_correctly(tmp_path: Path) -> None:
    store = SqliteSessionStore(tmp_path / "long.sqlite")
    total, batch = 50_000, 5_000
    parent: str | None = None
    for start in range(0, total, batch):
        messages = []
        for i in range(start, start + batch):
            messages.append(user_text(f"m{i}", id=f"m{i}", parent_id=parent))
            parent = f"m{i}"
        await store.commit(TurnCommit(session=session(leaf=parent), run=run(), messages=messages))

    tail = await store.active_path("s1", limit=10_000)
    assert [m.id for m in tail] == [f"m{i}" for i in range(40_000, 50_000)]
    assert len(await store.active_path("s1")) == total

    # Fork at m44999: the path now ends on a 3-message branch, skipping m45000..m49999.
    fork = [
        user_text("b", id=f"b{i}", parent_id="m44999" if i == 0 else f"b{i - 1}") for i in range(3)
    ]
    await store.commit(TurnCommit(session=session(leaf="b2"), run=run(), messages=fork))
    tail = await store.active_path("s1", limit=10_000)
    assert [m.id for m in tail] == [f"m{i}" for i in range(35_003, 45_000)] + ["b0", "b1", "b2"]
    assert len(await store.active_path("s1")) == 45_003
    assert len(await store.all_messages("s1")) == total + 3
    await store.close()


async def test_unusable_paths_raise_usage_error_naming_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    bad = blocker / "sub" / "sessions.sqlite"
    store = SqliteSessionStore(bad)
    with pytest.raises(UsageError, match=re.escape(str(bad))):
        await store.get_session("x")
    await store.close()

    folder = tmp_path / "is-a-dir"
    folder.mkdir()
    store = SqliteSessionStore(folder)
    with pytest.raises(UsageError, match="is-a-dir"):
        await store.list_sessions()
    await store.close()

    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is definitely not an sqlite database file" * 100)
    store = SqliteSessionStore(garbage)
    with pytest.raises(UsageError, match=re.escape("garbage.sqlite")):
        await store.get_session("x")
    await store.close()


async def test_newer_schema_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "future.sqlite"
    raw = sqlite3.connect(db)
    raw.execute("PRAGMA user_version = 999")
    raw.close()
    store = SqliteSessionStore(db)
    with pytest.raises(UsageError, match="schema version 999"):
        await store.get_session("x")
    await store.close()


def test_importing_the_store_does_not_import_sqlalchemy() -> None:
    code = (
        "import sys, soong_agent.adapters.storage;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'sqlmodel')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


_OPEN_EXISTING = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from soong_agent.adapters.storage import SqliteSessionStore
    from soong_agent.adapters.storage.artifacts import SqliteArtifactStore
    from soong_agent.ports.messages import user_text
    from soong_agent.ports.storage import RunInfo, SessionInfo, TurnCommit

    async def main():
        db = Path(sys.argv[1])
        store = SqliteSessionStore(db)
        await store.commit(TurnCommit(
            session=SessionInfo(id="s2", project_dir="/p", created_at=0, updated_at=0,
                                active_leaf_id="m1"),
            run=RunInfo(id="r2", session_id="s2", started_at=0),
            messages=[user_text("a", id="m0"), user_text("b", id="m1", parent_id="m0")],
        ))
        path = await store.active_path("s2")
        await store.close()
        artifacts = SqliteArtifactStore(db, db.parent)
        info = await artifacts.save(session_id="s2", run_id="r2", filename="f.txt",
                                    data=b"x", preview_chars=10)
        assert await artifacts.get("s2", info.id) == info
        await artifacts.close()
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("sqlalchemy", "sqlmodel"))
        print([m.id for m in path], loaded)

    asyncio.run(main())
    """
)


async def test_opening_an_existing_database_imports_no_sqlalchemy(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite"
    store = SqliteSessionStore(db)
    await store.get_session("x")  # creates the schema
    await store.close()
    out = subprocess.run(
        [sys.executable, "-c", _OPEN_EXISTING, str(db)], check=False, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['m0', 'm1'] []"


def test_creating_a_database_in_a_fresh_process_imports_no_sqlalchemy_either(
    tmp_path: Path,
) -> None:
    db = tmp_path / "new" / "sessions.sqlite"
    out = subprocess.run(
        [sys.executable, "-c", _OPEN_EXISTING, str(db)], check=False, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['m0', 'm1'] []"  # the pinned DDL of sql.py made it


def test_tables_module_can_be_reloaded() -> None:
    import importlib

    from soong_agent.adapters.storage import tables

    importlib.reload(tables)
    importlib.reload(tables)
    assert {t.name for t in tables.METADATA.sorted_tables} == {
        "sessions",
        "runs",
        "messages",
        "events",
        "artifacts",
        "session_marks",
        "run_queue",
        "approvals",
    }


async def test_a_failed_commit_whose_caller_was_cancelled_fails_the_next_one(
    tmp_path: Path,
) -> None:
    store = SqliteSessionStore(tmp_path / "s.sqlite")
    first = TurnCommit(session=session(leaf="m1"), run=run(), messages=[user_text("hi", id="m1")])
    await store.commit(first)
    again = [user_text("x", id="m1")]
    duplicate = TurnCommit(session=session(leaf="m1"), run=run(), messages=again)
    task = asyncio.ensure_future(store.commit(duplicate))  # refused by the database …
    await asyncio.sleep(0)
    task.cancel()  # … after its caller stopped waiting
    with pytest.raises(asyncio.CancelledError):
        await task
    later = TurnCommit(session=session(leaf="m2"), run=run(), messages=[user_text("y", id="m2")])
    with pytest.raises(RunError, match=r"whose caller was cancelled, failed.*UNIQUE"):
        await store.commit(later)  # not written past a lost turn
    assert [m.id for m in await store.all_messages("s1")] == ["m1"]
    await store.commit(later)  # said once: the store goes on
    assert [m.id for m in await store.all_messages("s1")] == ["m1", "m2"]
    await store.close()
