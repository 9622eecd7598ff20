"""Per-command cost of the OS sandbox (SBX-3): each mechanism against none.

Runs ``/bin/true`` through the real process runner (`SubprocessRunner`) RUNS times per
mechanism after a few warm-up runs (the mechanisms take turns, run by run), under the policy
a project would get (the user's real ``~/.ssh``, ``~/.aws``, ``~/.gnupg`` hidden where they
exist, a throwaway agent home and project), and prints the median and the overhead over no
sandbox. Also the one-off costs: the start-up probe (every mechanism's trial), and the first
command of each mechanism (for Landlock, the spawner thread restricting itself). A mechanism
that does not work here is reported with the probe's cause instead of figures.

    python benchmarks/bench_sandbox.py [--runs 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence

from soong_agent.adapters.ossandbox import (
    BubblewrapSandbox,
    LandlockSandbox,
    NoSandbox,
    build_policy,
    find_bwrap,
    probe_host,
)
from soong_agent.adapters.process import SubprocessRunner
from soong_agent.ports.ossandbox import CommandSandbox, SandboxPolicy
from soong_agent.ports.process import ProcessResult

WARM_UP = 5


async def _timings(
    sandboxes: Sequence[CommandSandbox], policy: SandboxPolicy, runs: int
) -> list[tuple[list[float], float]]:
    """For each sandbox: (per-run ms, ms of its very first run) of ``/bin/true``. The
    sandboxes take turns run by run, so a drift of the machine touches them all alike."""
    runner = SubprocessRunner()
    env = {"PATH": "/usr/bin:/bin"}

    async def start(argv: Sequence[str]) -> ProcessResult:
        return await runner.run(
            argv, cwd=policy.project, env=env, timeout_s=30, stdout_limit=1000, stderr_limit=1000
        )

    firsts = [0.0] * len(sandboxes)
    times: list[list[float]] = [[] for _ in sandboxes]
    for index in range(WARM_UP + runs):
        for which, sandbox in enumerate(sandboxes):
            began = time.perf_counter()
            result = await sandbox.run(["/bin/true"], policy, start)
            elapsed = (time.perf_counter() - began) * 1000
            if result.exit_code != 0:
                raise RuntimeError(f"{sandbox.mechanism}: /bin/true failed: {result.stderr}")
            if index == 0:
                firsts[which] = elapsed
            if index >= WARM_UP:
                times[which].append(elapsed)
    return list(zip(times, firsts, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()

    base = os.path.realpath(tempfile.mkdtemp(prefix="soong-bench-sandbox-"))
    try:
        project = os.path.join(base, "project")
        agent_home = os.path.join(base, "agent-home")
        os.makedirs(project)
        os.makedirs(agent_home)
        policy = build_policy(
            project=project, agent_home=agent_home, tmp_dir=base, sensitive=[".env"]
        )

        began = time.perf_counter()
        probe = probe_host(every_mechanism=True, refresh=True)
        probe_ms = (time.perf_counter() - began) * 1000
        print(f"probe (every mechanism's trial, once per process): {probe_ms:.1f} ms")
        for status in probe.statuses:
            state = "works" if status.works else f"does not work: {status.cause}"
            print(f"  {status.mechanism:<10} {state} ({status.elapsed_ms:.1f} ms) {status.detail}")
        print(f"policy: {len(policy.deny_paths)} hidden paths, writable {policy.writable()}")
        print(f"/bin/true x {args.runs} through SubprocessRunner, median (p10-p90) ms:")

        sandboxes: list[tuple[str, CommandSandbox | None, str]] = [("none", NoSandbox(), "")]
        bwrap = probe.status("bubblewrap")
        found = find_bwrap()
        if bwrap is not None and bwrap.works and found is not None:
            sandboxes.append(("bubblewrap", BubblewrapSandbox(found[0], source=found[1]), ""))
        else:
            sandboxes.append(("bubblewrap", None, bwrap.cause if bwrap else "not probed"))
        landlock = probe.status("landlock")
        if landlock is not None and landlock.works:
            sandboxes.append(("landlock", LandlockSandbox(protect_agent=False), ""))
        else:
            sandboxes.append(("landlock", None, landlock.cause if landlock else "not probed"))

        for name, sandbox, cause in sandboxes:
            if sandbox is None:
                print(f"  {name:<10} skipped: {cause}")
        working = [(name, sandbox) for name, sandbox, _ in sandboxes if sandbox is not None]
        figures = asyncio.run(_timings([s for _, s in working], policy, args.runs))
        baseline = statistics.median(figures[0][0])
        for (name, sandbox), (times, first) in zip(working, figures, strict=True):
            median = statistics.median(times)
            deciles = statistics.quantiles(times, n=10)
            extra = f"  overhead {median - baseline:+.2f} ms" if name != "none" else ""
            print(
                f"  {name:<10} {median:6.2f} ({deciles[0]:.2f}-{deciles[-1]:.2f}){extra}"
                f"  first command {first:.1f} ms"
            )
            if isinstance(sandbox, LandlockSandbox):
                sandbox.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
