"""An `McpHub` that plays declared servers, for testing what uses MCP tools without processes.

It keeps the rules of `SdkMcpHub` (the shared contract suite runs on both):

- nothing is callable before `start()`; `start()` needs a running event loop and is
  idempotent; every server goes `starting` → its declared state (`ready` unless told
  otherwise) after its `delay_s`, really waited for, so `wait_ready` and a call's wait behave
  as with real servers; a server slower than `startup_timeout_s` is `failed` at that timeout
  (`no answer to initialize within … s`), as `SdkMcpHub` fails it;
- a call to an unknown server, to a server that is not ready, or of a tool the server does not
  list raises `McpError`; a result that takes longer than `timeout_s` raises `McpError`;
- a failed or stopped server offers no tools; `generation` grows whenever `tools()` may have
  changed; listeners hear every health change;
- `list_resources` / `read_resource` of a server declared without resources raise `McpError`.

Tests drive changes with `set_tools` (a `tools/list_changed`) and `set_state` (a crash, a
restart, a failure).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from soong_agent.ports.mcp import (
    HealthListener,
    McpCallResult,
    McpContent,
    McpError,
    McpResource,
    McpTool,
    ServerHealth,
    ServerState,
    Transport,
)

log = logging.getLogger(__name__)

ScriptedResult = (
    McpCallResult
    | McpError
    | Callable[[Mapping[str, Any]], McpCallResult | Awaitable[McpCallResult]]
)
"""What a scripted tool does: a result, an error to raise, or a function of the arguments
(sync or async; an async one that never returns is a call that hangs)."""


@dataclass(frozen=True, slots=True)
class ScriptedMcpServer:
    """One declared server: its tools (`McpTool`s, or bare names for a tool taking an empty
    object), what each call returns, its resources (None: no resources capability), the state
    it reaches after `delay_s` and the detail that goes with it."""

    name: str
    tools: Sequence[McpTool | str] = ()
    results: Mapping[str, ScriptedResult] = field(default_factory=dict)
    resources: Sequence[McpResource] | None = None
    contents: Mapping[str, McpCallResult] = field(default_factory=dict)
    state: ServerState = "ready"
    detail: str = ""
    delay_s: float = 0.0
    transport: Transport = "stdio"
    version: str | None = "1.0"


@dataclass(frozen=True, slots=True)
class McpCall:
    """One call the fake received."""

    server: str
    tool: str
    arguments: Mapping[str, Any]
    timeout_s: float


class ScriptedMcpHub:
    """`McpHub` from declared servers; every call that reached a ready server is recorded in
    `calls` (one refused because the server is unknown or down is not)."""

    def __init__(
        self, servers: Sequence[ScriptedMcpServer] = (), *, startup_timeout_s: float = 10.0
    ) -> None:
        names = [server.name for server in servers]
        if len(set(names)) != len(names):
            raise ValueError("a scripted mcp server is declared twice")
        self._declared = {server.name: server for server in servers}
        self._order = tuple(names)
        self._tools: dict[str, tuple[McpTool, ...]] = {
            server.name: tuple(_tool(server.name, item) for item in server.tools)
            for server in servers
        }
        self._health = {
            server.name: ServerHealth(
                server.name, "stopped", server.transport, detail="not started"
            )
            for server in servers
        }
        self._startup_timeout_s = startup_timeout_s
        self._listed: set[str] = set()
        self._generation = 0
        self._listeners: list[HealthListener] = []
        self._changed: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._started = False
        self.calls: list[McpCall] = []
        self.closed = False

    # --- the port ------------------------------------------------------------------------------

    @property
    def servers(self) -> Sequence[str]:
        return self._order

    @property
    def generation(self) -> int:
        return self._generation

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._started:
            return
        self._started = True
        self.closed = False
        self._changed = asyncio.Event()
        for name in self._order:
            self._update(name, "starting", detail="starting")
            self._tasks.append(loop.create_task(self._settle(self._declared[name])))

    async def wait_ready(self, timeout_s: float) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                while self._changed is not None and not all(
                    h.state in ("ready", "failed", "stopped") or h.server in self._listed
                    for h in self.health()
                ):
                    await self._changed.wait()
        except TimeoutError:
            return

    def tools(self) -> list[McpTool]:
        found: list[McpTool] = []
        for name in self._order:
            if name in self._listed and self._health[name].state not in ("failed", "stopped"):
                found.extend(self._tools[name])
        return found

    def health(self) -> list[ServerHealth]:
        return [self._health[name] for name in self._order]

    def add_listener(self, listener: HealthListener) -> Callable[[], None]:
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def has_resources(self, server: str) -> bool:
        declared = self._declared.get(server)
        return declared is not None and declared.resources is not None

    async def call_tool(
        self, server: str, tool: str, arguments: Mapping[str, Any], *, timeout_s: float
    ) -> McpCallResult:
        declared = await self._ready(server, f"call tool {tool!r}")
        self.calls.append(McpCall(server, tool, dict(arguments), timeout_s))
        if all(known.name != tool for known in self._tools[server]):
            raise McpError(f"mcp server {server!r} has no tool {tool!r}")
        scripted = declared.results.get(tool)
        if scripted is None:
            return McpCallResult(content=(McpContent(kind="text", text=f"{tool}: ok"),))
        if isinstance(scripted, McpError):
            raise McpError(str(scripted))
        if isinstance(scripted, McpCallResult):
            return scripted
        try:
            async with asyncio.timeout(timeout_s):
                answer = scripted(arguments)
                if inspect.isawaitable(answer):
                    answer = await answer
        except TimeoutError:
            raise McpError(
                f"mcp server {server!r}: call tool {tool!r} did not finish within {timeout_s:g} s"
            ) from None
        return answer

    async def list_resources(self, server: str, *, timeout_s: float) -> list[McpResource]:
        declared = await self._ready(server, "list resources")
        if declared.resources is None:
            raise McpError(f"mcp server {server!r} offers no resources")
        return list(declared.resources)

    async def read_resource(self, server: str, uri: str, *, timeout_s: float) -> McpCallResult:
        declared = await self._ready(server, f"read resource {uri!r}")
        if declared.resources is None:
            raise McpError(f"mcp server {server!r} offers no resources")
        content = declared.contents.get(uri)
        if content is None:
            raise McpError(f"mcp server {server!r}: read resource {uri!r} failed: unknown resource")
        return content

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for name in self._order:
            if self._health[name].state not in ("stopped", "failed"):
                self._update(name, "stopped", detail="stopped")
        self._started = False
        self.closed = True
        self._generation += 1

    # --- what tests drive ----------------------------------------------------------------------

    def set_tools(self, server: str, tools: Sequence[McpTool | str]) -> None:
        """The server's list changed (as on `notifications/tools/list_changed`)."""
        self._tools[self._known(server)] = tuple(_tool(server, item) for item in tools)
        self._generation += 1
        if self._health[server].state == "ready":
            self._update(server, "ready", detail=_tools_detail(self._tools[server]))

    def set_state(self, server: str, state: ServerState, detail: str = "", **fields: Any) -> None:
        """Move the server to `state` (a crash, a restart, a failure), telling the listeners."""
        self._known(server)
        self._generation += 1
        self._update(server, state, detail=detail, **fields)

    # --- helpers -------------------------------------------------------------------------------

    async def _settle(self, declared: ScriptedMcpServer) -> None:
        if declared.delay_s > self._startup_timeout_s:
            await asyncio.sleep(self._startup_timeout_s)
            timeout = f"no answer to initialize within {self._startup_timeout_s:g} s"
            self._update(declared.name, "failed", detail=timeout)
            return
        if declared.delay_s > 0:
            await asyncio.sleep(declared.delay_s)
        self._generation += 1
        detail = declared.detail
        if declared.state == "ready" and not detail:
            detail = _tools_detail(self._tools[declared.name])
        self._update(declared.name, declared.state, detail=detail)

    def _known(self, server: str) -> str:
        if server not in self._declared:
            known = ", ".join(self._order) or "none"
            raise McpError(f"no mcp server {server!r} (servers: {known})")
        return server

    async def _ready(self, server: str, what: str) -> ScriptedMcpServer:
        self._known(server)
        try:
            async with asyncio.timeout(self._startup_timeout_s):
                while self._health[server].state == "starting" and self._changed is not None:
                    await self._changed.wait()
        except TimeoutError:
            raise McpError(
                f"cannot {what}: mcp server {server!r} is still starting after "
                f"{self._startup_timeout_s:g} s"
            ) from None
        health = self._health[server]
        if health.state != "ready":
            raise McpError(f"cannot {what}: {_down(health)}")
        return self._declared[server]

    def _update(self, server: str, state: ServerState, *, detail: str, **fields: Any) -> None:
        declared = self._declared[server]
        ready = state == "ready"
        if ready:
            self._listed.add(server)
        elif state == "failed":
            self._listed.discard(server)
        self._health[server] = replace(
            ServerHealth(server, state, declared.transport),
            detail=detail,
            tool_count=len(self._tools[server]) if server in self._listed else None,
            version=declared.version if ready else None,
            **fields,
        )
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()
        for listener in list(self._listeners):
            try:
                listener(self._health[server])
            except Exception:
                log.exception("an mcp health listener failed on %r", server)


def _tool(server: str, item: McpTool | str) -> McpTool:
    if isinstance(item, McpTool):
        if item.server != server:
            return replace(item, server=server)
        return item
    return McpTool(server=server, name=item, description="", input_schema={"type": "object"})


def _down(health: ServerHealth) -> str:
    """The same words as `SdkMcpHub` for a server that cannot take a call."""
    name = health.server
    if health.state == "stopped":
        started = health.detail != "not started"
        return f"mcp server {name!r} is {'stopped' if started else 'not started'}"
    if health.state == "restarting":
        return f"mcp server {name!r} is restarting after a crash ({health.detail})"
    return f"mcp server {name!r} {health.state}: {health.detail}"


def _tools_detail(tools: Sequence[McpTool]) -> str:
    return f"{len(tools)} tool" + ("" if len(tools) == 1 else "s")
