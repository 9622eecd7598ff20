"""`SdkMcpHub`: every configured MCP server of a runtime, over the `mcp` SDK (MCP-1, MCP-2).

Each server lives in its own asyncio task (`start()` creates them and returns at once). That
task owns the SDK's async context managers of the server's current run — transport, then
`ClientSession` — and enters and leaves them itself, as anyio's cancel scopes require; other
tasks only send requests through the session. A run ends when the hub cancels its scope: the
server exited (stdio: its exit code is known), it did not answer `initialize` or `tools/list`
within the start-up timeout, it wrote something that is not JSON-RPC on stdout before it was
ready, the connection closed, or the hub is closing.

What is guaranteed:

- servers start concurrently; a slow one never holds the others back, and `wait_ready` returns
  by its timeout whatever they do;
- a server that cannot start is `failed` with a one-line reason (stdio: exit code and the last
  stderr line; `stderr_tail` keeps up to 20 lines) and is not retried;
- a server that was ready and stops is `crashed`, then `restarting` with doubling backoff, then
  `starting` again, at most `RestartPolicy.max_attempts` times in a row, then `failed`;
- a call to a server that is down raises `McpError` at once saying so; a call to a server still
  starting waits for it (up to the start-up timeout); a call that does not finish in its time
  raises `McpError` and the server stays usable;
- `notifications/tools/list_changed` refreshes the server's list (`generation` grows);
- listeners are called on the event loop on every change of a server's health;
- `aclose()` stops every server (stdin closed, then the process group signalled, as the SDK
  does; a group still there afterwards is killed) and leaves no process behind;
- no value of a spec's `env` or `headers` appears in an error message or a health detail.

One server's life (start, serve, end, classify, restart) is the state machine of
`server_life.py` over the state of `state.py`; `health.py` posts its changes, `transports.py`
connects, `failures.py` reads the SDK's exceptions. What is here is the port it serves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp.client.session import ClientSession

from soong_agent.adapters.mcp import convert, failures
from soong_agent.adapters.mcp.access import ServerAccess
from soong_agent.adapters.mcp.asks import AskSettings
from soong_agent.adapters.mcp.auth.provider import Authorize
from soong_agent.adapters.mcp.cache import DiscoveryCache
from soong_agent.adapters.mcp.health import HealthBoard
from soong_agent.adapters.mcp.sdk_logs import install_sdk_log_filters
from soong_agent.adapters.mcp.server_life import ServerLife
from soong_agent.adapters.mcp.state import RestartPolicy, RunEnd, ServerSlot
from soong_agent.adapters.mcp.text import one_line
from soong_agent.adapters.mcp.transports import PAGE_LIMIT, our_version
from soong_agent.ports.mcp import (
    Elicitor,
    HealthListener,
    McpCallResult,
    McpError,
    McpResource,
    McpServerSpec,
    McpTool,
    Sampler,
    ServerHealth,
)

log = logging.getLogger(__name__)


CALL_GRACE_S = 2.0
"""How long past a request's own timeout the hub waits for the SDK to give up on it."""
_CLOSE_TIMEOUT_S = 10.0


