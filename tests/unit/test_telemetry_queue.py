"""Trace context of queued runs (OBS-1) against the fakes: a pool worker an orchestrator queues
carries the trace of the call that queued it; the stored options keep a traceparent and drop a
malformed one."""

from __future__ import annotations

import time

from soong_agent.adapters.run_queue_rules import options_from_json, options_json
from soong_agent.application.children.handoff import Handoff
from soong_agent.application.runs.lineage import Lineage
from soong_agent.application.workers.dispatch import QueueHandoff
from soong_agent.domain.run_limits import RunLimits
from soong_agent.ports.events import ToolCallRequested
from soong_agent.ports.run_queue import RunOptions
from soong_agent.testing import (
    InMemoryRunQueue,
    InMemorySessionStore,
    RecordingTelemetry,
    SequentialIds,
)

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
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class WallClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


async def test_a_queued_pool_worker_carries_the_trace_of_the_call_that_queued_it() -> None:
    telemetry = RecordingTelemetry()
    telemetry.continue_trace("run_lead", TRACEPARENT)  # the lead itself was a queued run
    lead = telemetry.observer("ses_lead", "run_lead")
    lead.emit(
        ToolCallRequested(
            seq=1,
            run_id="run_lead",
            session_id="ses_lead",
            at=1.0,
            call_id="call_1",
            name="dispatch_worker",
            arguments="{}",
        )
    )
    queue = InMemoryRunQueue()
    handoff = QueueHandoff(
        queue, InMemorySessionStore(), clock=WallClock(), ids=SequentialIds(), telemetry=telemetry
    )
    handed = await handoff.hand_off(Handoff(LINEAGE, "build it", RunLimits(), None, "/p"))
    run = await queue.get(handed.run_id)
    assert run is not None
    expected = telemetry.trace_parent(run_id="run_lead", call_id="call_1")
    assert run.options.trace_parent == expected
    assert expected.split("-")[1] == TRACEPARENT.split("-")[1]  # the lead's trace


async def test_without_telemetry_a_queued_run_carries_no_trace() -> None:
    queue = InMemoryRunQueue()
    handoff = QueueHandoff(queue, InMemorySessionStore(), clock=WallClock(), ids=SequentialIds())
    handed = await handoff.hand_off(Handoff(LINEAGE, "build it", RunLimits(), None, "/p"))
    run = await queue.get(handed.run_id)
    assert run is not None and run.options.trace_parent is None


def test_the_stored_options_keep_the_traceparent_and_drop_a_malformed_one() -> None:
    options = RunOptions(agent="coder", trace_parent=TRACEPARENT)
    assert options_from_json(options_json(options)) == options
    assert options_from_json('{"agent": "coder", "trace_parent": 42}') == RunOptions(agent="coder")
    assert options_from_json('{"agent": "coder"}').trace_parent is None  # stored before OBS-1
