"""Context assembly over long sessions: 10,000 turns, periodic compaction, peak RSS.

Run: python benchmarks/bench_context.py

Five sessions of 10,000 turns each (the RSS figures are the first one's, in a fresh process)
against an instant model: a trivial tool call per turn whose result is a short line, every turn
written to SQLite, the real o200k token counter, and a 16k-token window, so the context is
compacted every few hundred turns. The loop's own cost per turn is the time between two model
calls (taken in the model, as in bench_loop.py). Turns whose interval ran a compaction (a
summary request, or a new active path) are set apart and reported on their own. Targets: a turn
around turn 10,000 costs what one around turn 100 costs (no work proportional to the session's
history per turn); the RSS stays flat once the context is compacted periodically.
"""

from __future__ import annotations

import asyncio
import gc
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.runtime_support import bench_runtime
from soong_agent import tool
from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
from soong_agent.adapters.tokens.o200k import O200kTokenCounter
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import StreamEvent, StreamFinished, TextDelta, ToolCallReady

TURNS = 10_000
SESSIONS = 5
RSS_AT = 1_000
WINDOWS = {"around turn 100": (50, 150), "around turn 10,000": (TURNS - 100, TURNS)}

WINDOW = 16_000
CONFIG = f"""
[runtime]
max_turns = {TURNS + 5}
[context]
reserve_output_tokens = 1000
dynamic_system_budget = 4000
[compact]
reserve_tokens = 1000
keep_recent_tokens = 2000
max_summary_tokens = 500
"""


def rss_now_mib() -> float:
    """The resident set size now (from /proc; the peak where /proc is missing)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
        return pages * resource.getpagesize() / 2**20
    except OSError:
        return rss_peak_mib()


def rss_peak_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


@dataclass
class InstantModel:
    """A tool call per turn, then a final answer; answers summary requests at once.

    Records when each model call came, the first message id of each request (a new one means
    the active path was replaced by a compaction), its length, and where summaries were asked.
    """

    turns: int
    label: str = "instant"
    stamps: list[float] = field(default_factory=list)
    first_ids: list[str] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    summary_after: list[int] = field(default_factory=list)
    rss_at: tuple[float, float] | None = None

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        if request.system and request.system[0].label == "compact":
            self.summary_after.append(len(self.stamps))
            yield TextDelta("The agent checked items one by one; all of them were fine so far.")
            yield StreamFinished("end_turn")
            return
        self.stamps.append(time.perf_counter())
        self.first_ids.append(request.messages[0].id)
        self.lengths.append(len(request.messages))
        n = len(self.stamps)
        if n == RSS_AT:
            self.rss_at = (rss_now_mib(), rss_peak_mib())
        if n <= self.turns:
            yield TextDelta("checking the next item")
            yield ToolCallReady(
                ToolCallBlock(id=f"c{n}", name="check_item", arguments=f'{{"item": {n}}}')
            )
            yield StreamFinished("tool_use")
        else:
            yield TextDelta("done")
            yield StreamFinished("end_turn")


@tool
async def check_item(item: int) -> str:
    """Checks one item."""
    return f"item {item}: ok"


async def one_session(folder: Path) -> tuple[InstantModel, float]:
    model = InstantModel(TURNS)
    store = SqliteSessionStore(folder / "sessions.sqlite")
    runtime = bench_runtime(
        folder,
        model=model,
        tools=[check_item],
        session_store=store,
        model_extra=f"context_window = {WINDOW}",
        extra=CONFIG,
    )
    async with runtime:
        started = time.perf_counter()
        run = await runtime.run("check every item, one call per item")
        result = await run.wait()
        elapsed = time.perf_counter() - started
        assert result.status == "completed", result
    await store.close()
    return model, elapsed


@dataclass(frozen=True)
class Split:
    plain: list[float]
    compacting: list[float]
    length: float


def split(model: InstantModel, start: int, end: int) -> Split:
    """Intervals `start … end-1` (interval i: from model call i to call i+1, i.e. turn i+1's
    tool, commit and context assembly), parted into plain turns and turns that compacted."""
    summaries = set(model.summary_after)
    plain: list[float] = []
    compacting: list[float] = []
    for i in range(start, min(end, len(model.stamps) - 1)):
        gap = model.stamps[i + 1] - model.stamps[i]
        replaced = model.first_ids[i + 1] != model.first_ids[i]
        (compacting if replaced or (i + 1) in summaries else plain).append(gap)
    return Split(plain, compacting, statistics.mean(model.lengths[start:end]))


class FullCollections:
    """Pauses of the cyclic GC's full (generation 2) collections, in order."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._started)


