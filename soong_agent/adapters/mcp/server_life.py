"""One MCP server's life under a hub (MCP-2): start, serve, end, classify, restart.

Each server lives in its own asyncio task (`ServerLife.run`). That task owns the SDK's async
context managers of the server's current run — transport, then `ClientSession` — and enters
and leaves them itself, as anyio's cancel scopes require; other tasks only send requests
through the session. A run ends (`end_run`) when the hub cancels its scope: the server exited
(stdio: its exit code is known), it did not answer `initialize` or `tools/list` within the
start-up timeout, it wrote something that is not JSON-RPC on stdout before it was ready, the
connection closed, or the hub is closing. `state.py` holds the state, `failures.py` reads the
SDK's exceptions, `health.py` posts every change.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AsyncExitStack
from functools import partial

import anyio
import anyio.abc
import mcp_types as types
from mcp.client.session import ClientSession, IncomingMessage

from soong_agent.adapters.mcp import convert, failures
from soong_agent.adapters.mcp.access import ServerAccess
from soong_agent.adapters.mcp.asks import AskSettings
from soong_agent.adapters.mcp.health import HealthBoard
from soong_agent.adapters.mcp.state import RestartPolicy, RunEnd, ServerSlot, tools_detail
from soong_agent.adapters.mcp.stdio import ProcessWatch, exit_text, missing_command
from soong_agent.adapters.mcp.text import safe_url
from soong_agent.adapters.mcp.transports import list_tools, open_transport

log = logging.getLogger("soong_agent.adapters.mcp.hub")

READER_DRAIN_S = 1.0
"""How long a run's end waits for a stdio server's output reader to finish."""


class ServerLife:
    """Runs servers for a hub: `startup_timeout_s` bounds one start, `call_timeout_s` the
    hub's own requests, `restart` how a crashed server is restarted, `stderr_lines` how many
    of a stdio server's last stderr lines are kept; `board` hears of every change."""

    def __init__(
        self,
        board: HealthBoard,
        *,
        startup_timeout_s: float,
        call_timeout_s: float,
        restart: RestartPolicy,
        stderr_lines: int,
        client_info: types.Implementation,
        access: ServerAccess,
        asks: AskSettings,
    ) -> None:
        self._board = board
        self._access = access
        self.asks = asks
        self._startup_timeout_s = startup_timeout_s
        self._call_timeout_s = call_timeout_s
        self._restart = restart
        self._stderr_lines = stderr_lines
        self._client_info = client_info

    async def run(self, srv: ServerSlot) -> None:
        """The life of `srv`: runs and restarts until it is stopped or fails for good."""
        try:
            async with anyio.create_task_group() as helpers:
                try:
                    await self._supervise(srv, helpers)
                finally:
                    helpers.cancel_scope.cancel()
        except Exception as exc:
            log.exception("mcp server %r: its supervisor failed", srv.name)
            self._board.fail(srv, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            srv.session = None
            if srv.stopping and srv.health.state not in ("stopped", "failed"):
                self._board.set(srv, "stopped", detail="stopped")

    async def _supervise(self, srv: ServerSlot, helpers: anyio.abc.TaskGroup) -> None:
        restarts = 0
        policy = self._restart
        while not srv.stopping:
            end, ran_s = await self._run_once(srv, helpers)
            if srv.stopping or end.kind == "stopped":
                return
            tail = srv.tail()
            detail = end.reason
            if tail and end.kind in ("exited", "timeout", "error"):
                detail = f"{detail}: {tail[-1]}"
            if not srv.ever_ready:
                self._board.fail(srv, detail, exit_code=end.exit_code, stderr_tail=tail)
                return
            if ran_s >= policy.healthy_after_s:
                restarts = 0
            restarts += 1
            self._board.set(
                srv, "crashed", detail=detail, exit_code=end.exit_code, stderr_tail=tail
            )
            if restarts > policy.max_attempts:
                self._board.fail(
                    srv,
                    f"gave up after {policy.max_attempts} "
                    f"restart{'' if policy.max_attempts == 1 else 's'}: {detail}",
                    exit_code=end.exit_code,
                    stderr_tail=tail,
                )
                return
            backoff = policy.backoff_s(restarts)
            self._board.set(
                srv,
                "restarting",
                detail=f"restart {restarts} of {policy.max_attempts} in {backoff:g} s",
                attempt=restarts,
                backoff_s=backoff,
            )
            if srv.stop_event is not None:
                with anyio.move_on_after(backoff):
                    await srv.stop_event.wait()

    async def _run_once(
        self, srv: ServerSlot, helpers: anyio.abc.TaskGroup
    ) -> tuple[RunEnd, float]:
        """One run: connect, initialise, list the tools, then serve until the run is ended.
        Returns why it ended and how long it was ready."""
        srv.run_no += 1
        srv.end = None
        srv.ready = False
        srv.phase = "start"
        watch: ProcessWatch | None = None
        if srv.spec.transport == "stdio":
            problem = missing_command(srv.spec)
            if problem is not None:
                srv.watch = None
                return RunEnd("error", problem), 0.0
            watch = ProcessWatch(keep=self._stderr_lines)
            watch.on_exit = partial(self._on_exit, srv, watch)
        srv.watch = watch
        if srv.health.state != "starting":
            self._board.set(srv, "starting", detail=srv.starting_detail())
        started = anyio.current_time()
        helpers.start_soon(self._watchdog, srv, srv.run_no)
        error: BaseException | None = None
        with anyio.CancelScope() as scope:
            srv.scope = scope
            if srv.stopping:
                scope.cancel()
            try:
                async with AsyncExitStack() as stack:
                    srv.phase = "connect"
                    read, write = await open_transport(
                        srv.spec,
                        stack,
                        helpers,
                        watch,
                        auth=self._access.auth_for(srv),
                        on_response=self._access.response_hook(srv),
                    )
                    session = await stack.enter_async_context(
                        ClientSession(
                            read,
                            write,
                            message_handler=partial(self._on_message, srv),
                            client_info=self._client_info,
                            **self.asks.for_server(srv.name).session_callbacks(),
                        )
                    )
                    srv.phase = "initialize"
                    init = await session.initialize()
                    srv.phase = "tools/list"
                    listing = await list_tools(session)
                    self._became_ready(srv, session, init, listing, started)
                    await self._serve(srv, session)
            except BaseException as exc:  # an SDK task group may wrap anything with the cancel
                error = failures.without_cancellation(exc)
            finally:
                srv.session = None
                srv.scope = None
        if watch is not None:
            with anyio.move_on_after(READER_DRAIN_S):
                await watch.done.wait()
        ran_s = anyio.current_time() - srv.ready_at if srv.ready else 0.0
        end = srv.end or (
            RunEnd("stopped", "stopped")
            if srv.stopping
            else failures.start_failure(srv.spec, srv.phase, ready=srv.ready, error=error)
        )
        if not srv.ready and not srv.stopping and end.kind != "timeout":
            end = self._access.failure(srv) or end
        if end.kind == "exited" and watch is not None and watch.exited:
            reason = exit_text(watch.exit_code) + ("" if srv.ready else " during start-up")
            end = RunEnd("exited", reason, watch.exit_code)
        srv.ready = False
        return end, ran_s

    async def _watchdog(self, srv: ServerSlot, run_no: int) -> None:
        """End run `run_no` when it is not ready within the start-up timeout."""
        await anyio.sleep(self._startup_timeout_s)
        if srv.run_no == run_no and not srv.ready and srv.end is None:
            what = {"connect": "connecting", "start": "starting"}.get(srv.phase)
            reason = (
                f"{what} took longer than {self._startup_timeout_s:g} s"
                if what
                else f"no answer to {srv.phase} within {self._startup_timeout_s:g} s"
            )
            self.end_run(srv, RunEnd("timeout", reason))

    async def _serve(self, srv: ServerSlot, session: ClientSession) -> None:
        """Keep the session open; fetch the tool list again whenever the server says it changed."""
        while True:
            if srv.refresh is None:
                srv.refresh = anyio.Event()
            await srv.refresh.wait()
            srv.refresh = anyio.Event()
            try:
                with anyio.fail_after(self._call_timeout_s):
                    listing = await list_tools(session)
            except Exception as exc:
                if failures.is_closed(exc):
                    self.end_run(srv, RunEnd("exited", "closed the connection"))
                else:
                    log.warning(
                        "mcp server %r: its changed tool list could not be fetched: %s",
                        srv.name,
                        srv.scrub(failures.describe(exc)),
                    )
                continue
            srv.tools = tuple(convert.tool(srv.name, item) for item in listing)
            self._board.generation += 1
            self._board.save_cache(srv)
            self._board.set(srv, "ready", detail=tools_detail(srv.tools))

    async def _on_message(self, srv: ServerSlot, message: IncomingMessage) -> None:
        """What the session hands over: notifications, and transport faults as exceptions."""
        if isinstance(message, Exception):
            if srv.spec.transport == "stdio":
                garbage = failures.garbage(message)
                if not srv.ready:
                    self.end_run(
                        srv, RunEnd("garbage", f"wrote garbage on stdout (not JSON-RPC): {garbage}")
                    )
                else:
                    log.warning(
                        "mcp server %r wrote a line that is not JSON-RPC on stdout, ignored: %s",
                        srv.name,
                        srv.scrub(garbage),
                    )
            elif not srv.ready:
                reason = f"cannot reach {safe_url(srv.spec.url)}: {failures.describe(message)}"
                self.end_run(srv, RunEnd("error", reason))
            else:
                log.warning(
                    "mcp server %r: transport error: %s",
                    srv.name,
                    srv.scrub(failures.describe(message)),
                )
            return
        if isinstance(message, types.ToolListChangedNotification) and srv.refresh is not None:
            srv.refresh.set()

    def _on_exit(self, srv: ServerSlot, watch: ProcessWatch, code: int | None) -> None:
        if srv.watch is watch and not srv.stopping:
            reason = exit_text(code) + ("" if srv.ready else " during start-up")
            self.end_run(srv, RunEnd("exited", reason, code))

    def end_run(self, srv: ServerSlot, end: RunEnd) -> None:
        """End the current run for `end` (the first reason wins). A stdio server that hung,
        wrote garbage, or is stopped before it was ready is killed at once: a graceful shutdown
        (stdin closed, up to 2 s for it to exit) is kept for servers that were ready."""
        if srv.end is not None or (srv.scope is None and end.kind != "stopped"):
            return
        srv.end = end
        pointless = end.kind in ("timeout", "garbage") or (end.kind == "stopped" and not srv.ready)
        if pointless and srv.watch is not None:
            srv.watch.kill_group()
        if srv.scope is not None:
            srv.scope.cancel()

    def _became_ready(
        self,
        srv: ServerSlot,
        session: ClientSession,
        init: types.InitializeResult,
        listing: Sequence[types.Tool],
        started: float,
    ) -> None:
        now = anyio.current_time()
        srv.session = session
        srv.ready = srv.ever_ready = True
        srv.ready_at = now
        srv.tools = tuple(convert.tool(srv.name, item) for item in listing)
        srv.from_cache = False
        srv.has_resources = init.capabilities.resources is not None
        srv.version = init.server_info.version if init.server_info is not None else None
        self._board.generation += 1
        self._board.save_cache(srv)
        self._board.set(
            srv, "ready", detail=tools_detail(srv.tools), startup_ms=(now - started) * 1000
        )
