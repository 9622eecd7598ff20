"""The Telemetry contract (OBS-1): RecordingTelemetry and OtelTelemetry (over the OpenTelemetry
SDK with in-memory exporters) take a run's events without raising, hand out W3C traceparents,
continue a trace they are given (ignoring a malformed one), and close."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from soong_agent.adapters.telemetry import OtelTelemetry
from soong_agent.ports.events import (
    EventSink,
    ModelCallStarted,
    PermissionDecided,
    RunEvent,
    RunFinished,
    RunStarted,
    TextDeltaEvent,
    ToolCallRequested,
    ToolResultEvent,
    UsageEvent,
)
from soong_agent.ports.streaming import Usage
from soong_agent.ports.telemetry import Telemetry
from soong_agent.testing import RecordingTelemetry

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")
GIVEN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
T0 = 1_700_000_000.0


def _otel() -> Telemetry:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return OtelTelemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)


KINDS: dict[str, Callable[[], Telemetry]] = {"fake": RecordingTelemetry, "otel": _otel}


@pytest.fixture(params=sorted(KINDS))
def telemetry(request: pytest.FixtureRequest) -> Telemetry:
    return KINDS[request.param]()


def events(run_id: str, *, finished: bool = True) -> list[RunEvent]:
    base = {"run_id": run_id, "session_id": "ses-1"}
    out: list[RunEvent] = [
        RunStarted(
            seq=1, at=T0, project_dir="/p", model="openai m at http://x", message="hi", **base
        ),
        ModelCallStarted(seq=2, at=T0 + 0.1, turn=1, messages=1, **base),
        TextDeltaEvent(seq=3, at=T0 + 0.2, text="ok", **base),
        UsageEvent(seq=4, at=T0 + 0.3, model="openai m", usage=Usage(input_tokens=3), **base),
        ToolCallRequested(
            seq=5, at=T0 + 0.4, call_id="c1", name="read_file", arguments="{}", **base
        ),
        PermissionDecided(
            seq=6,
            at=T0 + 0.5,
            call_id="c1",
            tool="read_file",
            decision="deny",
            reason="rule",
            **base,
        ),
    ]
    if finished:
        out += [
            ToolResultEvent(
                seq=7, at=T0 + 0.6, call_id="c1", name="read_file", content="x", **base
            ),
            RunFinished(seq=8, at=T0 + 0.7, status="completed", **base),
        ]
    return out


def test_it_implements_the_port(telemetry: Telemetry) -> None:
    assert isinstance(telemetry, Telemetry)
    assert isinstance(telemetry.observer("ses-1", "run-1"), EventSink)


def test_an_observer_takes_a_whole_run(telemetry: Telemetry) -> None:
    sink = telemetry.observer("ses-1", "run-1")
    for event in events("run-1"):
        sink.emit(event)


def test_a_submission_gets_a_traceparent_of_a_trace_of_its_own(telemetry: Telemetry) -> None:
    one, two = telemetry.trace_parent(), telemetry.trace_parent()
    assert TRACEPARENT.match(one) and TRACEPARENT.match(two)
    assert one.split("-")[1] != two.split("-")[1]


def test_a_call_in_progress_hands_out_its_trace(telemetry: Telemetry) -> None:
    telemetry.continue_trace("run-2", GIVEN)
    sink = telemetry.observer("ses-1", "run-2")
    for event in events("run-2", finished=False):
        sink.emit(event)
    handed = telemetry.trace_parent(run_id="run-2", call_id="c1")
    assert TRACEPARENT.match(handed)
    assert handed.split("-")[1] == GIVEN.split("-")[1]  # the trace the run continued
    assert handed.split("-")[2] != GIVEN.split("-")[2]  # under the call's own span


@pytest.mark.parametrize("bad", ["", "garbage", "00-" + "0" * 32 + "-00f067aa0ba902b7-01"])
def test_a_malformed_traceparent_is_ignored(telemetry: Telemetry, bad: str) -> None:
    telemetry.continue_trace("run-3", bad)
    sink = telemetry.observer("ses-1", "run-3")
    for event in events("run-3", finished=False):
        sink.emit(event)
    handed = telemetry.trace_parent(run_id="run-3", call_id="c1")
    assert TRACEPARENT.match(handed) and handed.split("-")[1] != "0" * 32


def test_workers_report_claims_and_depth(telemetry: Telemetry) -> None:
    telemetry.run_claimed(worker="w1", waited_s=0.5)
    telemetry.queue_depth(worker="w1", depth=3)


async def test_close(telemetry: Telemetry) -> None:
    await telemetry.close()
