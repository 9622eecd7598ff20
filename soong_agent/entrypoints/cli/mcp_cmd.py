"""`soong-agent mcp status`, `mcp tools SERVER`, `mcp login SERVER` and `mcp logout SERVER`
(MCP-1, MCP-3).

`status` starts every configured server (never a project's: only the home's `mcp.json`),
waits for each to be ready or to fail (at most `tools.mcp.startup_timeout_ms`, plus a little to
hear the last answers), prints one line per server (state, transport, tools, start-up time,
the reason of a failure with its last stderr line) and exits 1 when any failed or did not start
in time. `tools` prints one server's tools, as the model would see them named.

`login` takes the user through one HTTP or SSE server's OAuth authorization: it opens the
authorization URL in the browser (or prints it, with `--no-browser` or when no browser opens),
waits for the redirect on the loopback listener, and keeps the tokens in
`${home}/mcp-auth/<server>.json` (mode 0600). `logout` deletes that file.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

from soong_agent.entrypoints.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, fail, guarded
from soong_agent.ports.mcp import McpHub, McpServerSpec, ServerHealth

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


def _oauth_spec(loaded: LoadedConfig, server: str) -> McpServerSpec | str:
    """The spec of `server` when it can log in; else why not."""
    from soong_agent.adapters.mcp import load_mcp_servers

    specs = {spec.name: spec for spec in load_mcp_servers(loaded.home, ())}
    spec = specs.get(server)
    where = loaded.home / "mcp.json"
    if spec is None:
        return f"no MCP server {server!r} in {where} (servers: {', '.join(specs) or 'none'})"
    if spec.transport == "stdio":
        return f"MCP server {server!r} is a stdio server: OAuth is for http and sse servers"
    if spec.oauth is None:
        return (
            f"MCP server {server!r} has OAuth turned off in {where} "
            '("oauth": false, or its own Authorization header)'
        )
    return spec


async def _login(loaded: LoadedConfig, spec: McpServerSpec, *, browser: bool) -> int:
    import webbrowser

    from soong_agent.adapters.mcp import SdkMcpHub
    from soong_agent.adapters.mcp.auth.provider import LOGIN_TIMEOUT_S
    from soong_agent.adapters.mcp.auth.store import TokenFile, token_path

    assert spec.url is not None
    store = TokenFile(token_path(loaded.home, spec.name), spec.url)
    store.forget_tokens()  # a login is asked for: make a fresh one, keep the registration
    asked: list[str] = []

    async def authorize(server: str, url: str) -> None:
        asked.append(url)
        opened = False
        if browser:
            opened = await asyncio.to_thread(webbrowser.open, url)
        if opened:
            sys.stderr.write(
                f"Opened the browser to log in to {server}. If it did not open, visit:\n"
            )
        else:
            sys.stderr.write(f"To log in to {server}, open this URL in a browser:\n")
        sys.stderr.write(
            f"  {url}\nWaiting for the authorization (at most {LOGIN_TIMEOUT_S:g} s)...\n"
        )
        sys.stderr.flush()

    hub = SdkMcpHub(
        [spec],
        startup_timeout_s=LOGIN_TIMEOUT_S + 30,
        call_timeout_s=loaded.config.tools.mcp.call_timeout_ms / 1000,
        auth_home=loaded.home,
        authorize=authorize,
    )
    try:
        hub.start()
        await hub.wait_ready(LOGIN_TIMEOUT_S + 30)
        [health] = hub.health()
    finally:
        await hub.aclose()
    if health.state != "ready":
        return fail(f"login to MCP server {spec.name!r} failed: {health.detail}", EXIT_FAILED)
    if not TokenFile(store.path, spec.url).has_tokens():  # as the hub left it
        sys.stdout.write(
            f"MCP server {spec.name!r} did not ask for authorization: nothing to log in to\n"
        )
        return EXIT_OK
    how = "authorized" if asked else "authorized with its client credentials"
    sys.stdout.write(
        f"MCP server {spec.name!r} {how}: {health.tool_count or 0} tools; tokens in {store.path}\n"
    )
    return EXIT_OK


def mcp_login(*, server: str, browser: bool, path: str | None) -> int:
    """`soong-agent mcp login SERVER [--no-browser]`."""
    from soong_agent.entrypoints.sdk import load

    def body() -> int:
        loaded = load(path, None)
        spec = _oauth_spec(loaded, server)
        if isinstance(spec, str):
            return fail(spec, EXIT_USAGE)
        return asyncio.run(_login(loaded, spec, browser=browser))

    return guarded(body)


def mcp_logout(*, server: str, path: str | None) -> int:
    """`soong-agent mcp logout SERVER`: forget its tokens and registered client."""
    from soong_agent.adapters.mcp.auth.store import token_path
    from soong_agent.entrypoints.sdk import load

    def body() -> int:
        loaded = load(path, None)
        spec = _oauth_spec(loaded, server)
        if isinstance(spec, str):
            return fail(spec, EXIT_USAGE)
        target = token_path(loaded.home, server)
        try:
            target.unlink()
        except FileNotFoundError:
            sys.stdout.write(f"MCP server {server!r}: no stored login\n")
            return EXIT_OK
        sys.stdout.write(f"MCP server {server!r}: logged out (removed {target})\n")
        return EXIT_OK

    return guarded(body)


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
