"""Many processes, one database (STORE-2, issue 33 item 5): real processes against a real
PostgreSQL (and, for the session claim, the SQLite file too)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from soong_agent.adapters.postgres import PostgresDatabase, PostgresSettings
from soong_agent.adapters.postgres.queue_sql import FENCE_HELD
from soong_agent.adapters.postgres.run_queue import PostgresRunQueue
from soong_agent.adapters.postgres.session_store import INTERRUPTED_REASON
from soong_agent.ports.run_queue import QueuedRun
from soong_agent.ports.storage import SessionBusy, SessionClaim, SessionStore
from tests.support import postgres
from tests.support.store_child import open_store

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60


def child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.store_child", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, f"child failed ({proc.returncode}): {out}{err}"
    return out.strip()


async def appears(path: Path, proc: subprocess.Popen[str]) -> None:
    for _ in range(WAIT_S * 50):
        if path.exists():
            return
        assert proc.poll() is None, f"the child ended first: {proc.communicate()}"
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


@pytest.fixture
def killed_at_end() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()  # its pipes closed too


@pytest.fixture(params=["postgres", "sqlite"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres_url"))
    return str(tmp_path / "sessions.sqlite")


async def test_processes_running_different_sessions_do_not_block_each_other(
    postgres_url: str, tmp_path: Path
) -> None:
    # each process holds its session's claim and its run's lock while it waits for the others
    # to hold theirs: if one blocked another, the waits would never end
    names = ["a", "b", "c"]
    ready = {n: tmp_path / f"{n}.ready" for n in names}
    procs = [
        child("turns", postgres_url, n, str(ready[n]), *(str(ready[o]) for o in names if o != n))
        for n in names
    ]
    assert [finished(p) for p in procs] == ["done"] * 3

    store = postgres.session_store(postgres_url)
    try:
        assert sorted(s.id for s in await store.list_sessions()) == names
        for n in names:
            assert [m.id for m in await store.active_path(n)] == ["m0", "m1", "m2"]
            assert [r.status for r in await store.list_runs(n)] == ["completed"]
    finally:
        await store.close()


async def test_a_second_process_cannot_claim_a_held_session(
    where: str, tmp_path: Path, killed_at_end: list[subprocess.Popen[str]]
) -> None:
    ready = tmp_path / "held"
    holder = child("hold", where, "s1", str(ready))
    killed_at_end.append(holder)
    await appears(ready, holder)

    refused = finished(child("claim", where, "s1"))
    assert refused.startswith("busy: ")
    assert "'s1'" in refused
    assert f"pid {holder.pid}" in refused  # the holder is named
    assert finished(child("claim", where, "s2")) == "claimed"  # other sessions are free

    store = open_store(where)
    try:
        with pytest.raises(SessionBusy, match=f"pid {holder.pid}"):
            await store.claim_session("s1")
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=WAIT_S)
        claim = await _claimed_once_free(store, "s1")
        await claim.release()
    finally:
        await store.close()


async def _claimed_once_free(store: SessionStore, session_id: str) -> SessionClaim:
    """The claim, once the killed holder's lock is gone (the server notices the dropped
    connection as soon as it reads from it)."""
    for _ in range(WAIT_S * 20):
        try:
            return await store.claim_session(session_id)
        except SessionBusy:
            await asyncio.sleep(0.05)
    raise AssertionError(f"session {session_id} was never free")


async def test_a_run_whose_process_was_killed_shows_as_interrupted_from_another_process(
    postgres_url: str, tmp_path: Path, killed_at_end: list[subprocess.Popen[str]]
) -> None:
    ready = tmp_path / "held"
    holder = child("hold", postgres_url, "s1", str(ready))
    killed_at_end.append(holder)
    await appears(ready, holder)

    store = postgres.session_store(postgres_url)
    try:
        # a live run in another process stays running
        assert [r.status for r in await store.list_runs("s1")] == ["running"]
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=WAIT_S)
        for _ in range(WAIT_S * 20):
            runs = await store.list_runs("s1")
            if runs[0].status != "running":
                break
            await asyncio.sleep(0.05)
        assert [(r.id, r.status, r.reason) for r in runs] == [
            ("run-s1", "interrupted", INTERRUPTED_REASON)
        ]
        # the turn it committed before it was killed is whole
        assert [m.id for m in await store.active_path("s1")] == ["m0"]
    finally:
        await store.close()
    with postgres_admin(postgres_url) as conn:  # written, not only reported
        row = conn.execute("SELECT status FROM soong_agent.runs WHERE id = 'run-s1'").fetchone()
    assert row == ("interrupted",)


def postgres_admin(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True)


async def test_a_sqlite_run_whose_process_was_killed_shows_as_interrupted_too(
    tmp_path: Path, killed_at_end: list[subprocess.Popen[str]]
) -> None:
    db = tmp_path / "sessions.sqlite"
    ready = tmp_path / "held"
    holder = child("hold", str(db), "s1", str(ready))
    killed_at_end.append(holder)
    await appears(ready, holder)
    store = open_store(str(db))
    try:
        assert [r.status for r in await store.list_runs("s1")] == ["running"]
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=WAIT_S)
        assert [r.status for r in await store.list_runs("s1")] == ["interrupted"]
    finally:
        await store.close()


async def test_a_transaction_a_frozen_client_left_open_does_not_hold_up_a_takeover(
    postgres_url: str,
) -> None:
    """A worker stopped (SIGSTOP, a paused VM) half way through a fenced commit holds the run's
    row `FOR SHARE` in a transaction it never ends; the claim of another worker passes over
    locked rows, so the server must end that silent session (after the statement timeout)."""
    settings = PostgresSettings(postgres_url, statement_timeout_ms=500)
    queue = PostgresRunQueue(PostgresDatabase(settings))
    frozen_db = PostgresDatabase(settings)
    try:
        await queue.submit(
            QueuedRun(id="r1", session_id="ses_1", project_dir="/p", message="go", submitted_at=1)
        )
        first = await queue.claim("frozen", ["/p"], lease_s=0.2, max_attempts=3, now=time.time())
        assert first is not None
        conn = await frozen_db.connect()
        await conn.execute("BEGIN")
        await conn.execute(FENCE_HELD, ("r1", first.fence))  # and then nothing more
        taken = None
        deadline = time.monotonic() + 15
        while taken is None and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            taken = await queue.claim(
                "rescuer", ["/p"], lease_s=10, max_attempts=3, now=time.time()
            )
        assert taken is not None, "the frozen client's lock held the run for ever"
        assert taken.worker == "rescuer" and taken.fence == first.fence + 1
        with pytest.raises(psycopg.Error, match="idle-in-transaction"):  # the server ended it
            await conn.execute("SELECT 1")
        await conn.close()
    finally:
        await queue.close()
        await frozen_db.close()


@pytest.mark.parametrize("server_clock", [True, False])
async def test_leases_on_the_servers_clock_hold_against_a_host_whose_clock_runs_ahead(
    postgres_url: str, server_clock: bool
) -> None:
    """Workers on two hosts, one clock an hour ahead: measured by the database server's clock
    (as the runtime's queue is), the first worker's lease holds; measured by the callers'
    clocks, the host ahead would take over a run that is still being worked on."""
    queue = PostgresRunQueue(
        PostgresDatabase(PostgresSettings(postgres_url)), server_clock=server_clock
    )
    try:
        await queue.submit(
            QueuedRun(id="r1", session_id="ses_1", project_dir="/p", message="go", submitted_at=1)
        )
        first = await queue.claim("here", ["/p"], lease_s=30, max_attempts=3, now=time.time())
        assert first is not None
        ahead = time.time() + 3600
        taken = await queue.claim("ahead", ["/p"], lease_s=30, max_attempts=3, now=ahead)
        if server_clock:
            assert taken is None
            assert abs(first.expires_at - (time.time() + 30)) < 10
            renewed = await queue.renew(first, lease_s=30, now=ahead)  # its own clock ahead too
            assert renewed.expires_at < time.time() + 60
        else:
            assert taken is not None and taken.worker == "ahead"
    finally:
        await queue.close()
