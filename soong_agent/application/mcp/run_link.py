"""One run's link to the MCP hub (MCP-1): health as events, waiting for start-up, tool changes.

At the run's start the servers are started (if the runtime has not started them yet) and their
current states recorded; every later change is a `mcp_server` event of the run while it lasts.
Before the first model call the run waits for servers still starting, at most the start-up
timeout (a server with a cached tool list does not make it wait); before every call, tools of
servers that became ready or whose list changed are taken in.
"""

from __future__ import annotations

from collections.abc import Callable

from soong_agent.application.mcp.asking import RunAsking
from soong_agent.application.mcp.tools import RunTools
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.ports.events import McpServerEvent
from soong_agent.ports.mcp import McpHub, ServerHealth


def record_health(rec: RunRecorder, health: ServerHealth) -> None:
    """One server's state as a run event (env values and headers never reach it: the hub
    keeps them out of `detail` and `stderr_tail`)."""
    rec.event(
        McpServerEvent,
        server=health.server,
        state=health.state,
        transport=health.transport,
        detail=health.detail,
        tool_count=health.tool_count,
        version=health.version,
        exit_code=health.exit_code,
        stderr_tail=list(health.stderr_tail),
        attempt=health.attempt,
        backoff_s=health.backoff_s,
        startup_ms=health.startup_ms,
        from_cache=health.from_cache,
    )


class McpRunLink:
    """Connects one run to the hub for as long as the run lasts."""

    def __init__(self, hub: McpHub, tools: RunTools, *, startup_timeout_s: float) -> None:
        self._hub = hub
        self._tools = tools
        self._startup_timeout_s = startup_timeout_s
        self._waited = False
        self._detach: Callable[[], None] | None = None
        self._leave: Callable[[], None] | None = None
        self.asking: RunAsking | None = None
        """What the run answers servers' sampling and elicitation requests with (MCP-4)
        while it lasts; None: it answers none."""

    def attach(self, rec: RunRecorder) -> None:
        """Start the servers (idempotent), record each one's state, follow its changes, and
        answer what servers ask for this run."""
        self._hub.start()
        for health in self._hub.health():
            record_health(rec, health)
        self._detach = self._hub.add_listener(lambda health: record_health(rec, health))
        if self.asking is not None:
            self._leave = self.asking.enter()

    async def before_call(self) -> bool:
        """Wait for start-up once, then take in tool changes; True when the tools changed."""
        if not self._waited:
            self._waited = True
            await self._hub.wait_ready(self._startup_timeout_s)
        return self._tools.refresh()

    def detach(self) -> None:
        if self._detach is not None:
            self._detach()
            self._detach = None
        if self._leave is not None:
            self._leave()
            self._leave = None
