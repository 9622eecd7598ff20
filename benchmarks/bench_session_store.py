"""Session store throughput and resume time (SQLite adapter).

Run: `python benchmarks/bench_session_store.py [--messages 50000] [--tail 10000]`

Prints events inserted per second (typical turns and large batches), commit latency of a typical
turn (2 messages + 6 events) through the async API and on the worker thread alone, and the time to
load the last `--tail` messages of a `--messages`-message session, measured in a fresh process as
on resume (the first load, then the median of several), next to a floor: the same rows read with
raw sqlite3 and validated with one `TypeAdapter(list[Message]).validate_json` per chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
from soong_agent.ports.events import (
    ModelCallStarted,
    RunEvent,
    TextDeltaEvent,
    ToolCallRequested,
    ToolResultEvent,
    UsageEvent,
)
from soong_agent.ports.messages import (
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from soong_agent.ports.storage import RunInfo, SessionInfo, TurnCommit
from soong_agent.ports.streaming import Usage

T0 = 1_700_000_000.0


class Turns:
    """Builds realistic turns: an assistant tool call, its tool result, six events."""

    def __init__(self, session_id: str, run_id: str) -> None:
        self.session = SessionInfo(
            id=session_id, project_dir="/work/project", created_at=T0, updated_at=T0
        )
        self.run = RunInfo(id=run_id, session_id=session_id, started_at=T0, model="bench-model")
        self.leaf: str | None = None
        self.n = 0
        self.seq = 0

    def _message(self) -> Message:
        i = self.n
        self.n += 1
        mid = f"msg-{self.session.id}-{i:07d}"
        kind = i % 3
        if kind == 0:
            m = Message(
                id=mid,
                parent_id=self.leaf,
                role="user",
                content=[
                    TextBlock(text=f"Please look at module {i} and fix the failing test. " * 3)
                ],
            )
        elif kind == 1:
            m = Message(
                id=mid,
                parent_id=self.leaf,
                role="assistant",
                content=[
                    TextBlock(text="Let me read the file first."),
                    ToolCallBlock(
                        id=f"call-{i}", name="read_file", arguments='{"path": "src/app/module.py"}'
                    ),
                ],
            )
        else:
            m = Message(
                id=mid,
                parent_id=self.leaf,
                role="tool",
                content=[
                    ToolResultBlock(
                        call_id=f"call-{i - 1}",
                        name="read_file",
                        content="def f(x):\n    return x + 1\n" * 12,
                    )
                ],
            )
        self.leaf = mid
        return m

    def _events(self, count: int) -> list[RunEvent]:
        out: list[RunEvent] = []
        sid, rid = self.session.id, self.run.id
        for _ in range(count):
            s = self.seq
            self.seq += 1
            at = T0 + s / 1000
            k = s % 6
            e: RunEvent
            if k == 0:
                e = ModelCallStarted(
                    seq=s, run_id=rid, session_id=sid, at=at, turn=s // 6, messages=s // 3
                )
            elif k in (1, 2):
                e = TextDeltaEvent(
                    seq=s, run_id=rid, session_id=sid, at=at, text="some streamed text "
                )
            elif k == 3:
                e = ToolCallRequested(
                    seq=s,
                    run_id=rid,
                    session_id=sid,
                    at=at,
                    call_id=f"c{s}",
                    name="read_file",
                    arguments="{}",
                )
            elif k == 4:
                e = ToolResultEvent(
                    seq=s,
                    run_id=rid,
                    session_id=sid,
                    at=at,
                    call_id=f"c{s}",
                    name="read_file",
                    content="ok",
                )
            else:
                e = UsageEvent(
                    seq=s,
                    run_id=rid,
                    session_id=sid,
                    at=at,
                    model="m",
                    usage=Usage(input_tokens=10, output_tokens=5),
                )
            out.append(e)
        return out

    def turn(self, messages: int = 2, events: int = 6) -> TurnCommit:
        ms = [self._message() for _ in range(messages)]
        at = T0 + self.n
        self.session = SessionInfo(
            id=self.session.id,
            project_dir=self.session.project_dir,
            created_at=T0,
            updated_at=at,
            active_leaf_id=self.leaf,
        )
        return TurnCommit(
            session=self.session, run=self.run, messages=ms, events=self._events(events), at=at
        )


async def bench_commits(db: Path, turns: int) -> None:
    store = SqliteSessionStore(db)
    t = Turns("commit-bench", "run-commit")
    await store.commit(t.turn())  # open the database, warm statement caches
    batches = [t.turn() for _ in range(turns)]
    lat: list[float] = []
    start = time.perf_counter()
    for b in batches:
        s = time.perf_counter()
        await store.commit(b)
        lat.append(time.perf_counter() - s)
    total = time.perf_counter() - start
    print(f"typical turn (2 messages + 6 events), {turns} commits through the async API:")
    print(f"  commit latency median {_us(statistics.median(lat))}   p95 {_us(_p95(lat))}")
    print(f"  events inserted/s     {turns * 6 / total:8.0f}        (turns/s {turns / total:.0f})")

    # The same work called directly on the worker thread: the cost without the hop to it.
    direct = [t.turn() for _ in range(turns)]
    db_obj = store._db

    def run_direct() -> list[float]:
        out = []
        for b in direct:
            s = time.perf_counter()
            db_obj.commit(b.session, b.run, b.messages, b.events, b.at)
            out.append(time.perf_counter() - s)
        return out

    lat2 = await store._run(run_direct)  # on the store's own worker thread and connection
    print(f"  on the worker thread  median {_us(statistics.median(lat2))}   p95 {_us(_p95(lat2))}")

    big = Turns("big-batches", "run-big")
    await store.commit(big.turn(0, 0))
    for size in (100, 1000):
        batches = [big.turn(0, size) for _ in range(max(2, 20_000 // size))]
        start = time.perf_counter()
        for b in batches:
            await store.commit(b)
        total = time.perf_counter() - start
        print(
            f"  events inserted/s, {size:5d} events per commit: {len(batches) * size / total:9.0f}"
        )
    await store.close()


async def build_long_session(db: Path, messages: int) -> str:
    """Write a `messages`-message session (50 messages per commit); return its leaf id."""
    store = SqliteSessionStore(db)
    t = Turns("long-session", "run-long")
    start = time.perf_counter()
    for _ in range(messages // 50):
        await store.commit(t.turn(50, 0))
    print(f"\nbuilt a {t.n}-message session in {time.perf_counter() - start:.1f} s")
    await store.close()
    assert t.leaf is not None
    return t.leaf


def _floor_loader(db: Path, tail: int) -> Callable[[bool], list[Message]]:
    """The same rows without the store: raw sqlite3, one `validate_json` per chunk of 2000.

    `walk=True` runs the store's own query (the recursive walk of the active path); `walk=False`
    reads the last `tail` rows by ordinal (right only for a linear session, as here), the
    cheapest indexed read of those rows. The GC is paused while validating, as in the store.
    """
    from pydantic import TypeAdapter

    from soong_agent.adapters.storage.sql import PATH_SQL

    adapter = TypeAdapter(list[Message])
    conn = sqlite3.connect(str(db), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA mmap_size = 268435456")
    tail_sql = (
        "SELECT content FROM messages WHERE session_id = :sid ORDER BY ordinal DESC LIMIT :limit"
    )
    params = {"sid": "long-session", "limit": tail}

    def load(walk: bool) -> list[Message]:
        if walk:
            docs = [r[0] for r in conn.execute(PATH_SQL, params).fetchall()]
        else:
            docs = [r[0] for r in conn.execute(tail_sql, params).fetchall()]
        docs.reverse()  # both read the leaf first
        out: list[Message] = []
        gc.disable()
        try:
            for start in range(0, len(docs), 2000):
                out.extend(adapter.validate_json("[" + ",".join(docs[start : start + 2000]) + "]"))
        finally:
            gc.freeze()
            gc.unfreeze()
            gc.enable()
        return out

    return load


async def measure_load(db: Path, leaf: str, tail: int, repeats: int) -> None:
    """Resume as a new process would: a fresh store in a fresh interpreter."""
    store = SqliteSessionStore(db)
    first = time.perf_counter()
    await store.get_session("long-session")
    opened = (time.perf_counter() - first) * 1000
    print(f"  first call of a fresh store (opens the file, pragmas, first read): {opened:.1f} ms")
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("sqlalchemy", "sqlmodel"))
    print(f"  sqlalchemy/sqlmodel imported by then: {'yes' if heavy else 'no'}")
    s = time.perf_counter()
    path = await store.active_path("long-session", limit=tail)
    cold = (time.perf_counter() - s) * 1000
    assert len(path) == tail and path[-1].id == leaf
    del path
    print(f"  last {tail} messages, first load in the process: {cold:.1f} ms")

    floor = _floor_loader(db, tail)
    for walk in (False, True):
        check = floor(walk)
        assert len(check) == tail and check[-1].id == leaf
        del check
    loop = asyncio.get_running_loop()
    floor_thread = ThreadPoolExecutor(max_workers=1)

    async def by_store() -> list[Message]:
        return await store.active_path("long-session", limit=tail)

    async def by_floor() -> list[Message]:
        return floor(False)

    async def by_floor_on_worker() -> list[Message]:
        return await loop.run_in_executor(floor_thread, floor, False)

    async def by_walk_on_worker() -> list[Message]:
        return await loop.run_in_executor(floor_thread, floor, True)

    loads = [by_store, by_floor, by_floor_on_worker, by_walk_on_worker]
    times: dict[Callable[[], Awaitable[list[Message]]], list[float]] = {f: [] for f in loads}
    cpu: dict[Callable[[], Awaitable[list[Message]]], list[float]] = {f: [] for f in loads}
    for i in range(repeats):
        # Interleaved, in a rotating order, so that load on the machine and whatever the
        # previous load left behind (memory to give back) hit all of them alike.
        for load in loads[i % len(loads) :] + loads[: i % len(loads)]:
            s, c = time.perf_counter(), time.process_time()
            loaded = await load()
            times[load].append(time.perf_counter() - s)
            cpu[load].append(time.process_time() - c)  # every thread: the store's worker too
            del loaded
    floor_thread.shutdown()
    # Compared in CPU time (as the loop is): wall time on a shared machine swings by 2x from
    # one run to the next, whoever else is running; CPU time much less.
    med = {load: statistics.median(ts) * 1000 for load, ts in cpu.items()}
    store_ms, store_times = med[by_store], times[by_store]
    print(
        f"  last {tail} messages, repeated: median {store_ms:.1f} ms CPU; wall median"
        f" {statistics.median(store_times) * 1000:.1f} ms  min {min(store_times) * 1000:.1f} ms"
        f"  max {max(store_times) * 1000:.1f} ms  ({repeats} runs)"
    )
    for load, label in (
        (by_floor, "floor: raw sqlite3, tail by ordinal, validate_json per chunk"),
        (by_floor_on_worker, "  the same floor on a worker thread (the store's model)"),
        (by_walk_on_worker, "  raw sqlite3 + the store's path walk, on a worker thread"),
    ):
        verdict = "ok" if store_ms <= 1.2 * med[load] else "OVER"
        note = f"  (target <= 1.2x: {verdict})" if load is by_floor else ""
        print(
            f"  {label:62s} {med[load]:6.1f} ms CPU   store/this {store_ms / med[load]:.2f}x{note}"
        )
    s = time.perf_counter()
    full = await store.active_path("long-session")
    print(f"  whole path ({len(full)} messages): {(time.perf_counter() - s) * 1000:.1f} ms")
    await store.close()


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:8.0f} µs"


def _p95(xs: list[float]) -> float:
    return sorted(xs)[int(len(xs) * 0.95)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--tail", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--measure-load", nargs=2, metavar=("DB", "LEAF"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure_load:
        db, leaf = args.measure_load
        asyncio.run(measure_load(Path(db), leaf, args.tail, args.repeats))
        return
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(bench_commits(Path(tmp) / "commits.sqlite", args.turns))
        db = Path(tmp) / "load.sqlite"
        leaf = asyncio.run(build_long_session(db, args.messages))
        own = [sys.executable, __file__, "--tail", str(args.tail), "--repeats", str(args.repeats)]
        subprocess.run([*own, "--measure-load", str(db), leaf], check=True)


if __name__ == "__main__":
    main()
