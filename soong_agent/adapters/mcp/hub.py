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

The module is longer than 400 lines because one server's life (start, serve, end, classify,
restart) is one state machine over shared state; `state.py` holds that state and `failures.py`
reads the SDK's exceptions, so what is left here is the machine and the port it serves.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import mcp_types as types
from mcp.client.session import ClientSession, IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from soong_agent.adapters.mcp import convert, failures
from soong_agent.adapters.mcp.cache import DiscoveryCache
from soong_agent.adapters.mcp.state import RestartPolicy, RunEnd, ServerSlot, tools_detail
from soong_agent.adapters.mcp.stdio import ProcessWatch, exit_text, missing_command, open_stdio
from soong_agent.adapters.mcp.text import one_line, safe_url
from soong_agent.ports.mcp import (
    HealthListener,
    McpCallResult,
    McpError,
    McpResource,
    McpServerSpec,
    McpTool,
    ServerHealth,
    ServerState,
)

log = logging.getLogger(__name__)


class _ParseErrorFilter(logging.Filter):
    """Drops the SDK's own report of a stdout line that is not JSON-RPC: it is logged with a
    traceback quoting the line unscrubbed, while the hub reports it (scrubbed) as the server's
    health or a warning of its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != "Failed to parse JSONRPC message from server"


class _TransportFailureFilter(logging.Filter):
    """Drops the SDK's report of a failed HTTP or SSE transport (an error with a traceback
    the user never asked for): the hub reports the failure itself, once, as the server's
    health and a one-line warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR


_HTTP_CLIENT_LOGGERS = ("mcp.client.sse", "mcp.client.streamable_http")


def _install_parse_error_filter() -> None:
    sdk_logger = logging.getLogger("mcp.client.stdio")
    if not any(isinstance(item, _ParseErrorFilter) for item in sdk_logger.filters):
        sdk_logger.addFilter(_ParseErrorFilter())
    for name in _HTTP_CLIENT_LOGGERS:
        http_logger = logging.getLogger(name)
        if not any(isinstance(item, _TransportFailureFilter) for item in http_logger.filters):
            http_logger.addFilter(_TransportFailureFilter())


CALL_GRACE_S = 2.0
"""How long past a request's own timeout the hub waits for the SDK to give up on it."""
_READER_DRAIN_S = 1.0
_CLOSE_TIMEOUT_S = 10.0
_PAGE_LIMIT = 100
_HTTP_TIMEOUT_S = 30.0
_HTTP_READ_TIMEOUT_S = 300.0


