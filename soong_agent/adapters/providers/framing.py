"""How a streaming body is asked for and split into payloads; bounded and draining reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass

import httpx

from soong_agent.adapters.providers.sse import payload_batches

DRAIN_TIMEOUT_S = 0.25


@dataclass(frozen=True, slots=True)
class StreamFormat:
    """How a streaming body is asked for, told apart from a non-stream answer, and split."""

    accept: str
    """The content type asked for."""
    description: str
    """What was expected, for the error about an answer that is not a stream."""
    not_streams: tuple[str, ...]
    """Content types of answers that are not a stream (an error object is looked for)."""
    split: Callable[[httpx.Response], AsyncGenerator[list[str], None]]
    """The payloads of the body, in batches."""


def sse_payloads(response: httpx.Response) -> AsyncGenerator[list[str], None]:
    """The `data` payloads of an event-stream body, one batch per byte piece."""
    return payload_batches(response.aiter_bytes())


SSE = StreamFormat(
    accept="text/event-stream",
    description="an event stream",
    not_streams=("application/json", "text/html"),
    split=sse_payloads,
)


async def read_at_most(response: httpx.Response, limit: int) -> bytes:
    """The start of the body, at most `limit` bytes (the rest is left unread)."""
    parts: list[bytes] = []
    size = 0
    async for piece in response.aiter_bytes():
        parts.append(piece)
        size += len(piece)
        if size >= limit:
            break
    return b"".join(parts)[:limit]


async def drain(batches: AsyncIterator[list[str]]) -> None:
    """Read what follows the end marker (normally just the end of the body) so the connection
    can be reused; a server that keeps the body open is given up on quickly."""
    try:
        async with asyncio.timeout(DRAIN_TIMEOUT_S):
            async for _ in batches:
                pass
    except (TimeoutError, httpx.HTTPError):
        pass  # the answer is complete; only connection reuse is lost