def us(seconds: float) -> str:
    return f"{seconds * 1e6:8.1f} µs"


def main() -> None:
    counter = O200kTokenCounter()
    counter.count("load the tokenizer before measuring")
    gc.collect()
    baseline = rss_now_mib()
    models: list[InstantModel] = []
    full = FullCollections()
    gc.callbacks.append(full)
    for i in range(SESSIONS):
        with tempfile.TemporaryDirectory() as tmp:
            model, elapsed = asyncio.run(one_session(Path(tmp)))
        models.append(model)
        if i == 0:  # the RSS figures are those of the first session, in a fresh process
            peak, now = rss_peak_mib(), rss_now_mib()
            first_elapsed, rss_at = elapsed, model.rss_at or (float("nan"), float("nan"))
            gc.callbacks.remove(full)
    print(
        f"context assembly: {SESSIONS} sessions of {TURNS:,} turns, 1 trivial tool per turn, "
        f"SQLite, o200k counter, {WINDOW:,}-token window ({first_elapsed:.1f} s a session)"
    )
    pooled: dict[str, list[float]] = {}
    best: dict[str, float] = {}
    for name, (a, b) in WINDOWS.items():
        parts = [split(m, a, b) for m in models]
        plain = pooled[name] = [g for p in parts for g in p.plain]
        medians = [statistics.median(p.plain) for p in parts]
        best[name] = min(medians)
        print(
            f"  per turn, {name:<19}: best {us(best[name])}   median {us(statistics.median(plain))}"
            f"   mean {us(statistics.mean(plain))}"
        )
        print(
            f"      medians by session: {', '.join(f'{m * 1e6:.0f}' for m in medians)} µs; "
            f"{parts[0].length:.0f} messages sent on average; "
            f"{sum(len(p.compacting) for p in parts)} compacting turns set apart"
        )
    (early_name, late_name) = WINDOWS
    early, late = pooled[early_name], pooled[late_name]
    print(
        f"  turn 10,000 vs turn 100: {best[late_name] / best[early_name]:.2f}x best, "
        f"{statistics.median(late) / statistics.median(early):.2f}x by median, "
        f"{statistics.mean(late) / statistics.mean(early):.2f}x by mean "
        "(target: ~1, no per-turn work proportional to history)"
    )
    model = models[0]
    everything = split(model, 0, TURNS)
    replaced = sum(1 for i, f in enumerate(model.first_ids[1:]) if f != model.first_ids[i])
    print(
        f"  compacting turns (first session): {len(everything.compacting)} ({replaced} context "
        f"replacements, {len(model.summary_after)} summary requests), mean "
        f"{us(statistics.mean(everything.compacting))}; plain turns: mean "
        f"{us(statistics.mean(everything.plain))}, median {us(statistics.median(everything.plain))}"
    )
    pauses = ", ".join(f"{p * 1e3:.0f}" for p in full.pauses) or "none"
    print(f"  full GC collections during the first session: {len(full.pauses)}, pauses {pauses} ms")
    print(f"  RSS before the run (imports, tokenizer): {baseline:7.1f} MiB")
    print(f"  RSS after turn {RSS_AT:,}:                  {rss_at[0]:7.1f} MiB")
    print(f"  RSS after turn {TURNS:,}:                 {now:7.1f} MiB")
    print(f"  peak RSS of the {TURNS:,}-turn session:   {peak:7.1f} MiB")


if __name__ == "__main__":
    main()
