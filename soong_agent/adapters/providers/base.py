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
from soong_agent.ports.streaming import RetryScheduled

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

    def _plan_retry(self, attempt: int, error: ProviderError, *, yielded: bool) -> RetryScheduled:
        """The retry after failed attempt number `attempt`, or raise `error` (explained) when
        it may not be retried: only transient failures are, and only while nothing has been
        handed to the caller. A refused connection (nothing listens there) is retried once,
        after `UNREACHABLE_RETRY_S`: it rarely heals within seconds, and the user should hear
        about it at once rather than after the whole backoff."""
        if error.kind == "not_found":
            error = self._explain_not_found(error)
        retry = not yielded and error.retryable and self._retry.should_retry(attempt)
        if error.unreachable:
            retry = retry and attempt == 1
            delay = UNREACHABLE_RETRY_S
        else:
            delay = self._retry.delay(attempt, error.retry_after, self._rand())
        if not retry:
            raise error
        return RetryScheduled(
            kind=error.kind,
            reason=error.detail,
            attempt=attempt,
            max_attempts=2 if error.unreachable else self._retry.max_attempts,
            delay_s=delay,
        )

    def _explain_not_found(self, error: ProviderError) -> ProviderError:
        """A 404 with the likely fix added (`not_found_hint`)."""
        hint = self._not_found_hint(error.detail)
        if not hint:
            return error
        return ProviderError(
            f"{error.detail} ({hint})",
            kind=error.kind,
            provider=error.provider,
            base_url=error.base_url,
            status=error.status,
        )

    def _not_found_hint(self, detail: str) -> str:
        """What to check when the endpoint answered 404; each provider says what is likely."""
        if "model" in detail.lower():
            return f"is [model].name {self._model!r} a model this server has?"
        return f"POST {self._url} does not exist; check [model].base_url"


UNREACHABLE_RETRY_S = 0.25
"""The wait before the one retry of a refused connection."""


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
