"""The worker's loop (WORK-2) against the run-queue fake, with runs whose ends the test decides:
every queued run of a served project is run once and its end recorded; a project nobody serves
stays queued; a run taken over by another worker is cancelled and its end is not recorded by
the old holder; `runs cancel` reaches a running run through the heartbeat; stopping gives a run
that does not end in time back to the queue; a session someone runs by hand sends the run back
to wait its turn."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from soong_agent.adapters.inmemory.run_queue import InMemoryRunQueue
from soong_agent.application.runs.handle import Run, RunResult
from soong_agent.application.workers.approvals import PARKED
from soong_agent.application.workers.worker import AlreadyEnded, Worker, WorkerSettings
from soong_agent.ports.run_queue import Lease, QueuedRun
from soong_agent.ports.storage import SessionBusy
from soong_agent.testing import FixedClock

PROJECT = "/srv/project"
WAIT_S = 30.0


def queued(n: int, project: str = PROJECT) -> QueuedRun:
    return QueuedRun(
        id=f"run_{n:04d}", session_id=f"ses_{n:04d}", project_dir=project, message=f"task {n}"
    )


class Runs:
    """Starts a `Run` per claimed lease whose body the test scripts by message."""

    def __init__(self) -> None:
        self.started: list[tuple[str, int, bool]] = []
        self.bodies: dict[str, Callable[[], Awaitable[RunResult]]] = {}
        self.refuse: dict[str, Exception] = {}

    async def start(self, lease: Lease, fence_only: bool) -> Run:
        queued = lease.run
        self.started.append((queued.id, lease.fence, fence_only))
        problem = self.refuse.pop(queued.id, None)
        if problem is not None:
            raise problem
        run = Run(session_id=queued.session_id, run_id=queued.id, cancel_timeout_s=5.0)
        body = self.bodies.get(queued.id)

        async def finished() -> RunResult:
            return RunResult(queued.session_id, queued.id, "completed", final_text="done")

        run.attach(asyncio.create_task((body or finished)()))
        return run


def settings(**overrides: object) -> WorkerSettings:
    values: dict[str, object] = {
        "worker_id": "w1",
        "projects": (PROJECT,),
        "concurrency": 2,
        "lease_s": 30.0,
        "heartbeat_s": 0.01,
        "max_attempts": 3,
        "cancel_timeout_s": 0.2,
        "idle_poll_s": 0.02,
    }
    values.update(overrides)
    return WorkerSettings(**values)  # type: ignore[arg-type]


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    async def poll() -> None:
        while not await check():
            await asyncio.sleep(0.005)

    await asyncio.wait_for(poll(), WAIT_S)


async def status_of(queue: InMemoryRunQueue, run_id: str) -> str:
    run = await queue.get(run_id)
    assert run is not None
    return run.status


async def test_every_queued_run_of_a_served_project_runs_once() -> None:
    queue, runs, clock = InMemoryRunQueue(), Runs(), FixedClock()
    for n in range(5):
        await queue.submit(queued(n))
    await queue.submit(queued(9, project="/srv/elsewhere"))

    async def failing() -> RunResult:
        return RunResult("ses_0003", "run_0003", "max_turns", reason="10 turns")

    runs.bodies["run_0003"] = failing
    worker = Worker(queue, runs.start, clock, settings())
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.serve(stop))

    async def all_ended() -> bool:
        return all([(await queue.get(f"run_{n:04d}")).ended for n in range(5)])  # type: ignore[union-attr]

    await until(all_ended)
    stop.set()
    tally = await asyncio.wait_for(serving, WAIT_S)
    assert sorted(r for r, _, _ in runs.started) == [f"run_{n:04d}" for n in range(5)]
    assert tally.finished == {"completed": 4, "failed": 1}
    failed = await queue.get("run_0003")
    assert failed is not None and failed.reason == "max_turns: 10 turns"
    assert await status_of(queue, "run_0009") == "queued"  # nobody serves its project


async def test_a_run_taken_over_is_cancelled_and_its_end_left_to_the_new_holder() -> None:
    queue, runs, clock = InMemoryRunQueue(), Runs(), FixedClock()
    await queue.submit(queued(1))
    cancelled = asyncio.Event()

    async def long() -> RunResult:
        try:
            await asyncio.sleep(WAIT_S)
        except asyncio.CancelledError:
            cancelled.set()
            return RunResult("ses_0001", "run_0001", "cancelled")
        return RunResult("ses_0001", "run_0001", "completed")

    runs.bodies["run_0001"] = long
    worker = Worker(queue, runs.start, clock, settings(lease_s=10.0))
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.serve(stop))
    await until(lambda: _started(runs))
    clock.advance(11.0)  # the first worker's lease has run out: another takes the run over
    other = await queue.claim("w2", [PROJECT], lease_s=10.0, max_attempts=3, now=clock.now())
    assert other is not None and other.fence == 2
    await asyncio.wait_for(cancelled.wait(), WAIT_S)
    stop.set()
    tally = await asyncio.wait_for(serving, WAIT_S)
    assert tally.lost == 1 and tally.finished == {}
    run = await queue.get("run_0001")
    assert run is not None and run.status == "running" and run.worker == "w2"


async def test_runs_cancel_reaches_the_worker_through_its_heartbeat() -> None:
    queue, runs, clock = InMemoryRunQueue(), Runs(), FixedClock()
    await queue.submit(queued(1))

    async def long() -> RunResult:
        try:
            await asyncio.sleep(WAIT_S)
        except asyncio.CancelledError:
            return RunResult("ses_0001", "run_0001", "cancelled", reason="cancelled")
        return RunResult("ses_0001", "run_0001", "completed")

    runs.bodies["run_0001"] = long
    worker = Worker(queue, runs.start, clock, settings())
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.serve(stop))
    await until(lambda: _started(runs))
    asked = await queue.cancel("run_0001", now=clock.now())
    assert asked.status == "running" and asked.cancel_requested

    async def ended() -> bool:
        return await status_of(queue, "run_0001") == "cancelled"

    await until(ended)
    stop.set()
    assert (await asyncio.wait_for(serving, WAIT_S)).finished == {"cancelled": 1}


async def test_stopping_gives_back_a_run_that_does_not_end_in_time() -> None:
    queue, runs, clock = InMemoryRunQueue(), Runs(), FixedClock()
    await queue.submit(queued(1))

    async def stubborn() -> RunResult:
        await asyncio.sleep(WAIT_S)
        return RunResult("ses_0001", "run_0001", "completed")

    runs.bodies["run_0001"] = stubborn
    worker = Worker(queue, runs.start, clock, settings(cancel_timeout_s=0.05))
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.serve(stop))
    await until(lambda: _started(runs))
    stop.set()
    tally = await asyncio.wait_for(serving, WAIT_S)
    assert tally.released == 1
    run = await queue.get("run_0001")
    assert run is not None and run.status == "queued"


async def test_a_session_run_by_hand_sends_the_first_attempt_back_to_wait() -> None:
    queue, runs, clock = InMemoryRunQueue(), Runs(), FixedClock()
    await queue.submit(queued(1))
    runs.refuse["run_0001"] = SessionBusy("ses_0001", holder="pid 42")
    worker = Worker(queue, runs.start, clock, settings())
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.serve(stop))

    async def ran_twice() -> bool:
        return len(runs.started) >= 2 and await status_of(queue, "run_0001") == "completed"

    await until(ran_twice)
    stop.set()
    tally = await asyncio.wait_for(serving, WAIT_S)
    assert tally.released == 1 and tally.finished == {"completed": 1}
    assert [fence_only for _, _, fence_only in runs.started[:2]] == [False, False]


@pytest.mark.parametrize("bad", [{"concurrency": 0}, {"projects": ()}])
def test_a_worker_needs_a_slot_and_a_project(bad: dict[str, object]) -> None:
    from soong_agent.ports.errors import UsageError

    with pytest.raises(UsageError):
        Worker(InMemoryRunQueue(), Runs().start, FixedClock(), settings(**bad))


async def _started(runs: Runs) -> bool:
    return bool(runs.started)


async def test_a_run_found_ended_in_its_session_is_recorded_not_run() -> None:
    queue, runs, clock = InMemoryRunQueue(), Runs(), FixedClock()
    await queue.submit(queued(1))
    await queue.submit(queued(2))
    runs.refuse["run_0001"] = AlreadyEnded("completed", "")
    runs.refuse["run_0002"] = AlreadyEnded("max_turns", "10 turns")
    worker = Worker(queue, runs.start, clock, settings())
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.serve(stop))

    async def both_ended() -> bool:
        return all([(await queue.get(f"run_000{n}")).ended for n in (1, 2)])  # type: ignore[union-attr]

    await until(both_ended)
    stop.set()
    assert (await asyncio.wait_for(serving, WAIT_S)).finished == {"completed": 1, "failed": 1}
    failed = await queue.get("run_0002")
    assert failed is not None and failed.reason == "max_turns: 10 turns"


async def test_a_run_waiting_for_an_approval_holds_no_slot() -> None:
    queue, runs, clock = InMemoryRunQueue(), Runs(), FixedClock()
    await queue.submit(queued(1))
    await queue.submit(queued(2))
    answered = asyncio.Event()

    async def asks() -> RunResult:
        parked = PARKED.get()  # as the durable approver does while it waits for an answer
        assert parked is not None
        parked(True)
        await answered.wait()
        parked(False)
        return RunResult("ses_0001", "run_0001", "completed")

    runs.bodies["run_0001"] = asks
    worker = Worker(queue, runs.start, clock, settings(concurrency=1))
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.serve(stop))

    async def second_done() -> bool:
        return await status_of(queue, "run_0002") == "completed"

    await until(second_done)  # taken while the first waits, though one slot only
    assert await status_of(queue, "run_0001") == "running"
    answered.set()

    async def first_done() -> bool:
        return await status_of(queue, "run_0001") == "completed"

    await until(first_done)
    stop.set()
    assert (await asyncio.wait_for(serving, WAIT_S)).finished == {"completed": 2}


async def test_what_follows_a_run_holds_no_slot_and_its_end_is_recorded_after_it() -> None:
    """A lead's run ended; its teammates still work (`after`): the run stays running in the
    queue until they are done, and the worker's only slot serves another run meanwhile."""
    queue, runs, clock = InMemoryRunQueue(), Runs(), FixedClock()
    await queue.submit(queued(1))
    await queue.submit(queued(2))
    teammates_done = asyncio.Event()
    followed: list[str] = []

    async def after(lease: Lease, run: Run) -> None:
        followed.append(lease.run.id)
        if lease.run.id == "run_0001":
            await teammates_done.wait()

    worker = Worker(queue, runs.start, clock, settings(concurrency=1), after=after)
    stop = asyncio.Event()
    serving = asyncio.create_task(worker.serve(stop))

    async def second_done() -> bool:
        return await status_of(queue, "run_0002") == "completed"

    await until(second_done)
    assert await status_of(queue, "run_0001") == "running"  # its teammates are not done
    teammates_done.set()

    async def first_done() -> bool:
        return await status_of(queue, "run_0001") == "completed"

    await until(first_done)
    stop.set()
    assert (await asyncio.wait_for(serving, WAIT_S)).finished == {"completed": 2}
    assert sorted(followed) == ["run_0001", "run_0002"]
