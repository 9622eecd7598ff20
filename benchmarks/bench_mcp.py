"""How long until the tools of three stdio MCP servers are known (MCP-1).

The three servers are real: `mcp-server-time` and `mcp-server-git` (PyPI, the dev extras) and the
`mcp` SDK server of the contract tests, each started with this interpreter. Three figures, the
median of ROUNDS runs each:

- concurrent: one `SdkMcpHub` starts the three at once; time from `start()` until all are ready;
- sequential: the three started one after the other (one hub each), the sum of their times to
  ready — what a runtime that starts servers in turn would wait;
- warm cache: a hub whose discovery cache holds the three lists; time from `start()` until
  `tools()` holds all three (and, next to it, until the live lists have replaced them).

    python benchmarks/bench_mcp.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from soong_agent.adapters.mcp import SdkMcpHub
from soong_agent.ports.mcp import McpServerSpec

ROOT = Path(__file__).resolve().parents[1]
CONTRACT_SERVER = ROOT / "tests" / "support" / "mcp_servers" / "contract_server.py"


def specs(repo: Path) -> list[McpServerSpec]:
    python = sys.executable
    return [
        McpServerSpec("time", "stdio", command=python, args=("-m", "mcp_server_time")),
        McpServerSpec(
            "git", "stdio", command=python, args=("-m", "mcp_server_git", "--repository", str(repo))
        ),
        McpServerSpec("sdk", "stdio", command=python, args=(str(CONTRACT_SERVER),)),
    ]


async def to_ready(
    servers: Sequence[McpServerSpec], cache: Path | None = None
) -> tuple[float, float]:
    """Seconds from start() until every server has tools, and until every one is live."""
    hub = SdkMcpHub(servers, startup_timeout_s=30, cache_dir=cache)
    started = time.perf_counter()
    hub.start()
    try:
        while {tool.server for tool in hub.tools()} != {spec.name for spec in servers}:
            await hub.wait_ready(30)
            if time.perf_counter() - started > 30:
                raise RuntimeError(f"not ready: {hub.health()}")
        listed = time.perf_counter() - started
        while any(health.state != "ready" for health in hub.health()):
            if any(health.state == "failed" for health in hub.health()):
                raise RuntimeError(f"a server failed: {hub.health()}")
            await asyncio.sleep(0.005)
        live = time.perf_counter() - started
    finally:
        await hub.aclose()
    return listed, live


async def measure(servers: Sequence[McpServerSpec], cache: Path, rounds: int) -> None:
    await to_ready(servers, cache)  # warms the OS caches and fills the discovery cache
    concurrent, sequential, warm, warm_live = [], [], [], []
    for _ in range(rounds):
        concurrent.append((await to_ready(servers))[1])
        sequential.append(sum([(await to_ready([spec]))[1] for spec in servers]))
        listed, live = await to_ready(servers, cache)
        warm.append(listed)
        warm_live.append(live)
    print(f"3 stdio servers (time, git, sdk), median of {rounds} rounds")
    print(f"  concurrent start, all ready:      {_ms(concurrent)}")
    print(f"  sequential starts, sum to ready:  {_ms(sequential)}")
    print(f"  warm discovery cache, tools:      {_ms(warm)}   (live lists after {_ms(warm_live)})")


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:8.1f} ms"


def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        repo = Path(folder) / "repo"
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        asyncio.run(measure(specs(repo), Path(folder) / "cache", rounds))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    main(parser.parse_args().rounds)
