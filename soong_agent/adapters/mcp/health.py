"""The health of a hub's MCP servers and who hears of it (MCP-2): each change recorded
scrubbed on one line, waiters woken, listeners called; `generation` grows whenever the tool
lists may have changed; a server's tools saved to the discovery cache once known."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio

from soong_agent.adapters.mcp.cache import DiscoveryCache
from soong_agent.adapters.mcp.state import ServerSlot
from soong_agent.adapters.mcp.text import one_line
from soong_agent.ports.mcp import HealthListener, ServerHealth, ServerState

log = logging.getLogger("soong_agent.adapters.mcp.hub")


class HealthBoard:
    """Where the servers' health changes are posted (on the event loop)."""

    def __init__(self, cache: DiscoveryCache) -> None:
        self.cache = cache
        self.generation = 0
        """Grows whenever a server's tools may have changed."""
        self.changed: anyio.Event | None = None
        """Set (then replaced) at every change of any server; None before `start`."""
        self._listeners: list[HealthListener] = []

    def add_listener(self, listener: HealthListener) -> Callable[[], None]:
        """Call `listener` on every health change; returns its remover (idempotent)."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def fail(self, srv: ServerSlot, detail: str, **fields: Any) -> None:
        """`srv` failed for good: its tools are gone."""
        if srv.tools is not None:
            self.generation += 1
        srv.tools = None
        srv.from_cache = False
        self.set(srv, "failed", detail=detail, **fields)

    def save_cache(self, srv: ServerSlot) -> None:
        """Keep `srv`'s tools in the discovery cache (when it has a list)."""
        if srv.tools is not None:
            self.cache.save(
                srv.spec, srv.tools, has_resources=srv.has_resources, version=srv.version
            )

    def set(self, srv: ServerSlot, state: ServerState, *, detail: str = "", **fields: Any) -> None:
        """Record `srv`'s new health (scrubbed, one line) and tell everyone waiting."""
        tail = fields.pop("stderr_tail", ())
        known = srv.tools is not None and state not in ("failed", "stopped")
        srv.health = ServerHealth(
            server=srv.name,
            state=state,
            transport=srv.spec.transport,
            detail=one_line(srv.scrub(detail)),
            tool_count=len(srv.tools) if known and srv.tools is not None else None,
            version=srv.version,
            stderr_tail=tuple(srv.scrub(line) for line in tail),
            from_cache=known and srv.from_cache,
            **fields,
        )
        for event in (srv.changed, self.changed):
            if event is not None:
                event.set()
        if srv.changed is not None:
            srv.changed = anyio.Event()
        if self.changed is not None:
            self.changed = anyio.Event()
        for listener in list(self._listeners):
            try:
                listener(srv.health)
            except Exception:
                log.exception("an mcp health listener failed on %r", srv.name)
