"""What the hub keeps about each server, and the words it uses for a server's state."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import anyio
from mcp.client.session import ClientSession

from soong_agent.adapters.mcp.stdio import ProcessWatch
from soong_agent.adapters.mcp.text import Scrubber
from soong_agent.ports.mcp import McpServerSpec, McpTool, ServerHealth, ServerState

SETTLED: frozenset[ServerState] = frozenset({"ready", "failed", "stopped"})


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """How a server that was ready and stopped is started again: at most `max_attempts` times in
    a row, the first after `initial_backoff_s`, each next wait doubled (up to `max_backoff_s`).
    A server that had been ready for `healthy_after_s` before it stopped counts from zero."""

    max_attempts: int = 3
    initial_backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    healthy_after_s: float = 60.0

    def backoff_s(self, attempt: int) -> float:
        """The wait before restart number `attempt` (1-based)."""
        return float(min(self.max_backoff_s, self.initial_backoff_s * 2 ** (attempt - 1)))


@dataclass(frozen=True, slots=True)
class RunEnd:
    """Why one run of a server ended (`reason` is for people, before scrubbing)."""

    kind: Literal["stopped", "exited", "garbage", "timeout", "error"]
    reason: str
    exit_code: int | None = None


class ServerSlot:
    """One configured server: its health, its tools, and its current run (the session, the
    run's cancel scope, its process watch). Read and written on the event loop only."""

    def __init__(self, spec: McpServerSpec) -> None:
        self.spec = spec
        self.scrub = Scrubber.for_spec(spec)
        self.needs_login = False
        """The server wants an OAuth login nobody could make in this run."""
        self.auth_error: str | None = None
        """Why the OAuth flow of this run failed (one line, scrubbed)."""
        self.http_error: tuple[int, str, bool] | None = None
        """The last error status of the server's endpoint: (status, reason, a Bearer
        challenge came with it); None after a success."""
        self.health = ServerHealth(spec.name, "stopped", spec.transport, detail="not started")
        self.tools: tuple[McpTool, ...] | None = None
        self.from_cache = False
        self.has_resources = False
        self.version: str | None = None
        self.session: ClientSession | None = None
        self.scope: anyio.CancelScope | None = None
        self.end: RunEnd | None = None
        self.run_no = 0
        self.ready = False
        self.ever_ready = False
        self.ready_at = 0.0
        self.phase = "start"
        self.watch: ProcessWatch | None = None
        self.task: asyncio.Task[None] | None = None
        self.stopping = False
        self.changed: anyio.Event | None = None
        self.stop_event: anyio.Event | None = None
        self.refresh: anyio.Event | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def tail(self) -> tuple[str, ...]:
        """The last stderr lines of the latest run (stdio only), scrubbed."""
        if self.watch is None:
            return ()
        return tuple(self.scrub(line) for line in self.watch.lines)

    def settled(self) -> bool:
        """Whether `wait_ready` need not wait for this server any more."""
        return self.health.state in SETTLED or self.tools is not None

    def starting_detail(self) -> str:
        if self.tools is not None and self.from_cache:
            return f"starting; {tools_detail(self.tools)} from the discovery cache"
        return "starting"

    def down(self) -> str:
        """Why the server cannot take a request now, in one line."""
        health = self.health
        name = self.name
        if health.state == "stopped":
            started = health.detail != "not started"
            return f"mcp server {name!r} is {'stopped' if started else 'not started'}"
        if health.state == "restarting":
            return f"mcp server {name!r} is restarting after a crash ({health.detail})"
        return f"mcp server {name!r} {health.state}: {health.detail}"


def tools_detail(tools: Sequence[McpTool]) -> str:
    return f"{len(tools)} tool" + ("" if len(tools) == 1 else "s")
