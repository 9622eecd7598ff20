"""The SQLite store reads a path in write order when it can (`sql.TAIL_SQL`) and walks it link
by link otherwise (`sql.PATH_SQL`): both must give the same messages, whatever the shape of the
session tree (a linear path, a new root after a compaction, branches, interleaved sessions)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from soong_agent.adapters.storage import SqliteSessionStore, sql
from soong_agent.ports.messages import MESSAGE_LIST, Message, TextBlock
from soong_agent.ports.storage import RunInfo, SessionInfo, TurnCommit

T0 = 1_700_000_000.0


def message(mid: str, parent: str | None) -> Message:
    return Message(id=mid, parent_id=parent, role="user", content=[TextBlock(text=mid)])


def walked(db: Path, sid: str, limit: int | None, mid: str | None = None) -> list[str]:
    """The ids the recursive walk alone gives, root first."""
    conn = sqlite3.connect(db)
    try:
        params: dict[str, object] = {"sid": sid, "limit": -1 if limit is None else limit}
        statement = sql.PATH_SQL
        if mid is not None:
            params["mid"], statement = mid, sql.PATH_TO_SQL
        rows = conn.execute(statement, params).fetchall()
    finally:
        conn.close()
    return [m.id for m in MESSAGE_LIST.validate_json("[" + ",".join(r[0] for r in rows) + "]")][
        ::-1
    ]


async def write(store: SqliteSessionStore, sid: str, messages: list[Message], leaf: str) -> None:
    info = SessionInfo(id=sid, project_dir="/p", created_at=T0, updated_at=T0, active_leaf_id=leaf)
    run = RunInfo(id=f"r-{sid}", session_id=sid, started_at=T0)
    await store.commit(TurnCommit(session=info, run=run, messages=messages, events=[], at=T0))


@pytest.mark.parametrize("seed", range(8))
async def test_the_tail_read_and_the_walk_agree(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    db = tmp_path / "s.sqlite"
    store = SqliteSessionStore(db)
    ids: dict[str, list[str]] = {"a": [], "b": []}
    leaf: dict[str, str | None] = {"a": None, "b": None}
    for n in range(300):
        sid = rnd.choice("ab")  # two sessions written interleaved
        known = ids[sid]
        roll = rnd.random()
        if roll < 0.05 or not known:
            parent = None  # a new root (compaction)
        elif roll < 0.15:
            parent = rnd.choice(known)  # a branch from an earlier message
        else:
            parent = leaf[sid]
        mid = f"{sid}{n}"
        batch = [message(mid, parent)]
        if rnd.random() < 0.3:  # a parent earlier in the same batch
            batch.append(message(f"{mid}x", mid))
        for m in batch:
            known.append(m.id)
        leaf[sid] = batch[-1].id
        await write(store, sid, batch, batch[-1].id)
        if n % 7 == 0:
            for s in "ab":
                for limit in (None, 1, 3, 50):
                    got = [m.id for m in await store.active_path(s, limit=limit)]
                    assert got == walked(db, s, limit), (s, limit)
            if known:
                mid = rnd.choice(known)
                got = [m.id for m in await store.path_to(sid, mid)]
                assert got == walked(db, sid, None, mid)
    assert [m.id for m in await store.active_path("nobody")] == []
    assert await store.path_to("a", "missing") == []
    await store.close()
