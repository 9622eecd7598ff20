"""A second process using a session store, for the tests of STORE-2 (many processes, one
database): `python -m tests.support.store_child COMMAND STORE ARGS...`.

STORE is a ``postgresql://`` URL or the path of a SQLite file. Commands:

- ``hold SESSION READY``: claim the session, start a run and commit its first turn, create the
  file READY, then wait to be killed.
- ``turns SESSION READY OTHER...``: claim the session, start a run and commit a turn, create
  READY, wait until every OTHER file exists (every other process holds its own session and run
  by then), commit two more turns and the run's end, release the claim; print ``done``.
- ``claim SESSION``: try to claim the session once; print ``claimed`` or ``busy: <message>``.
- ``migrate READY BARRIER``: open the pool, create READY, wait until BARRIER exists, then
  migrate the database; print its version.

Waits are bounded (`WAIT_S`): a process that waits longer exits with status 3.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from soong_agent.adapters.postgres import (
    PostgresDatabase,
    PostgresSessionStore,
    PostgresSettings,
    is_postgres_url,
    migrate,
)
from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
from soong_agent.ports.messages import Message, TextBlock
from soong_agent.ports.storage import RunInfo, SessionBusy, SessionInfo, SessionStore, TurnCommit

WAIT_S = 60.0
T0 = 1_700_000_000.0


def say(what: object) -> None:
    """A line on stdout: what the test reads from this process."""
    sys.stdout.write(f"{what}\n")
    sys.stdout.flush()


def open_store(where: str) -> SessionStore:
    if is_postgres_url(where):
        return PostgresSessionStore(PostgresDatabase(PostgresSettings(where)))
    return SqliteSessionStore(Path(where))


async def wait_for(*paths: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not all(Path(p).exists() for p in paths):
        if time.monotonic() > deadline:
            say(f"gave up waiting for {paths}")
            os._exit(3)
        await asyncio.sleep(0.02)


def turn(session_id: str, n: int, *, status: str = "running") -> TurnCommit:
    """Turn `n` of the session's one run (messages m0, m1, ... in a chain)."""
    mid = f"m{n}"
    return TurnCommit(
        session=SessionInfo(
            id=session_id,
            project_dir="/p",
            created_at=T0,
            updated_at=T0 + n,
            active_leaf_id=mid,
        ),
        run=RunInfo(
            id=f"run-{session_id}",
            session_id=session_id,
            started_at=T0,
            status=status,  # type: ignore[arg-type]
            finished_at=None if status == "running" else T0 + n,
        ),
        messages=[
            Message(
                id=mid,
                parent_id=f"m{n - 1}" if n else None,
                role="user" if n % 2 == 0 else "assistant",
                content=[TextBlock(text=f"turn {n} of {session_id}")],
            )
        ],
        at=T0 + n,
    )


async def main(command: str, where: str, args: list[str]) -> None:
    store = open_store(where)
    try:
        if command == "hold":
            session_id, ready = args
            await store.claim_session(session_id)
            await store.commit(turn(session_id, 0))
            Path(ready).touch()
            await asyncio.sleep(WAIT_S)
            os._exit(3)
        elif command == "turns":
            session_id, ready, *others = args
            claim = await store.claim_session(session_id)
            await store.commit(turn(session_id, 0))
            Path(ready).touch()
            await wait_for(*others)
            await store.commit(turn(session_id, 1))
            await store.commit(turn(session_id, 2, status="completed"))
            await claim.release()
            say("done")
        elif command == "claim":
            (session_id,) = args
            try:
                await store.claim_session(session_id)
            except SessionBusy as exc:
                say(f"busy: {exc}")
            else:
                say("claimed")
        elif command == "migrate":
            ready, barrier = args
            assert isinstance(store, PostgresSessionStore)
            pool = await store.database.pool()
            Path(ready).touch()
            await wait_for(barrier)
            say(await migrate(pool))
        else:
            raise SystemExit(f"unknown command {command!r}")
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