class SdkMcpHub:
    """`McpHub` over the `mcp` SDK for stdio, streamable HTTP and SSE servers.

    `startup_timeout_s` bounds one start (connect, `initialize`, the first `tools/list`) and how
    long a call waits for a server still starting; `call_timeout_s` bounds the hub's own requests
    (a changed tool list). `cache_dir` holds the discovery cache (None: no cache), whose entries
    are used for `cache_ttl_s`. `stderr_lines` is how many of a stdio server's last stderr lines
    are kept. `clock` is the wall clock of cache entries.
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
    ) -> None:
        names = [spec.name for spec in specs]
        duplicated = sorted({name for name in names if names.count(name) > 1})
        if duplicated:
            raise ValueError(f"mcp servers declared twice: {', '.join(duplicated)}")
        self._servers = {spec.name: ServerSlot(spec) for spec in specs}
        self._order = tuple(names)
        self._startup_timeout_s = startup_timeout_s
        self._call_timeout_s = call_timeout_s
        self._cache = DiscoveryCache(cache_dir, cache_ttl_s, clock=clock)
        self._restart = restart or RestartPolicy()
        self._stderr_lines = stderr_lines
        self._generation = 0
        self._listeners: list[HealthListener] = []
        self._changed: anyio.Event | None = None
        self._client_info = types.Implementation(name="soong-agent", version=_our_version())
        _install_parse_error_filter()

    # --- the port ------------------------------------------------------------------------------

    @property
    def servers(self) -> Sequence[str]:
        """The configured servers, in configuration order."""
        return self._order

    @property
    def generation(self) -> int:
        """Grows whenever `tools()` may have changed."""
        return self._generation

    def start(self) -> None:
        """Start every server that has no task yet (idempotent; needs a running event loop).

        A server with a discovery cache entry offers the cached tools from now on."""
        loop = asyncio.get_running_loop()
        if self._changed is None:
            self._changed = anyio.Event()
        for srv in self._servers.values():
            if srv.task is not None:
                continue
            srv.stopping = False
            srv.changed = anyio.Event()
            srv.stop_event = anyio.Event()
            srv.refresh = anyio.Event()
            cached = self._cache.load(srv.spec)
            if cached is not None:
                srv.tools = cached.tools
                srv.from_cache = True
                srv.has_resources = cached.has_resources
                srv.version = cached.version
                self._generation += 1
            self._set(srv, "starting", detail=srv.starting_detail())
            srv.task = loop.create_task(self._run(srv), name=f"mcp-server-{srv.name}")

    async def wait_ready(self, timeout_s: float) -> None:
        """Return once every server is ready, failed, stopped or has a tool list (cached, or
        from before a crash), or after `timeout_s`."""
        with anyio.move_on_after(timeout_s):
            while True:
                changed = self._changed
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
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def has_resources(self, server: str) -> bool:
        """Whether the server announced the resources capability (live, else cached)."""
        srv = self._servers.get(server)
        return srv is not None and srv.has_resources

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
                for _ in range(_PAGE_LIMIT):
                    params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
                    page = await session.list_resources(params=params)
                    found.extend(convert.resource(server, item) for item in page.resources)
                    cursor = page.next_cursor
                    if not cursor:
                        return found
        except Exception as exc:
            raise self._request_error(srv, session, what, exc, timeout_s) from None
        raise McpError(f"mcp server {server!r}: {what}: more than {_PAGE_LIMIT} pages")

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
            self._end_run(srv, RunEnd("stopped", "stopped"))
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
                self._set(srv, "stopped", detail="stopped")
        self._generation += 1

    # --- one server's life ---------------------------------------------------------------------

    async def _run(self, srv: ServerSlot) -> None:
        try:
            async with anyio.create_task_group() as helpers:
                try:
                    await self._supervise(srv, helpers)
                finally:
                    helpers.cancel_scope.cancel()
        except Exception as exc:
            log.exception("mcp server %r: its supervisor failed", srv.name)
            self._fail(srv, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            srv.session = None
            if srv.stopping and srv.health.state not in ("stopped", "failed"):
                self._set(srv, "stopped", detail="stopped")

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
                self._fail(srv, detail, exit_code=end.exit_code, stderr_tail=tail)
                return
            if ran_s >= policy.healthy_after_s:
                restarts = 0
            restarts += 1
            self._set(srv, "crashed", detail=detail, exit_code=end.exit_code, stderr_tail=tail)
            if restarts > policy.max_attempts:
                self._fail(
                    srv,
                    f"gave up after {policy.max_attempts} "
                    f"restart{'' if policy.max_attempts == 1 else 's'}: {detail}",
                    exit_code=end.exit_code,
                    stderr_tail=tail,
                )
                return
            backoff = policy.backoff_s(restarts)
            self._set(
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
            self._set(srv, "starting", detail=srv.starting_detail())
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
                    read, write = await self._connect(srv, stack, helpers, watch)
                    session = await stack.enter_async_context(
                        ClientSession(
                            read,
                            write,
                            message_handler=partial(self._on_message, srv),
                            client_info=self._client_info,
                        )
                    )
                    srv.phase = "initialize"
                    init = await session.initialize()
                    srv.phase = "tools/list"
                    listing = await _list_tools(session)
                    self._became_ready(srv, session, init, listing, started)
                    await self._serve(srv, session)
            except BaseException as exc:  # an SDK task group may wrap anything with the cancel
                error = failures.without_cancellation(exc)
            finally:
                srv.session = None
                srv.scope = None
        if watch is not None:
            with anyio.move_on_after(_READER_DRAIN_S):
                await watch.done.wait()
        ran_s = anyio.current_time() - srv.ready_at if srv.ready else 0.0
        end = srv.end or (
            RunEnd("stopped", "stopped")
            if srv.stopping
            else failures.start_failure(srv.spec, srv.phase, ready=srv.ready, error=error)
        )
        if end.kind == "exited" and watch is not None and watch.exited:
            reason = exit_text(watch.exit_code) + ("" if srv.ready else " during start-up")
            end = RunEnd("exited", reason, watch.exit_code)
        srv.ready = False
        return end, ran_s

    async def _connect(
        self,
        srv: ServerSlot,
        stack: AsyncExitStack,
        helpers: anyio.abc.TaskGroup,
        watch: ProcessWatch | None,
    ) -> tuple[Any, Any]:
        spec = srv.spec
        if spec.transport == "stdio":
            assert watch is not None
            streams: tuple[Any, Any] = await stack.enter_async_context(
                open_stdio(spec, watch, helpers)
            )
            return streams
        assert spec.url is not None
        if spec.transport == "http":
            client = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=dict(spec.headers),
                    timeout=httpx2.Timeout(_HTTP_TIMEOUT_S, read=_HTTP_READ_TIMEOUT_S),
                )
            )
            read, write = await stack.enter_async_context(
                streamable_http_client(spec.url, http_client=client)
            )
            return read, write
        read, write = await stack.enter_async_context(
            sse_client(
                spec.url,
                headers=dict(spec.headers),
                timeout=_HTTP_TIMEOUT_S,
                sse_read_timeout=_HTTP_READ_TIMEOUT_S,
            )
        )
        return read, write

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
            self._end_run(srv, RunEnd("timeout", reason))

    async def _serve(self, srv: ServerSlot, session: ClientSession) -> None:
        """Keep the session open; fetch the tool list again whenever the server says it changed."""
        while True:
            if srv.refresh is None:
                srv.refresh = anyio.Event()
            await srv.refresh.wait()
            srv.refresh = anyio.Event()
            try:
                with anyio.fail_after(self._call_timeout_s):
                    listing = await _list_tools(session)
            except Exception as exc:
                if failures.is_closed(exc):
                    self._end_run(srv, RunEnd("exited", "closed the connection"))
                else:
                    log.warning(
                        "mcp server %r: its changed tool list could not be fetched: %s",
                        srv.name,
                        srv.scrub(failures.describe(exc)),
                    )
                continue
            srv.tools = tuple(convert.tool(srv.name, item) for item in listing)
            self._generation += 1
            self._save_cache(srv)
            self._set(srv, "ready", detail=tools_detail(srv.tools))

    async def _on_message(self, srv: ServerSlot, message: IncomingMessage) -> None:
        """What the session hands over: notifications, and transport faults as exceptions."""
        if isinstance(message, Exception):
            if srv.spec.transport == "stdio":
                garbage = failures.garbage(message)
                if not srv.ready:
                    self._end_run(
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
                self._end_run(srv, RunEnd("error", reason))
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
            self._end_run(srv, RunEnd("exited", reason, code))

    def _end_run(self, srv: ServerSlot, end: RunEnd) -> None:
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
        self._generation += 1
        self._save_cache(srv)
        self._set(srv, "ready", detail=tools_detail(srv.tools), startup_ms=(now - started) * 1000)

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
            self._end_run(srv, RunEnd("exited", "closed the connection"))
        return McpError(one_line(srv.scrub(message)))

    def _fail(self, srv: ServerSlot, detail: str, **fields: Any) -> None:
        if srv.tools is not None:
            self._generation += 1
        srv.tools = None
        srv.from_cache = False
        self._set(srv, "failed", detail=detail, **fields)

    def _save_cache(self, srv: ServerSlot) -> None:
        if srv.tools is not None:
            self._cache.save(
                srv.spec, srv.tools, has_resources=srv.has_resources, version=srv.version
            )

    def _set(self, srv: ServerSlot, state: ServerState, *, detail: str = "", **fields: Any) -> None:
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
        for event in (srv.changed, self._changed):
            if event is not None:
                event.set()
        if srv.changed is not None:
            srv.changed = anyio.Event()
        if self._changed is not None:
            self._changed = anyio.Event()
        for listener in list(self._listeners):
            try:
                listener(srv.health)
            except Exception:
                log.exception("an mcp health listener failed on %r", srv.name)


async def _list_tools(session: ClientSession) -> list[types.Tool]:
    found: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_PAGE_LIMIT):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        found.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return found
    raise RuntimeError(f"tools/list went on for more than {_PAGE_LIMIT} pages")


def _our_version() -> str:
    try:
        return metadata.version("soong-agent")
    except metadata.PackageNotFoundError:
        return "0"
