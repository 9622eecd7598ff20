"""Child agents (AGT-2): what spawning a sub-agent costs, and what one assembled session weighs.

Run: python benchmarks/bench_agents.py [--children N] [--sessions N]

1. Spawn overhead: one parent run calls `create_sub_agent` N times in a row against a model that
   answers at once. Timed per child: from the end of the parent's answer carrying the call to the
   child's first model request (session, assembly, first durable commit, request built), and
   from the child's answer to the parent's next request (the child's end written, the result
   handed back). Medians, wall clock.
2. Assembly: N sessions assembled side by side with different presets (`minimal`, `standard`,
   `full`, `default_sub_agent`), each kept alive: median time per assembly and the memory each
   holds (tracemalloc, bytes allocated and still alive / N). Seed 004 measured ~3 ms and
   ~600 KB per assembled session.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.runtime_support import bench_runtime
from soong_agent.domain.permissions import SessionGrants
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.storage import RunInfo, SessionInfo
from soong_agent.ports.streaming import StreamEvent, StreamFinished, TextDelta, ToolCallReady

PARENT = "parent task"


class SpawningModel:
    """The parent asks for `children` sub-agents one after another; each child answers at once.
    Records when each answer ended and each request arrived."""

    label = "instant"

    def __init__(self, children: int) -> None:
        self.children = children
        self.spawned = 0
        self.marks: list[tuple[str, float]] = []  # (what, perf_counter)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        users = [m for m in request.messages if m.role == "user"]
        is_parent = users[-1].text == PARENT
        self.marks.append(("parent_request" if is_parent else "child_request", time.perf_counter()))
        if is_parent and self.spawned < self.children:
            self.spawned += 1
            call = ToolCallBlock(
                id=f"call_{self.spawned}",
                name="create_sub_agent",
                arguments=f'{{"task": "child task {self.spawned}"}}',
            )
            yield ToolCallReady(call)
            self.marks.append(("parent_spawned", time.perf_counter()))
            yield StreamFinished("tool_use")
            return
        yield TextDelta("done")
        self.marks.append(("parent_answer" if is_parent else "child_answer", time.perf_counter()))
        yield StreamFinished("end_turn")


async def spawn_overhead(children: int) -> tuple[list[float], list[float]]:
    model = SpawningModel(children)
    extra = f"[agents]\nmax_children_per_run = {children + 1}\n"
    with tempfile.TemporaryDirectory() as tmp:
        async with bench_runtime(Path(tmp), model=model, tools=[], extra=extra) as runtime:
            result = await (await runtime.run(PARENT)).wait()
    if result.status != "completed":
        raise SystemExit(f"the parent run ended {result.status}: {result.reason}")
    to_child: list[float] = []
    back: list[float] = []
    marks = model.marks
    for (what, at), (nxt, nxt_at) in itertools.pairwise(marks):
        if what == "parent_spawned" and nxt == "child_request":
            to_child.append((nxt_at - at) * 1000)
        if what == "child_answer" and nxt == "parent_request":
            back.append((nxt_at - at) * 1000)
    return to_child[1:], back[1:]  # the first child warms caches up


async def assembly_cost(sessions: int) -> tuple[float, float]:
    presets = ["minimal", "standard", "full", "default_sub_agent"]
    with tempfile.TemporaryDirectory() as tmp:
        async with bench_runtime(Path(tmp), model=SpawningModel(0), tools=[]) as runtime:
            services = runtime._container.services
            service, children = services.run_service(), services.child_runs()
            assembler = services.assembler()
            specs = [children.setup(p)[1] for p in presets]
            for spec in specs:  # warm: schemas and prompts built once per tool set
                _assemble(assembler, spec, "warm")
            kept = []
            times = []
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            for i in range(sessions):
                t0 = time.perf_counter()
                kept.append(_assemble(assembler, specs[i % len(specs)], f"s{i}"))
                times.append((time.perf_counter() - t0) * 1000)
            after = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            del service
    return statistics.median(times), (after - before) / sessions / 1024


def _assemble(assembler: object, spec: object, sid: str) -> object:
    session = SessionInfo(id=f"ses_{sid}", project_dir="/p", created_at=0.0, updated_at=0.0)
    run = RunInfo(id=f"run_{sid}", session_id=session.id, started_at=0.0)
    return assembler.assemble(  # type: ignore[attr-defined]
        spec, session=session, run_info=run, history=[], grants=SessionGrants()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=30)
    parser.add_argument("--sessions", type=int, default=200)
    args = parser.parse_args()
    to_child, back = asyncio.run(spawn_overhead(args.children))
    print(
        f"sub-agent spawn, parent's call -> child's first request: "
        f"{statistics.median(to_child):.2f} ms median over {len(to_child)} children"
    )
    print(
        f"sub-agent return, child's answer -> parent's next request: "
        f"{statistics.median(back):.2f} ms median"
    )
    ms, kib = asyncio.run(assembly_cost(args.sessions))
    print(
        f"assembled session: {ms:.3f} ms median, {kib:.0f} KiB each alive "
        f"(seed 004: ~3 ms, ~600 KB) over {args.sessions} sessions"
    )


if __name__ == "__main__":
    main()
