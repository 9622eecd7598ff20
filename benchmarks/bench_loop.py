"""Loop overhead: 200 turns, each one trivial tool call, every event durable; CPU time per turn.

Run: python benchmarks/bench_loop.py [--turns N] [--runs N]

The agent runs through the SDK (`AgentRuntime(tools=[...])`) against an instant model; the CPU
time of the whole process (every thread: the loop and the store's writer) is read at each model
call, so a turn's cost is the CPU spent between two calls. Printed next to it, measured in the
same process: the floor, a plain Python loop that writes the same number of rows per turn as
JSON with raw sqlite3, one INSERT per row (WAL, synchronous=NORMAL); the same rows batched in
one transaction per turn are shown too, a stricter floor. Targets: ≤ 250 µs
CPU per turn with SQLite, ≤ 2x the floor, and no growth with history (≤ 1 µs per prior turn).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.runtime_support import bench_runtime
from soong_agent import tool
from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.storage import SessionStore
from soong_agent.ports.streaming import StreamEvent, StreamFinished, TextDelta, ToolCallReady
from soong_agent.testing import InMemorySessionStore

_writer: list[int] = []  # the writer thread's id, looked up once (not on every turn)


def writer_cpu() -> float:
    """CPU seconds of the SQLite store's writer thread so far (0 when it has none)."""
    if not _writer:
        found = [
            t.ident
            for t in threading.enumerate()
            if t.name.startswith("soong-sqlite") and t.ident is not None
        ]
        if not found:
            return 0.0
        _writer.append(found[0])
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(_writer[0]))
    except OSError:  # the thread ended meanwhile (a new store's thread is looked up again)
        _writer.clear()
        return 0.0


STEADY = 5
"""The first turns pay for lazy imports and caches: the figures start after them."""


class InstantModel:
    """Answers instantly: a tool call per turn, then a final text; notes the process's CPU
    clock at each call, and the store's writer thread's where the steady turns begin and end
    (reading a thread's clock is a system call: not one a turn, to be counted in the turn)."""

    label = "instant"

    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.cpu: list[float] = []
        self.writer: list[float] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.cpu.append(time.process_time())
        n = len(self.cpu)
        if n in (STEADY + 1, self.turns + 1):
            self.writer.append(writer_cpu())
        if n <= self.turns:
            yield TextDelta("calling the tool")
            yield ToolCallReady(ToolCallBlock(id=f"c{n}", name="noop", arguments="{}"))
            yield StreamFinished("tool_use")
        else:
            yield TextDelta("done")
            yield StreamFinished("end_turn")


_counter = itertools.count(1)


@tool
async def noop() -> str:
    """Does nothing (it counts, so that its results differ: the same result every turn would
    rightly be stopped as a stuck run)."""
    return f"ok {next(_counter)}"


async def one_run(folder: Path, turns: int, *, sqlite: bool) -> tuple[list[float], int, int, float]:
    """Per-turn CPU seconds, the events and messages written per run, and the mean CPU seconds
    a steady turn of the store's writer thread (included in the first)."""
    _writer.clear()  # this run's store has a writer thread of its own
    model = InstantModel(turns)
    store: SessionStore = (
        SqliteSessionStore(folder / "sessions.sqlite") if sqlite else InMemorySessionStore()
    )
    runtime = bench_runtime(
        folder,
        model=model,
        tools=[noop],
        session_store=store,
        extra=f"[runtime]\nmax_turns = {turns + 5}",
    )
    async with runtime:
        run = await runtime.run("go")
        result = await run.wait()
        assert result.status == "completed", result
        events = len(await store.run_events(run.run_id))
        messages = len(await store.active_path(run.session_id))
    if isinstance(store, SqliteSessionStore):
        await store.close()
    assert events > turns * 5, "every event is durable"
    per_turn = [b - a for a, b in zip(model.cpu, model.cpu[1:], strict=False)]
    start, end = model.writer
    return per_turn, events, messages, (end - start) / (turns - STEADY)


