"""Loop overhead: 200 turns, each one trivial tool call, every event written to SQLite.

Run: python benchmarks/bench_loop.py
Prints the mean cost per turn (µs) for early and late turns; the target is ≤ 250 µs per turn
and no growth with history (turn 200 costs what turn 20 costs).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
from soong_agent.application.loop import LoopSettings
from soong_agent.application.run_service import RunService, RunServiceDeps
from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput, ToolRegistry
from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import StreamEvent, StreamFinished, TextDelta, ToolCallReady
from soong_agent.testing import InMemoryFileSystem, SequentialIds, StaticContextSource

TURNS = 200


class InstantModel:
    """Answers instantly: a tool call per turn, then a final text; records when each call came."""

    label = "instant"

    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.stamps: list[float] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.stamps.append(time.perf_counter())
        n = len(self.stamps)
        if n <= self.turns:
            yield TextDelta("calling the tool")
            yield ToolCallReady(ToolCallBlock(id=f"c{n}", name="noop", arguments="{}"))
            yield StreamFinished("tool_use")
        else:
            yield TextDelta("done")
            yield StreamFinished("end_turn")


class NoArgs(ToolArgs):
    pass


async def noop(args: NoArgs, ctx: ToolContext) -> ToolOutput:
    return ToolOutput("ok")


class Clock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


async def one_run(db: Path) -> list[float]:
    model = InstantModel(TURNS)
    store = SqliteSessionStore(db)
    service = RunService(
        RunServiceDeps(
            provider=model,
            store=store,
            registry=ToolRegistry([Tool("noop", "does nothing", NoArgs, noop)]),
            fs=InMemoryFileSystem(),
            context=StaticContextSource(),
            clock=Clock(),
            ids=SequentialIds(),
            approver=None,
            permissions=PermissionsConfig(),
            settings=LoopSettings(model_label="instant", max_turns=TURNS + 5),
            cancel_timeout_s=5,
        )
    )
    run = await service.start("go")
    result = await run.wait()
    assert result.status == "completed", result
    events = await store.run_events(run.run_id)
    assert len(events) > TURNS * 5, "every event is durable"
    await store.close()
    return [b - a for a, b in zip(model.stamps, model.stamps[1:], strict=False)]


def main() -> None:
    early, late, overall = [], [], []
    for i in range(5):
        with tempfile.TemporaryDirectory() as tmp:
            gaps = asyncio.run(one_run(Path(tmp) / "sessions.sqlite"))
        if i == 0:
            continue  # warm-up: imports, first table creation
        early.append(statistics.mean(gaps[10:30]))
        late.append(statistics.mean(gaps[180:200]))
        overall.append(statistics.mean(gaps))
    us = 1e6
    print(f"loop overhead, {TURNS} turns x 1 trivial tool, SQLite durable (4 runs, best/median):")
    print(f"  per turn, all turns : {min(overall) * us:7.1f} / {statistics.median(overall) * us:7.1f} µs")
    print(f"  per turn, turns 10-30  : {min(early) * us:7.1f} / {statistics.median(early) * us:7.1f} µs")
    print(f"  per turn, turns 180-200: {min(late) * us:7.1f} / {statistics.median(late) * us:7.1f} µs")
    print(f"  growth late/early      : {statistics.median(late) / statistics.median(early):.2f}x")


if __name__ == "__main__":
    main()
