"""The EventSink contract: RecordingEventSink and the real sink, a run's handle (`Run.emit`).

A sink takes every event of a run, in order, without blocking and without needing an event loop;
what it took is read back through each implementation's own reader (`events` of the recorder,
`Run.events()` of the handle).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import pytest

from soong_agent.application.runs.handle import Run
from soong_agent.ports.events import (
    ChildFinished,
    CompactionEvent,
    ContextMeasured,
    ErrorEvent,
    EventSink,
    ModelCallStarted,
    ModelRetry,
    PermissionAsked,
    PermissionDecided,
    RunEvent,
    RunFinished,
    RunStarted,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolCallRequested,
    ToolResultEvent,
    UsageEvent,
)
from soong_agent.ports.streaming import Usage
from soong_agent.testing import RecordingEventSink

T0 = 1_700_000_000.0


@dataclass
class Kit:
    sink: EventSink
    seen: Callable[[int], Coroutine[Any, Any, list[RunEvent]]]  # the first n events it took


def _recording() -> Kit:
    sink = RecordingEventSink()

    async def seen(n: int) -> list[RunEvent]:
        async with asyncio.timeout(5):
            while len(sink.events) < n:
                await asyncio.sleep(0.001)
        return sink.events[:n]

    return Kit(sink, seen)


def _run_handle() -> Kit:
    run = Run(session_id="s1", run_id="r1", cancel_timeout_s=1.0)

    async def seen(n: int) -> list[RunEvent]:
        got: list[RunEvent] = []
        async with asyncio.timeout(5):
            async for event in run.events():
                got.append(event)
                if len(got) == n:
                    break
        return got

    return Kit(run, seen)


KITS: dict[str, Callable[[], Kit]] = {"recording": _recording, "run_handle": _run_handle}


@pytest.fixture(params=sorted(KITS))
def kit(request: pytest.FixtureRequest) -> Kit:
    return KITS[request.param]()


def every_event() -> list[RunEvent]:
    e: dict[str, Any] = {"run_id": "r1", "session_id": "s1"}
    return [
        RunStarted(seq=1, at=T0, project_dir="/p", model="m", message="hi", **e),
        ModelCallStarted(seq=2, at=T0, turn=1, messages=1, **e),
        ModelRetry(
            seq=3, at=T0, kind="server", reason="500", attempt=1, max_attempts=3, delay_s=0, **e
        ),
        TextDeltaEvent(seq=4, at=T0, text="hé", **e),
        ThinkingDeltaEvent(seq=5, at=T0, text="hmm", **e),
        ToolCallRequested(seq=6, at=T0, call_id="c1", name="ls", arguments="{}", **e),
        PermissionAsked(
            seq=7, at=T0, call_id="c1", tool="ls", summary="ls", session_scope="ls", **e
        ),
        PermissionDecided(
            seq=8, at=T0, call_id="c1", tool="ls", decision="allow_once", reason="answer", **e
        ),
        ToolResultEvent(seq=9, at=T0, call_id="c1", name="ls", content="a", **e),
        ContextMeasured(
            seq=10,
            at=T0,
            system_tokens=1,
            non_system_tokens=2,
            non_system_budget=3,
            compact_trigger=4,
            window=5,
            **e,
        ),
        CompactionEvent(seq=11, at=T0, strategy="micro", tokens_before=9, tokens_after=3, **e),
        ChildFinished(
            seq=12,
            at=T0,
            kind="sub_agent",
            agent="default_sub_agent",
            child_session_id="c",
            child_run_id="cr",
            parent_call_id="call",
            status="completed",
            **e,
        ),
        ErrorEvent(seq=13, at=T0, kind="tool", message="x", **e),
        UsageEvent(seq=14, at=T0, model="m", usage=Usage(input_tokens=1), **e),
        RunFinished(seq=15, at=T0, status="completed", **e),
    ]


def test_implements_the_port(kit: Kit) -> None:
    assert isinstance(kit.sink, EventSink)


def test_emit_is_a_plain_call_that_needs_no_event_loop(kit: Kit) -> None:
    # this test is synchronous: no loop is running while it emits
    assert not inspect.iscoroutinefunction(kit.sink.emit)
    result: object = kit.sink.emit(every_event()[0])  # type: ignore[func-returns-value]
    assert result is None


async def test_every_event_type_comes_back_in_order_and_unchanged(kit: Kit) -> None:
    events = every_event()
    for event in events:
        kit.sink.emit(event)
    seen = await kit.seen(len(events))
    assert [type(e) for e in seen] == [type(e) for e in events]
    assert all(a is b for a, b in zip(seen, events, strict=True))


async def test_emit_does_not_block(kit: Kit) -> None:
    template = every_event()[3]
    events = [template.model_copy(update={"seq": i}) for i in range(2_000)]
    started = time.monotonic()
    for event in events:
        kit.sink.emit(event)
    assert time.monotonic() - started < 1.0
    seen = await kit.seen(len(events))
    assert [e.seq for e in seen] == list(range(2_000))


async def test_events_emitted_while_a_reader_waits_reach_it(kit: Kit) -> None:
    events = every_event()[:3]
    reader = asyncio.create_task(kit.seen(len(events)))
    await asyncio.sleep(0.01)
    for event in events:
        kit.sink.emit(event)
        await asyncio.sleep(0)
    assert await reader == events
