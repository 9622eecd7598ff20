"""`soong-agent mcp status` and `soong-agent mcp tools SERVER` (MCP-1).

`status` starts every configured server (never a project's: only the home's `mcp.json`),
waits for each to be ready or to fail (at most `tools.mcp.startup_timeout_ms`, plus a little to
hear the last answers), prints one line per server (state, transport, tools, start-up time,
the reason of a failure with its last stderr line) and exits 1 when any failed or did not start
in time. `tools` prints one server's tools, as the model would see them named.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

from soong_agent.entrypoints.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, fail, guarded
from soong_agent.ports.mcp import McpHub, ServerHealth

if TYPE_CHECKING:
    from soong_agent.adapters.config.toml_loader import LoadedConfig

SETTLE_S = 0.5
"""Beyond the start-up timeout, how long `status` listens for the servers' last answers."""


def health_line(h: ServerHealth) -> str:
    """One line per server for `mcp status`."""
    parts = [f"{h.server:<20} {h.state:<10} {h.transport:<5}"]
    if h.state == "ready":
        parts.append(f"{h.tool_count or 0} tools")
        if h.startup_ms is not None:
            parts.append(f"started in {h.startup_ms:.0f} ms")
        if h.version:
            parts.append(f"version {h.version}")
    elif h.detail:
        parts.append(h.detail)
    if h.state in ("failed", "crashed") and h.stderr_tail:
        parts.append(f"stderr: {h.stderr_tail[-1]}")
    return "  ".join(parts)


async def _settled(hub: McpHub, timeout_s: float) -> list[ServerHealth]:
    hub.start()
    await hub.wait_ready(timeout_s)
    deadline = asyncio.get_running_loop().time() + SETTLE_S
    while asyncio.get_running_loop().time() < deadline:
        if all(h.state in ("ready", "failed") and not h.from_cache for h in hub.health()):
            break
        await asyncio.sleep(0.05)
    return hub.health()


def _hub(loaded: LoadedConfig) -> McpHub | None:
    """A hub of the configured servers without the discovery cache (status is about the
    servers as they are now); the caller closes it."""
    from soong_agent.entrypoints.factories import mcp_hub

    return mcp_hub(loaded, [], use_cache=False)


async def _status(loaded: LoadedConfig) -> int:
    hub = _hub(loaded)
    if hub is None:
        sys.stdout.write(f"no MCP servers: {loaded.home / 'mcp.json'} declares none\n")
        return EXIT_OK
    timeout_s = loaded.config.tools.mcp.startup_timeout_ms / 1000
    try:
        states = await _settled(hub, timeout_s)
    finally:
        await hub.aclose()
    for health in states:
        sys.stdout.write(health_line(health) + "\n")
    bad = [h.server for h in states if h.state != "ready"]
    if bad:
        sys.stderr.write(f"soong-agent: {len(bad)} MCP server(s) not ready: {', '.join(bad)}\n")
        return EXIT_FAILED
    return EXIT_OK


async def _tools(loaded: LoadedConfig, server: str) -> int:
    from soong_agent.application.mcp.tools import mcp_tool_name

    hub = _hub(loaded)
    if hub is None or server not in hub.servers:
        known = ", ".join(hub.servers) if hub is not None else "none"
        return fail(f"no MCP server {server!r} in {loaded.home / 'mcp.json'} (servers: {known})", 2)
    timeout_s = loaded.config.tools.mcp.startup_timeout_ms / 1000
    try:
        states = {h.server: h for h in await _settled(hub, timeout_s)}
        tools = [t for t in hub.tools() if t.server == server]
    finally:
        await hub.aclose()
    health = states[server]
    if health.state != "ready":
        return fail(f"MCP server {server!r} is {health.state}: {health.detail}", EXIT_FAILED)
    for tool in tools:
        first = tool.description.strip().splitlines()[0] if tool.description.strip() else ""
        sys.stdout.write(f"{mcp_tool_name(server, tool.name)}  {first}\n")
    if not tools:
        sys.stdout.write(f"MCP server {server!r} offers no tools\n")
    return EXIT_OK


def mcp_status(*, path: str | None) -> int:
    """`soong-agent mcp status`."""
    from soong_agent.entrypoints.sdk import load

    return guarded(lambda: asyncio.run(_status(load(path, None))))


def mcp_tools(*, server: str, path: str | None) -> int:
    """`soong-agent mcp tools SERVER`."""
    from soong_agent.entrypoints.sdk import load

    if not server:
        return fail("name the server: soong-agent mcp tools SERVER", EXIT_USAGE)
    return guarded(lambda: asyncio.run(_tools(load(path, None), server)))
