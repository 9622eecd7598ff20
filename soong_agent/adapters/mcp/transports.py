"""How a hub connects to one MCP server for a run: stdio (a process), streamable HTTP or SSE;
and the requests it makes of every server (the tool list, page by page)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from importlib import metadata
from typing import Any

import anyio.abc
import httpx2
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from soong_agent.adapters.mcp.stdio import ProcessWatch, open_stdio
from soong_agent.ports.mcp import McpServerSpec

HTTP_TIMEOUT_S = 30.0
HTTP_READ_TIMEOUT_S = 300.0
PAGE_LIMIT = 100
"""The most pages of a listing read before the server is taken to loop."""


ResponseHook = Callable[[httpx2.Response], Awaitable[None]]


async def open_transport(
    spec: McpServerSpec,
    stack: AsyncExitStack,
    helpers: anyio.abc.TaskGroup,
    watch: ProcessWatch | None,
    *,
    auth: httpx2.Auth | None = None,
    on_response: ResponseHook | None = None,
) -> tuple[Any, Any]:
    """The read and write streams of one run of the server `spec` (its transport entered on
    `stack`; a stdio server's process watched by `watch`). An HTTP or SSE server's requests go
    through `auth` (OAuth), and `on_response` hears every response."""
    if spec.transport == "stdio":
        assert watch is not None
        streams: tuple[Any, Any] = await stack.enter_async_context(open_stdio(spec, watch, helpers))
        return streams
    assert spec.url is not None
    hooks = {"response": [on_response]} if on_response is not None else {}
    if spec.transport == "http":
        client = await stack.enter_async_context(
            httpx2.AsyncClient(
                headers=dict(spec.headers),
                timeout=httpx2.Timeout(HTTP_TIMEOUT_S, read=HTTP_READ_TIMEOUT_S),
                auth=auth,
                event_hooks=hooks,
            )
        )
        read, write = await stack.enter_async_context(
            streamable_http_client(spec.url, http_client=client)
        )
        return read, write

    def client_factory(
        headers: dict[str, str] | None = None,
        timeout: httpx2.Timeout | None = None,
        auth: httpx2.Auth | None = None,
    ) -> httpx2.AsyncClient:
        client = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
        client.event_hooks = hooks
        return client

    read, write = await stack.enter_async_context(
        sse_client(
            spec.url,
            headers=dict(spec.headers),
            timeout=HTTP_TIMEOUT_S,
            sse_read_timeout=HTTP_READ_TIMEOUT_S,
            auth=auth,
            httpx_client_factory=client_factory,
        )
    )
    return read, write


async def list_tools(session: ClientSession) -> list[types.Tool]:
    """Every tool of the server, every page."""
    found: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(PAGE_LIMIT):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        found.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return found
    raise RuntimeError(f"tools/list went on for more than {PAGE_LIMIT} pages")


def our_version() -> str:
    """This package's version (what the hub tells servers it is)."""
    try:
        return metadata.version("soong-agent")
    except metadata.PackageNotFoundError:
        return "0"
