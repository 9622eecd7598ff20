"""MCP servers for the hub's tests: a real `mcp` SDK server (`contract_server.py`) and a tiny
stdio server (`line_server.py`) whose modes misbehave on purpose (exit at start, never answer,
write garbage, crash on the second call). Both take `--marker X`, ignored, so a test can find
their processes in /proc."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from soong_agent.ports.mcp import McpServerSpec

HERE = Path(__file__).parent
CONTRACT_SERVER = HERE / "contract_server.py"
LINE_SERVER = HERE / "line_server.py"


def contract_spec(name: str = "contract", *, marker: str = "", **env: str) -> McpServerSpec:
    """The SDK server over stdio, run by this interpreter."""
    args = (str(CONTRACT_SERVER), *(("--marker", marker) if marker else ()))
    return McpServerSpec(name=name, transport="stdio", command=sys.executable, args=args, env=env)


def line_spec(
    name: str, mode: str, *extra: str, marker: str = "", env: Mapping[str, str] | None = None
) -> McpServerSpec:
    """The line server in `mode` (see line_server.py)."""
    args = (str(LINE_SERVER), mode, *extra, *(("--marker", marker) if marker else ()))
    return McpServerSpec(
        name=name, transport="stdio", command=sys.executable, args=args, env=dict(env or {})
    )


def processes_with(marker: str) -> list[int]:
    """Pids of live (not zombie) processes whose command line holds `marker`."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state = stat.rsplit(")", 1)[-1].split()[0] if ")" in stat else "?"
        if marker.encode() in cmdline.split(b"\0") and state != "Z":
            found.append(int(entry))
    return found
