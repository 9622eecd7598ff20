"""An orchestrator's pool worker handed to the run queue (AGT-4, WORK-1), against the queue and
store fakes: the queued run carries the worker's lineage, tool cap and budgets; waiting for it
holds no worker slot; a worker run that takes too long is cancelled and said to be; cancelling
the orchestrator cancels its queued worker."""

from __future__ import annotations

import asyncio
import time

import pytest

from soong_agent.application.children.handoff import Handoff
from soong_agent.application.runs.lineage import Lineage
from soong_agent.application.workers.approvals import PARKED
from soong_agent.application.workers.dispatch import QueueHandoff
from soong_agent.domain.run_limits import RunLimits
from soong_agent.testing import InMemoryRunQueue, InMemorySessionStore, SequentialIds

LINEAGE = Lineage(
    kind="worker",
    agent="default_worker_agent",
    depth=1,
    parent_session_id="ses_lead",
    parent_run_id="run_lead",
    parent_call_id="call_1",
    parent_mode="default",
    label="worker builders/w1",
    pool="builders",
    worker="w1",
    task_session_id="ses_lead",
)


class WallClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


def handoff_of(queue: InMemoryRunQueue) -> QueueHandoff:
    return QueueHandoff(queue, InMemorySessionStore(), clock=WallClock(), ids=SequentialIds())


async def test_the_queued_run_carries_the_workers_lineage_cap_and_budgets() -> None:
    queue = InMemoryRunQueue()
    limits = RunLimits(max_tokens=900, max_cost_usd=0.5)
    handed = await handoff_of(queue).hand_off(
        Handoff(LINEAGE, "build the parser", limits, ("read_file",), "/srv/project")
    )
    run = await queue.get(handed.run_id)
    assert run is not None and run.status == "queued" and run.session_id == handed.session_id
    assert run.project_dir == "/srv/project" and run.message == "build the parser"
    opts = run.options
    assert (opts.max_tokens, opts.max_cost_usd, opts.max_wall_ms) == (900, 0.5, None)
    origin = opts.dispatched
    assert origin is not None
    assert (origin.parent_session_id, origin.parent_run_id, origin.parent_call_id) == (
        "ses_lead",
        "run_lead",
        "call_1",
    )
    assert (origin.pool, origin.worker, origin.agent) == ("builders", "w1", "default_worker_agent")
    assert origin.parent_mode == "default" and origin.allowed_tools == ("read_file",)


async def test_a_worker_run_nobody_finishes_in_time_is_cancelled_and_the_wait_holds_no_slot() -> (
    None
):
    queue = InMemoryRunQueue()
    handoff = handoff_of(queue)
    handed = await handoff.hand_off(Handoff(LINEAGE, "never taken", RunLimits(), None, "/p"))
    parks: list[bool] = []
    token = PARKED.set(parks.append)
    try:
        result, timed_out = await handoff.outcome(handed, timeout_s=0.2, cancel_s=1.0)
    finally:
        PARKED.reset(token)
    assert parks == [True, False]  # parked while it waited, and only then
    assert timed_out and result.status == "cancelled"
    assert result.reason and "cancelled" in result.reason
    run = await queue.get(handed.run_id)
    assert run is not None and run.status == "cancelled"


async def test_cancelling_the_orchestrator_cancels_its_queued_worker() -> None:
    queue = InMemoryRunQueue()
    handoff = handoff_of(queue)
    handed = await handoff.hand_off(Handoff(LINEAGE, "long job", RunLimits(), None, "/p"))
    waiting = asyncio.create_task(handoff.outcome(handed, timeout_s=60, cancel_s=1.0))
    await asyncio.sleep(0.05)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    run = await queue.get(handed.run_id)
    assert run is not None and run.status == "cancelled"