class SdkMcpHub:
    """`McpHub` over the `mcp` SDK for stdio, streamable HTTP and SSE servers.

    `startup_timeout_s` bounds one start (connect, `initialize`, the first `tools/list`) and how
    long a call waits for a server still starting; `call_timeout_s` bounds the hub's own requests
    (a changed tool list). `cache_dir` holds the discovery cache (None: no cache), whose entries
    are used for `cache_ttl_s`. `stderr_lines` is how many of a stdio server's last stderr lines
    are kept. `clock` is the wall clock of cache entries. `auth_home` holds the OAuth token
    files of HTTP and SSE servers (`mcp-auth/`; None: no OAuth); `authorize` takes a person
    through a login a server asks for (None: such a server fails, `needs login (run: …)`).
    A server's questions go to `elicitation` and its sampling requests to `sampling` (None:
    declined); `roots/list` answers `roots` (none: the client does not offer roots).
    """

    def __init__(
        self,
        specs: Sequence[McpServerSpec],
        *,
        startup_timeout_s: float = 10.0,
        call_timeout_s: float = 60.0,
        cache_dir: Path | None = None,
        cache_ttl_s: float = 300.0,
        restart: RestartPolicy | None = None,
        stderr_lines: int = 20,
        clock: Callable[[], float] = time.time,
        auth_home: Path | None = None,
        authorize: Authorize | None = None,
        elicitation: Elicitor | None = None,
        sampling: Sampler | None = None,
        roots: Sequence[Path] = (),
    ) -> None:
        names = [spec.name for spec in specs]
        duplicated = sorted({name for name in names if names.count(name) > 1})
        if duplicated:
            raise ValueError(f"mcp servers declared twice: {', '.join(duplicated)}")
        self._servers = {spec.name: ServerSlot(spec) for spec in specs}
        self._order = tuple(names)
        self._startup_timeout_s = startup_timeout_s
        self._board = HealthBoard(DiscoveryCache(cache_dir, cache_ttl_s, clock=clock))
        self._life = ServerLife(
            self._board,
            startup_timeout_s=startup_timeout_s,
            call_timeout_s=call_timeout_s,
            restart=restart or RestartPolicy(),
            stderr_lines=stderr_lines,
            client_info=types.Implementation(name="soong-agent", version=our_version()),
            access=ServerAccess(auth_home, authorize),
            asks=AskSettings(elicitation, sampling, tuple(roots)),
        )
        install_sdk_log_filters()

    # --- the port ------------------------------------------------------------------------------

    @property
    def servers(self) -> Sequence[str]:
        """The configured servers, in configuration order."""
        return self._order

    @property
    def generation(self) -> int:
        """Grows whenever `tools()` may have changed."""
        return self._board.generation

    def start(self) -> None:
        """Start every server that has no task yet (idempotent; needs a running event loop).

        A server with a discovery cache entry offers the cached tools from now on."""
        loop = asyncio.get_running_loop()
        if self._board.changed is None:
            self._board.changed = anyio.Event()
        for srv in self._servers.values():
            if srv.task is not None:
                continue
            srv.stopping = False
            srv.changed = anyio.Event()
            srv.stop_event = anyio.Event()
            srv.refresh = anyio.Event()
            cached = self._board.cache.load(srv.spec)
            if cached is not None:
                srv.tools = cached.tools
                srv.from_cache = True
                srv.has_resources = cached.has_resources
                srv.version = cached.version
                self._board.generation += 1
            self._board.set(srv, "starting", detail=srv.starting_detail())
            srv.task = loop.create_task(self._life.run(srv), name=f"mcp-server-{srv.name}")

    async def wait_ready(self, timeout_s: float) -> None:
        """Return once every server is ready, failed, stopped or has a tool list (cached, or
        from before a crash), or after `timeout_s`."""
        with anyio.move_on_after(timeout_s):
            while True:
                changed = self._board.changed
                if changed is None or all(srv.settled() for srv in self._servers.values()):
                    return
                await changed.wait()

    def tools(self) -> list[McpTool]:
        """Every tool known now, servers in configuration order (none of a failed or stopped
        server; a crashed one keeps its last list while it is restarted)."""
        found: list[McpTool] = []
        for name in self._order:
            srv = self._servers[name]
            if srv.tools is not None and srv.health.state not in ("failed", "stopped"):
                found.extend(srv.tools)
        return found

    def health(self) -> list[ServerHealth]:
        """Every server's current health, in configuration order."""
        return [self._servers[name].health for name in self._order]

    def add_listener(self, listener: HealthListener) -> Callable[[], None]:
        """Call `listener` on every health change; returns its remover (idempotent)."""
        return self._board.add_listener(listener)

    def has_resources(self, server: str) -> bool:
        """Whether the server announced the resources capability (live, else cached)."""
        srv = self._servers.get(server)
        return srv is not None and srv.has_resources

    async def set_roots(self, roots: Sequence[Path]) -> None:
        """Answer `roots/list` with `roots` from now on, and tell every ready server
        (`notifications/roots/list_changed`)."""
        self._life.asks.roots = tuple(roots)
        for srv in self._servers.values():
            session = srv.session
            if session is None or srv.health.state != "ready":
                continue
            try:
                await session.send_roots_list_changed()
            except Exception as exc:
                log.warning(
                    "mcp server %r: roots/list_changed could not be sent: %s",
                    srv.name,
                    srv.scrub(failures.describe(exc)),
                )

    async def call_tool(
        self, server: str, tool: str, arguments: Mapping[str, Any], *, timeout_s: float
    ) -> McpCallResult:
        """Call `tool` of `server`; `McpError` when the server is unknown or down, the tool is
        not in its list, the call fails or does not finish within `timeout_s`."""
        srv = self._get(server)
        what = f"call tool {tool!r}"
        session = await self._session(srv, what)
        if srv.tools is not None and all(known.name != tool for known in srv.tools):
            raise McpError(f"mcp server {server!r} has no tool {tool!r}")
        try:
            with anyio.fail_after(timeout_s + CALL_GRACE_S):
                result = await session.call_tool(
                    tool, dict(arguments), read_timeout_seconds=timeout_s
                )
        except Exception as exc:
            raise self._request_error(srv, session, what, exc, timeout_s) from None
        if not isinstance(result, types.CallToolResult):
            raise McpError(
                f"mcp server {server!r}: {what}: answered a {type(result).__name__}, not a result"
            )
        return convert.call_result(result)

    async def list_resources(self, server: str, *, timeout_s: float) -> list[McpResource]:
        """The server's resources, every page; `McpError` when it offers none or is down."""
        srv = self._get(server)
        what = "list resources"
        session = await self._session(srv, what)
        if not srv.has_resources:
            raise McpError(f"mcp server {server!r} offers no resources")
        found: list[McpResource] = []
        try:
            with anyio.fail_after(timeout_s):
                cursor: str | None = None
                for _ in range(PAGE_LIMIT):
                    params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    page = await session.list_resources(params=params)
                    found.extend(convert.resource(server, item) for item in page.resources)
                    cursor = page.next_cursor
                    if not cursor:
                        return found
        except Exception as exc:
            raise self._request_error(srv, session, what, exc, timeout_s) from None
        raise McpError(f"mcp server {server!r}: {what}: more than {PAGE_LIMIT} pages")

    async def read_resource(self, server: str, uri: str, *, timeout_s: float) -> McpCallResult:
        """One resource's contents as a result of resource blocks."""
        srv = self._get(server)
        what = f"read resource {uri!r}"
        session = await self._session(srv, what)
        if not srv.has_resources:
            raise McpError(f"mcp server {server!r} offers no resources")
        try:
            with anyio.fail_after(timeout_s):
                result = await session.read_resource(uri)
        except Exception as exc:
            raise self._request_error(srv, session, what, exc, timeout_s) from None
        return convert.read_result(result)

    async def aclose(self) -> None:
        """Stop every server and wait for it; a process group left over is killed."""
        for srv in self._servers.values():
            srv.stopping = True
            if srv.stop_event is not None:
                srv.stop_event.set()
            self._life.end_run(srv, RunEnd("stopped", "stopped"))
        tasks = {srv.task: srv for srv in self._servers.values() if srv.task is not None}
        stuck: list[ServerSlot] = []
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=_CLOSE_TIMEOUT_S)
            for task in pending:
                log.warning("mcp server %r did not stop in time; cancelling it", tasks[task].name)
                stuck.append(tasks[task])
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=_CLOSE_TIMEOUT_S)
        for srv in self._servers.values():
            leftover = srv.watch is not None and (srv in stuck or not srv.watch.done.is_set())
            if leftover and srv.watch is not None and srv.watch.kill_group():
                log.warning("mcp server %r: killed its leftover process group", srv.name)
            srv.task = None
            if srv.health.state not in ("stopped", "failed"):
                self._board.set(srv, "stopped", detail="stopped")
        self._board.generation += 1

    # --- one server's life ---------------------------------------------------------------------

    # --- helpers -------------------------------------------------------------------------------

    def _get(self, server: str) -> ServerSlot:
        srv = self._servers.get(server)
        if srv is None:
            known = ", ".join(self._order) or "none"
            raise McpError(f"no mcp server {server!r} (servers: {known})")
        return srv

    async def _session(self, srv: ServerSlot, what: str) -> ClientSession:
        """The server's session once it is ready; waits while it is starting (up to the start-up
        timeout); `McpError` at once when it is down."""
        deadline = anyio.current_time() + self._startup_timeout_s
        while True:
            state = srv.health.state
            if state == "ready" and srv.session is not None:
                return srv.session
            if state != "starting" or srv.changed is None:
                raise McpError(f"cannot {what}: {srv.down()}")
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                raise McpError(
                    f"cannot {what}: mcp server {srv.name!r} is still starting after "
                    f"{self._startup_timeout_s:g} s"
                )
            with anyio.move_on_after(remaining):
                await srv.changed.wait()

    def _request_error(
        self, srv: ServerSlot, session: ClientSession, what: str, exc: Exception, timeout_s: float
    ) -> McpError:
        log.debug("mcp server %r: %s failed", srv.name, what, exc_info=exc)
        kind, message = failures.request_failure(srv.name, what, exc, timeout_s)
        if kind == "closed" and srv.session is session:
            self._life.end_run(srv, RunEnd("exited", "closed the connection"))
        return McpError(one_line(srv.scrub(message)))
