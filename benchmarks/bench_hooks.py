"""What one no-op synchronous hook costs a tool call (HOOK-1).

Runs the same SDK run (instant scripted model, TURNS turns of one Python tool call each,
in-memory session store) with no hooks and with one ``pre_tool_use`` hook whose command is
``true``, the two taking turns ROUNDS times, and prints the median milliseconds per tool call
of each and the difference. The floor next to it is the hook's own process: ``/bin/sh -c
true`` started through the same process runner, alone. With no hooks registered, a run pays
nothing for hooks (no per-call work); that is the first line.

    python benchmarks/bench_hooks.py [--turns 20] [--rounds 9]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from runtime_support import bench_runtime

from soong_agent import tool
from soong_agent.adapters.process import SubprocessRunner
from soong_agent.testing import InMemorySessionStore, ScriptedModel, ScriptedResponse


@tool
def noop(n: int) -> str:
    """Return n (a tool that costs nothing)."""
    return str(n)


def script(turns: int) -> ScriptedModel:
    responses = [ScriptedResponse.tool_calls(("noop", {"n": i})) for i in range(turns)]
    return ScriptedModel([*responses, ScriptedResponse.text("done")])


async def one_run(folder: Path, turns: int) -> float:
    """Milliseconds per tool call of one run in `folder` (its home may hold hooks.json)."""
    runtime = bench_runtime(
        folder, model=script(turns), tools=[noop], session_store=InMemorySessionStore()
    )
    async with runtime:
        started = time.perf_counter()
        run = await runtime.run("go")
        result = await run.wait()
        took = time.perf_counter() - started
    assert result.status == "completed", result.reason
    return took * 1000 / turns


async def bare_spawn(rounds: int) -> float:
    runner = SubprocessRunner()
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await runner.run(
            ["/bin/sh", "-c", "true"],
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
            timeout_s=10,
            stdout_limit=1000,
            stderr_limit=1000,
        )
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def main(turns: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        bare, hooked = Path(tmp, "bare"), Path(tmp, "hooked")
        (hooked / "home").mkdir(parents=True)
        hooks = {"hooks": {"pre_tool_use": [{"command": "true"}]}}
        (hooked / "home" / "hooks.json").write_text(json.dumps(hooks), encoding="utf-8")
        await one_run(bare, turns)  # warm-up: imports, first schemas
        await one_run(hooked, turns)
        plain, with_hook = [], []
        for _ in range(rounds):
            plain.append(await one_run(bare, turns))
            with_hook.append(await one_run(hooked, turns))
        spawn = await bare_spawn(rounds * 3)
    a, b = statistics.median(plain), statistics.median(with_hook)
    print(f"tool call, no hooks:            {a:7.3f} ms  (median of {rounds} runs x {turns} calls)")
    print(f"tool call, one no-op sync hook: {b:7.3f} ms")
    print(f"hook overhead per call:         {b - a:7.3f} ms")
    print(
        f"floor: /bin/sh -c true alone:   {spawn:7.3f} ms  (overhead/floor {(b - a) / spawn:.2f}x)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.rounds))
