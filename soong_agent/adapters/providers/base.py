"""What the HTTP streaming providers share: identity, connection settings, retry, fast JSON."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from json.scanner import make_scanner
from typing import Any

import httpx

from soong_agent.adapters.providers.http_errors import ErrorContext, error_from_response
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.ports.errors import ProviderError

loads = json.loads
# The C scanner behind json.loads, called directly in the hot loops: it skips two Python frames
# and two regex matches per chunk. Anything it does not take whole (whitespace around the
# object, an error) goes through `loads`, which gives the real answer or the real error.
scan: Callable[[str, int], tuple[Any, int]]
scan = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


class HttpStreamProvider:
    """Base of the providers that stream one HTTP response per model call."""

    def __init__(
        self,
        *,
        client: httpx.AsyncClient,
        base_url: str,
        model: str,
        api_key: Callable[[], str | None],
        retry: RetryPolicy,
        timeout_s: float,
        provider: str,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._client = client
        self._base_url = base_url.rstrip("/")
        self._model = model
        self._api_key = api_key
        self._retry = retry
        self._timeout = httpx.Timeout(timeout_s, connect=min(10.0, timeout_s))
        self._provider = provider
        self._url = self._base_url  # subclasses append their endpoint
        self._sleep = sleep
        self._rand = rand

    @property
    def label(self) -> str:
        return f"{self._provider} {self._model} at {self._base_url}"

    @property
    def model(self) -> str:
        return self._model

    @property
    def base_url(self) -> str:
        return self._base_url

    def _prepare(
        self, body: dict[str, Any], headers: dict[str, str], *, key_header: str = "authorization"
    ) -> tuple[bytes, dict[str, str], ErrorContext]:
        """The encoded body, the headers with the key (read now, at first use) and the error
        context that scrubs that key from messages."""
        key = self._api_key()
        if key:
            headers[key_header] = f"Bearer {key}" if key_header == "authorization" else key
        ctx = ErrorContext(provider=self._provider, base_url=self._base_url, secret=key)
        return json.dumps(body, ensure_ascii=False).encode(), headers, ctx

    def _post(
        self, content: bytes, headers: dict[str, str]
    ) -> AbstractAsyncContextManager[httpx.Response]:
        """The streaming POST of one attempt."""
        return self._client.stream(
            "POST", self._url, content=content, headers=headers, timeout=self._timeout
        )

    async def _back_off(self, attempt: int, error: ProviderError, *, yielded: bool) -> None:
        """Wait before the next attempt, or raise `error` when it may not be retried: only
        transient failures are, and only while nothing has been handed to the caller."""
        if yielded or not error.retryable or not self._retry.should_retry(attempt):
            raise error
        await self._sleep(self._retry.delay(attempt, error.retry_after, self._rand()))


DRAIN_TIMEOUT_S = 0.25


async def drain(batches: AsyncIterator[list[str]]) -> None:
    """Read what follows the end marker (normally just the end of the body) so the connection
    can be reused; a server that keeps the body open is given up on quickly."""
    try:
        async with asyncio.timeout(DRAIN_TIMEOUT_S):
            async for _ in batches:
                pass
    except (TimeoutError, httpx.HTTPError):
        pass  # the answer is complete; only connection reuse is lost


async def check_event_stream(
    response: httpx.Response,
    ctx: ErrorContext,
    *,
    error_in_body: Callable[[ErrorContext, Any], ProviderError],
    not_streams: tuple[str, ...] = ("application/json", "text/html"),
) -> None:
    """Raise the classified error of a failed response, or of one that is not an event
    stream (an `error` object in such a body is classified by `error_in_body`)."""
    status = response.status_code
    if status >= 400:
        body = await response.aread()
        raise error_from_response(ctx, status, response.headers, body)
    content_type = response.headers.get("content-type", "").lower()
    if content_type.startswith(not_streams):
        body = await response.aread()
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and parsed.get("error"):
            raise error_in_body(ctx, parsed["error"])
        raise ctx.error(
            "protocol",
            f"expected an event stream, got {content_type}: "
            + body[:200].decode("utf-8", "replace"),
            status=status,
        )
