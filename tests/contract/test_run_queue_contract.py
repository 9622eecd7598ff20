"""The RunQueue contract, run against the InMemoryRunQueue fake, the SqliteRunQueue on a real file
and the PostgresRunQueue on a real PostgreSQL (`tests/support/postgres.py`): a submitted run is
queued and read back; a claim takes the oldest run of the projects it serves and leaves others'
runs queued; a lease is renewed, taken over once it has run out (fence and attempts up by one),
and the old holder is refused everything after; `max_attempts` ends a run failed with a reason;
a release puts the run back without counting the attempt; a cancel ends a queued run at once and
reaches a running one's holder through its renew; `finish` ends a run. Two processes claiming
from one queue each get a different run, every run exactly once (SQLite, PostgreSQL); a wait for
work is woken by a submit from another connection or process and times out when nothing
happens."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from soong_agent.adapters.postgres import PostgresDatabase, PostgresSettings
from soong_agent.adapters.postgres.run_queue import PostgresRunQueue
from soong_agent.adapters.storage.run_queue import SqliteRunQueue
from soong_agent.ports.errors import UsageError
from soong_agent.ports.run_queue import (
    Dispatched,
    Lease,
    LeaseLost,
    QueuedRun,
    RunNotQueued,
    RunOptions,
    RunQueue,
)
from soong_agent.testing import InMemoryRunQueue

T0 = 1_700_000_000.0
P1, P2, ELSEWHERE = "/work/p1", "/work/p2", "/work/nobody-serves-this"
WAIT_S = 60.0  # the longest a wait that must be woken could take: it returns long before


class Backend:
    """One queue, and a way to open another over the same runs (another connection, as
    another process has; the fake has only itself)."""

    def __init__(self, kind: str, where: str, open_queue: Callable[[], RunQueue]) -> None:
        self.kind = kind
        self.where = where
        self._open = open_queue
        self.opened: list[RunQueue] = []
        self.queue = self.other()

    def other(self) -> RunQueue:
        queue = self._open()
        self.opened.append(queue)
        return queue


def open_queue(kind: str, where: str) -> RunQueue:
    """A queue of `kind` over `where` (a SQLite file or a PostgreSQL URL)."""
    if kind == "sqlite":
        return SqliteRunQueue(Path(where))
    return PostgresRunQueue(PostgresDatabase(PostgresSettings(where)))


def make_backend(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    if kind == "inmemory":
        fake = InMemoryRunQueue()
        return Backend(kind, "", lambda: fake)
    if kind == "sqlite":
        where = str(tmp_path / "db" / "sessions.sqlite")
    else:
        where = str(request.getfixturevalue("postgres_url"))
    return Backend(kind, where, lambda: open_queue(kind, where))


@pytest.fixture(params=["inmemory", "sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    made = make_backend(request.param, tmp_path, request)
    yield made
    for queue in made.opened:
        await queue.close()


@pytest.fixture
def queue(backend: Backend) -> RunQueue:
    return backend.queue


def queued(
    rid: str, project: str = P1, *, at: float = T0, session_id: str = "", **kw: Any
) -> QueuedRun:
    return QueuedRun(
        id=rid,
        session_id=session_id or f"ses_{rid}",
        project_dir=project,
        message=f"do {rid}",
        submitted_at=at,
        **kw,
    )


async def claim(
    queue: RunQueue,
    worker: str = "w1",
    projects: tuple[str, ...] = (P1,),
    *,
    now: float = T0,
    lease_s: float = 10.0,
    max_attempts: int = 3,
) -> Lease | None:
    return await queue.claim(worker, projects, lease_s=lease_s, max_attempts=max_attempts, now=now)


async def held(queue: RunQueue, worker: str = "w1", *, now: float = T0, **kw: Any) -> Lease:
    lease = await claim(queue, worker, now=now, **kw)
    assert lease is not None
    return lease


# --- submit, get, list ---------------------------------------------------------------------------


def test_every_backend_implements_the_port(queue: RunQueue) -> None:
    assert isinstance(queue, RunQueue)


async def test_a_submitted_run_is_queued_and_read_back(queue: RunQueue) -> None:
    options = RunOptions(
        agent="coder",
        plan_mode=True,
        max_turns=7,
        max_cost_usd=1.5,
        trace_parent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    )
    given = queued("r1", options=options, status="running", attempts=4, fence=9, reason="x")
    stored = await queue.submit(given)
    assert stored == queued("r1", options=options)  # state reset: queued, never claimed
    assert await queue.get("r1") == stored
    assert await queue.get("nope") is None


async def test_a_dispatched_workers_origin_is_read_back_as_given(queue: RunQueue) -> None:
    origin = Dispatched(
        parent_session_id="ses_lead",
        parent_run_id="run_lead",
        parent_call_id="call_1",
        parent_mode="plan",
        pool="builders",
        worker="w1",
        agent="default_worker_agent",
        task_session_id="ses_lead",
        depth=2,
        allowed_tools=("read_file", "grep"),
    )
    options = RunOptions(max_tokens=500, dispatched=origin)
    await queue.submit(queued("child", options=options))
    back = await queue.get("child")
    assert back is not None and back.options == options
    assert back.options.dispatched == origin


async def test_list_is_newest_first_filtered_by_status_and_limited(queue: RunQueue) -> None:
    for i, rid in enumerate(["a", "b", "c", "d"]):
        await queue.submit(queued(rid, at=T0 + i))
    await queue.cancel("b", now=T0 + 10)
    assert [r.id for r in await queue.list()] == ["d", "c", "b", "a"]
    assert [r.id for r in await queue.list(limit=2)] == ["d", "c"]
    assert [r.id for r in await queue.list(status="queued")] == ["d", "c", "a"]
    assert [r.id for r in await queue.list(status="cancelled")] == ["b"]
    assert list(await queue.list(status="running")) == []
    assert list(await queue.list(limit=0)) == []


async def test_a_second_submit_of_an_id_is_refused_and_changes_nothing(queue: RunQueue) -> None:
    first = await queue.submit(queued("r1"))
    with pytest.raises(UsageError, match="'r1' is queued already"):
        await queue.submit(queued("r1", P2, at=T0 + 5))
    assert await queue.get("r1") == first


@pytest.mark.parametrize("field", ["id", "session_id", "project_dir"])
async def test_a_run_without_id_session_or_project_is_refused(queue: RunQueue, field: str) -> None:
    run = queued("r1")
    with pytest.raises(UsageError, match=field.replace("_", " ")):
        await queue.submit(QueuedRun(**{**_fields(run), field: ""}))
    assert list(await queue.list()) == []


def _fields(run: QueuedRun) -> dict[str, Any]:
    return {name: getattr(run, name) for name in QueuedRun.__dataclass_fields__}


# --- claims ---------------------------------------------------------------------------------------


async def test_a_claim_takes_the_oldest_run_of_the_served_projects_only(queue: RunQueue) -> None:
    await queue.submit(queued("newer", P1, at=T0 + 2))
    await queue.submit(queued("other", P2, at=T0))
    await queue.submit(queued("older", P1, at=T0 + 1))
    first = await held(queue, now=T0 + 3, lease_s=10)
    assert first.run.id == "older"
    assert (first.worker, first.fence, first.expires_at) == ("w1", 1, T0 + 13)
    assert first.run.status == "running"
    assert (first.run.worker, first.run.attempts, first.run.fence) == ("w1", 1, 1)
    assert first.run.lease_expires_at == T0 + 13
    assert (await held(queue, now=T0 + 3)).run.id == "newer"
    assert await claim(queue, now=T0 + 3) is None
    assert (await queue.get("other")).status == "queued"  # type: ignore[union-attr]
    both = await claim(queue, "w2", (P1, P2), now=T0 + 3)
    assert both is not None and both.run.id == "other"


async def test_a_run_of_a_project_nobody_serves_stays_queued(queue: RunQueue) -> None:
    await queue.submit(queued("lonely", ELSEWHERE))
    assert await claim(queue, projects=(P1, P2), now=T0 + 100) is None
    assert await claim(queue, projects=(), now=T0 + 100) is None
    run = await queue.get("lonely")
    assert run is not None
    assert (run.status, run.attempts, run.worker) == ("queued", 0, None)


async def test_a_claim_with_bad_arguments_is_refused(queue: RunQueue) -> None:
    with pytest.raises(UsageError, match="worker"):
        await claim(queue, "")
    with pytest.raises(UsageError, match="lease"):
        await claim(queue, lease_s=0)
    with pytest.raises(UsageError, match="max_attempts"):
        await claim(queue, max_attempts=0)


async def test_renew_extends_the_lease(queue: RunQueue) -> None:
    await queue.submit(queued("r1"))
    lease = await held(queue, now=T0, lease_s=10)
    renewed = await queue.renew(lease, lease_s=30, now=T0 + 5)
    assert (renewed.fence, renewed.expires_at, renewed.worker) == (1, T0 + 35, "w1")
    assert renewed.run.lease_expires_at == T0 + 35 and not renewed.run.cancel_requested
    # past the first lease's end but not the renewed one's: nobody takes it over
    assert await claim(queue, "w2", now=T0 + 20) is None
    assert (await queue.get("r1")).worker == "w1"  # type: ignore[union-attr]


async def test_an_expired_lease_is_taken_over_and_the_old_holder_refused(queue: RunQueue) -> None:
    await queue.submit(queued("r1"))
    old = await held(queue, "w1", now=T0, lease_s=10)
    assert await claim(queue, "w2", now=T0 + 9) is None  # still held
    new = await held(queue, "w2", now=T0 + 10, lease_s=10)
    assert (new.run.id, new.fence, new.run.attempts, new.worker) == ("r1", 2, 2, "w2")
    with pytest.raises(LeaseLost, match="fence 1"):
        await queue.renew(old, lease_s=10, now=T0 + 11)
    with pytest.raises(LeaseLost):
        await queue.finish(old, "completed", now=T0 + 11)
    with pytest.raises(LeaseLost):
        await queue.release(old, now=T0 + 11)
    assert (await queue.renew(new, lease_s=10, now=T0 + 12)).expires_at == T0 + 22
    run = await queue.get("r1")
    assert run is not None and (run.status, run.worker, run.fence) == ("running", "w2", 2)


async def test_max_attempts_ends_the_run_failed_with_a_reason(queue: RunQueue) -> None:
    await queue.submit(queued("r1"))
    first = await held(queue, now=T0, max_attempts=2)
    second = await held(queue, "w2", now=T0 + 10, max_attempts=2)
    assert second.run.attempts == 2
    assert await claim(queue, "w3", now=T0 + 20, max_attempts=2) is None
    run = await queue.get("r1")
    assert run is not None
    assert (run.status, run.finished_at, run.attempts) == ("failed", T0 + 20, 2)
    assert "max_attempts 2" in run.reason
    for lease in (first, second):
        with pytest.raises(LeaseLost):
            await queue.renew(lease, lease_s=10, now=T0 + 21)


async def test_release_puts_the_run_back_without_counting_the_attempt(queue: RunQueue) -> None:
    await queue.submit(queued("r1"))
    lease = await held(queue, now=T0)
    back = await queue.release(lease, now=T0 + 1)
    assert (back.status, back.attempts, back.lease_expires_at) == ("queued", 0, None)
    with pytest.raises(LeaseLost):
        await queue.renew(lease, lease_s=10, now=T0 + 2)
    again = await held(queue, "w2", now=T0 + 2, max_attempts=1)  # released: never counted
    assert (again.run.attempts, again.fence) == (1, 2)


async def test_finish_ends_the_run(queue: RunQueue) -> None:
    await queue.submit(queued("r1"))
    lease = await held(queue, now=T0)
    with pytest.raises(UsageError, match="cannot finish as 'running'"):
        await queue.finish(lease, "running", now=T0 + 1)
    ended = await queue.finish(lease, "failed", reason="budget exhausted", now=T0 + 4)
    assert (ended.status, ended.reason, ended.finished_at) == ("failed", "budget exhausted", T0 + 4)
    assert ended.lease_expires_at is None and ended.ended
    assert await queue.get("r1") == ended
    with pytest.raises(LeaseLost):
        await queue.finish(lease, "completed", now=T0 + 5)
    assert await claim(queue, now=T0 + 100) is None  # an ended run is never claimed


# --- cancel ---------------------------------------------------------------------------------------


async def test_cancel_of_a_queued_run_ends_it_at_once(queue: RunQueue) -> None:
    await queue.submit(queued("r1"))
    cancelled = await queue.cancel("r1", now=T0 + 3)
    assert (cancelled.status, cancelled.finished_at) == ("cancelled", T0 + 3)
    assert cancelled.reason
    assert await claim(queue, now=T0 + 4) is None
    assert await queue.cancel("r1", now=T0 + 9) == cancelled  # ended: as it is
    with pytest.raises(RunNotQueued, match="'nope'"):
        await queue.cancel("nope", now=T0)


async def test_cancel_of_a_running_run_reaches_its_holder_through_renew(queue: RunQueue) -> None:
    await queue.submit(queued("r1"))
    lease = await held(queue, now=T0)
    asked = await queue.cancel("r1", now=T0 + 1)
    assert (asked.status, asked.cancel_requested) == ("running", True)
    renewed = await queue.renew(lease, lease_s=10, now=T0 + 2)
    assert renewed.run.cancel_requested
    ended = await queue.finish(renewed, "cancelled", reason="cancelled", now=T0 + 3)
    assert ended.status == "cancelled"


async def test_a_cancel_asked_of_a_run_is_honoured_when_it_is_released(queue: RunQueue) -> None:
    await queue.submit(queued("r1"))
    lease = await held(queue, now=T0)
    await queue.cancel("r1", now=T0 + 1)
    back = await queue.release(lease, now=T0 + 2)
    assert (back.status, back.finished_at) == ("cancelled", T0 + 2)


async def test_a_cancelled_run_whose_holder_vanished_is_not_taken_over(queue: RunQueue) -> None:
    await queue.submit(queued("r1"))
    await held(queue, now=T0, lease_s=10)
    await queue.cancel("r1", now=T0 + 1)
    assert await claim(queue, "w2", now=T0 + 11) is None
    run = await queue.get("r1")
    assert run is not None and (run.status, run.attempts) == ("cancelled", 1)


# --- waiting for work -----------------------------------------------------------------------------


async def test_a_wait_times_out_when_nothing_happens(queue: RunQueue) -> None:
    await queue.submit(queued("r1"))
    await held(queue, now=T0)
    assert await claim(queue, now=T0) is None
    assert await queue.wait_for_work(0.3) is False
    assert await queue.wait_for_work(0) is False


async def test_a_submit_from_another_connection_wakes_the_wait(backend: Backend) -> None:
    queue, other = backend.queue, backend.other()
    assert await claim(queue, now=T0) is None
    waiting = asyncio.create_task(queue.wait_for_work(WAIT_S))
    await asyncio.sleep(0)
    await other.submit(queued("r1"))
    assert await waiting is True
    assert (await held(queue, now=T0)).run.id == "r1"


async def test_what_happened_since_the_last_claim_ends_the_next_wait_at_once(
    backend: Backend,
) -> None:
    queue, other = backend.queue, backend.other()
    await queue.submit(queued("r1"))
    lease = await held(queue, now=T0)
    await other.submit(queued("r2"))  # while the worker was busy
    assert await queue.wait_for_work(WAIT_S) is True
    await held(queue, now=T0)
    await queue.release(lease, now=T0 + 1)  # a release wakes too
    assert await queue.wait_for_work(WAIT_S) is True
    await claim(queue, now=T0 + 2)
    await other.submit(queued("r3", ELSEWHERE))
    await other.cancel("r3", now=T0 + 3)  # and a cancel
    assert await queue.wait_for_work(WAIT_S) is True


async def test_a_closed_queue_refuses_every_call(queue: RunQueue) -> None:
    await queue.submit(queued("r1"))
    await queue.close()
    await queue.close()  # a second close does nothing
    for call in (
        queue.submit(queued("r2")),
        queue.get("r1"),
        queue.list(),
        queue.cancel("r1", now=T0),
        claim(queue),
        queue.wait_for_work(0),
    ):
        with pytest.raises(UsageError, match="closed"):
            await call


# --- several processes ----------------------------------------------------------------------------

RUNS = 40


def _claim_all(kind: str, where: str, worker: str, out: str, go: Any) -> None:
    """A child process: claim and finish runs of P1 until none is left."""
    asyncio.run(_claim_loop(kind, where, worker, Path(out), go))


async def _claim_loop(kind: str, where: str, worker: str, out: Path, go: Any) -> None:
    queue = open_queue(kind, where)
    claimed: list[str] = []
    try:
        await queue.list(limit=1)  # connected before the start
        go.wait(60)
        while (lease := await claim(queue, worker, now=time.time(), lease_s=600)) is not None:
            claimed.append(lease.run.id)
            await queue.finish(lease, "completed", reason=worker, now=time.time())
    finally:
        await queue.close()
    out.write_text(json.dumps(claimed))


async def test_two_processes_claiming_at_once_get_each_run_exactly_once(
    backend: Backend, tmp_path: Path
) -> None:
    if backend.kind == "inmemory":
        pytest.skip("the fake lives in one process")
    queue = backend.queue
    for i in range(RUNS):
        await queue.submit(queued(f"r{i:03}", at=T0 + i))
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    outs = [tmp_path / f"w{n}.json" for n in range(2)]
    workers = [
        context.Process(
            target=_claim_all, args=(backend.kind, backend.where, f"w{n}", str(out), go)
        )
        for n, out in enumerate(outs)
    ]
    for worker in workers:
        worker.start()
    go.set()
    for worker in workers:
        await asyncio.to_thread(worker.join, 120)
        assert worker.exitcode == 0
    claimed = [json.loads(out.read_text()) for out in outs]
    every = claimed[0] + claimed[1]
    assert sorted(every) == [f"r{i:03}" for i in range(RUNS)]  # each exactly once
    runs = await queue.list(limit=RUNS)
    assert {r.status for r in runs} == {"completed"}
    assert {r.id: r.reason for r in runs} == {
        rid: f"w{n}" for n, ids in enumerate(claimed) for rid in ids
    }
    assert all(r.attempts == 1 and r.fence == 1 for r in runs)


def _submit_one(kind: str, where: str, rid: str) -> None:
    """A child process: submit one run."""

    async def submit() -> None:
        queue = open_queue(kind, where)
        try:
            await queue.submit(queued(rid))
        finally:
            await queue.close()

    asyncio.run(submit())


async def test_a_submit_from_another_process_wakes_the_wait(backend: Backend) -> None:
    if backend.kind == "inmemory":
        pytest.skip("the fake lives in one process")
    queue = backend.queue
    assert await claim(queue, now=T0) is None
    waiting = asyncio.create_task(queue.wait_for_work(WAIT_S))
    child = multiprocessing.get_context("spawn").Process(
        target=_submit_one, args=(backend.kind, backend.where, "from-child")
    )
    child.start()
    await asyncio.to_thread(child.join, 120)
    assert child.exitcode == 0
    assert await waiting is True
    assert (await held(queue, now=T0)).run.id == "from-child"


async def test_a_postgres_wait_is_woken_by_the_notification_alone(postgres_url: str) -> None:
    import psycopg

    from soong_agent.adapters.postgres.queue_sql import CHANNEL

    queue = PostgresRunQueue(PostgresDatabase(PostgresSettings(postgres_url)), fallback_poll_s=600)
    try:
        assert await claim(queue, now=T0) is None  # listening from here on
        waiting = asyncio.create_task(queue.wait_for_work(WAIT_S))
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as conn:
            await conn.execute(f"NOTIFY {CHANNEL}")
        assert await waiting is True  # no poll for ten minutes: the NOTIFY woke it
    finally:
        await queue.close()


async def test_a_run_whose_session_another_run_holds_waits_behind_it(queue: RunQueue) -> None:
    """Two runs of one session: while the first is held under a live lease, a claim passes
    the second (it would only be refused) and takes the next session's run."""
    await queue.submit(queued("first", session_id="ses_same", at=T0))
    await queue.submit(queued("second", session_id="ses_same", at=T0 + 1))
    await queue.submit(queued("other", at=T0 + 2))
    first = await held(queue, "w1", now=T0 + 3)
    assert first.run.id == "first"
    assert (await held(queue, "w2", now=T0 + 4)).run.id == "other"
    assert await claim(queue, "w3", now=T0 + 5) is None
    await queue.finish(first, "completed", now=T0 + 6)
    assert (await held(queue, "w3", now=T0 + 7)).run.id == "second"
