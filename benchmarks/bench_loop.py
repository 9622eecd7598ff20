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

from benchmarks.runtime_support import bench_runtime
from soong_agent import tool
from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import StreamEvent, StreamFinished, TextDelta, ToolCallReady

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


@tool
async def noop() -> str:
    """Does nothing."""
    return "ok"


async def one_run(folder: Path) -> list[float]:
    model = InstantModel(TURNS)
    store = SqliteSessionStore(folder / "sessions.sqlite")
    runtime = bench_runtime(
        folder, model=model, tools=[noop], session_store=store, extra="[runtime]\nmax_turns = 250"
    )
    async with runtime:
        run = await runtime.run("go")
        result = await run.wait()
        assert result.status == "completed", result
        events = await store.run_events(run.run_id)
        assert len(events) > TURNS * 5, "every event is durable"
    await store.close()
    return [b - a for a, b in zip(model.stamps, model.stamps[1:], strict=False)]


def line(label: str, samples: list[float]) -> str:
    best, median = min(samples) * 1e6, statistics.median(samples) * 1e6
    return f"  per turn, {label:<13}: best {best:7.1f} µs   median {median:7.1f} µs"


def main() -> None:
    windows = {
        "all turns": (0, TURNS),
        "turns 10-30": (10, 30),
        "turns 100-120": (100, 120),
        "turns 180-200": (180, 200),
    }
    samples: dict[str, list[float]] = {name: [] for name in windows}
    for i in range(5):
        with tempfile.TemporaryDirectory() as tmp:
            gaps = asyncio.run(one_run(Path(tmp)))
        if i == 0:
            continue  # warm-up: imports, first table creation
        for name, (a, b) in windows.items():
            samples[name].append(statistics.mean(gaps[a:b]))
    print(f"loop overhead: {TURNS} turns x 1 trivial tool, every event written to SQLite (4 runs)")
    for name in windows:
        print(line(name, samples[name]))
    growth = statistics.median(samples["turns 180-200"]) / statistics.median(samples["turns 10-30"])
    print(f"  growth, turns 180-200 vs 10-30: {growth:.2f}x (target: ~1, no growth with history)")


if __name__ == "__main__":
    main()