def floor_run(
    folder: Path, turns: int, events_per_turn: int, messages_per_turn: int, *, batched: bool
) -> float:
    """CPU seconds per turn of a plain loop that writes the same rows as JSON with raw sqlite3:
    one INSERT per event and per message (the issue's floor), or, `batched`, one executemany
    per table in one transaction per turn (a stricter one, shown for reference)."""
    db = sqlite3.connect(folder / "floor.sqlite", isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, run_id TEXT, seq INT, payload TEXT)")
    db.execute("CREATE TABLE messages (id TEXT PRIMARY KEY, parent TEXT, content TEXT)")
    insert_event = "INSERT INTO events (run_id, seq, payload) VALUES (?, ?, ?)"
    insert_message = "INSERT INTO messages VALUES (?, ?, ?)"
    started = time.process_time()
    seq = 0
    parent = None
    for turn in range(turns):
        events = []
        for _ in range(events_per_turn):
            seq += 1
            payload = {"type": "event", "seq": seq, "run_id": "run_1", "at": time.time()}
            events.append(("run_1", seq, json.dumps(payload)))
        messages = []
        for m in range(messages_per_turn):
            mid = f"msg_{turn}_{m}"
            content = {"role": "tool", "id": mid, "content": [{"type": "text", "text": "ok"}]}
            messages.append((mid, parent, json.dumps(content)))
            parent = mid
        if batched:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(insert_event, events)
            db.executemany(insert_message, messages)
            db.execute("COMMIT")
        else:
            for row in events:
                db.execute(insert_event, row)
            for row in messages:
                db.execute(insert_message, row)
    elapsed = time.process_time() - started
    db.close()
    return elapsed / turns


def slope_us(samples: list[float]) -> float:
    """Least-squares growth of the per-turn cost, in µs per prior turn."""
    xs = range(len(samples))
    mean_x, mean_y = statistics.mean(xs), statistics.mean(samples)
    num = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, samples, strict=True))
    den = sum((x - mean_x) ** 2 for x in xs)
    return num / den * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    turns = args.turns
    results: dict[str, list[float]] = {"sqlite": [], "memory": []}
    growth: dict[str, list[float]] = {"sqlite": [], "memory": []}
    writers: dict[str, list[float]] = {"sqlite": [], "memory": []}
    floors: list[float] = []
    batched_floors: list[float] = []
    ratios: dict[str, list[float]] = {"sqlite": [], "memory": []}
    for kind in ("sqlite", "memory"):  # warm-up: imports, first table creation
        with tempfile.TemporaryDirectory() as tmp:
            _, events, messages, _ = asyncio.run(one_run(Path(tmp), turns, sqlite=kind == "sqlite"))

    def measure_floor(*, batched: bool = False) -> float:
        with tempfile.TemporaryDirectory() as tmp:
            cost = floor_run(
                Path(tmp), turns, events // turns, max(1, messages // turns), batched=batched
            )
        (batched_floors if batched else floors).append(cost)
        return cost

    for _ in range(args.runs):
        # each run is set against the floor measured right before and right after it: on a
        # shared machine the speed drifts from second to second, and neighbours drift least
        before = measure_floor()
        for kind in ("sqlite", "memory"):
            with tempfile.TemporaryDirectory() as tmp:
                cpu, events, messages, writer = asyncio.run(
                    one_run(Path(tmp), turns, sqlite=kind == "sqlite")
                )
            after = measure_floor()
            steady = cpu[STEADY:]
            cost = statistics.mean(steady)  # the writer's batches included
            results[kind].append(cost)
            ratios[kind].append(cost / ((before + after) / 2))
            writers[kind].append(writer)
            growth[kind].append(slope_us(steady))
            before = after
        measure_floor(batched=True)
    floor = statistics.median(floors)
    print(
        f"loop: {turns} turns x 1 trivial tool through the SDK, CPU time of the whole process "
        f"({args.runs} runs; mean per turn, median of the runs; each ratio is to the mean of the "
        f"floors measured right before and after the run; ~{events // turns} events and "
        f"{messages // turns} messages written per turn)"
    )
    print(
        f"  floor: plain Python + one raw sqlite3 insert per row: {floor * 1e6:7.1f} µs CPU / turn"
    )
    batched = statistics.median(batched_floors)
    print(f"  (stricter: the same rows batched, one transaction a turn: {batched * 1e6:6.1f} µs)")
    for kind, label in (("sqlite", "SQLite store"), ("memory", "in-memory store")):
        cost = statistics.median(results[kind])
        ratio = statistics.median(ratios[kind])
        verdict = "ok" if cost <= 250e-6 and ratio <= 2 else "OVER"
        print(
            f"  soong-agent, {label:<16}                     : {cost * 1e6:7.1f} µs CPU / turn   "
            f"{ratio:4.2f}x floor   growth {statistics.median(growth[kind]):+5.2f} µs "
            f"per prior turn   (target ≤ 250 µs and ≤ 2x floor, growth ≤ 1: {verdict})"
        )
        if kind == "sqlite":
            writer = statistics.median(writers[kind])
            print(
                f"    of which the store's writer thread {writer * 1e6:6.1f} µs, the event loop's "
                f"thread {(cost - writer) * 1e6:6.1f} µs"
            )


if __name__ == "__main__":
    main()
