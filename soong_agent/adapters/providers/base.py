"""The shell every HTTP streaming provider shares, written once: `HttpStreamProvider.stream`.

A provider supplies only what differs: its endpoint, request body and headers, how its
streaming body is framed (`StreamFormat`), a per-attempt `PayloadParser` that turns payloads
into events and knows when the answer is complete, and its error hooks.

Two limits bound a call. `timeout_s` (`[model] timeout_ms`) is the whole exchange: from
sending the request to the end of the answer's stream, the wait for the first byte included;
past it the call fails with a `timeout` error that is not retried (the same request would take
as long again). `idle_timeout_s` (`[model] idle_timeout_ms`) is the longest the server may
send nothing at all, before the answer starts or between two pieces of it (a keep-alive
comment is something); such a stall is retried like other transient failures, and each retry
has its whole `timeout_s` again. The waits between retries are `[model.retry]`'s.
"""

from __future__ import annotations

import asyncio
import json
import random
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, aclosing
from functools import partial
from json.scanner import make_scanner
from typing import Any, ClassVar, NotRequired, Protocol, TypedDict

import httpx

from soong_agent.adapters.providers.deadline import CallDeadline, CallTimedOut
from soong_agent.adapters.providers.framing import SSE, StreamFormat, drain, read_at_most
from soong_agent.adapters.providers.http_errors import (
    ErrorContext,
    error_from_chunk,
    error_from_httpx,
    error_from_response,
)
from soong_agent.adapters.providers.payloads import (
    MAX_ERROR_BODY_BYTES,
    MAX_JSON_DEPTH,
    PayloadError,
    ShapeError,
    excerpt,
    parse_json,
)
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import RetryScheduled, StreamEvent
from soong_agent.ports.text import safe_json_text

# The C scanner behind json.loads, called directly in the hot loops: it skips two Python frames
# and two regex matches per chunk. The hot loops give it only payloads too short to nest
# deeper than MAX_JSON_DEPTH; anything longer, and anything it does not take whole (whitespace
# around the object, an error), goes through `parse`, which checks the depth first.
scan: Callable[[str, int], tuple[Any, int]]
scan = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
SCAN_MAX = MAX_JSON_DEPTH
"""The longest payload handed to `scan` directly (one that long cannot nest deeper)."""

UNREACHABLE_RETRY_S = 0.25
"""The wait before the one retry of a refused connection."""


# --- what a provider supplies ----------------------------------------------------------------


class PayloadParser(Protocol):
    """One attempt's reading of a response body: payloads in, events out.

    It appends the events to the list it was made with; the template hands them on after
    each batch (a whole batch per call keeps the per-payload loop free of virtual calls).
    """

    def feed(self, batch: list[str]) -> bool:
        """Turn a batch of payloads into events; True once the end marker came (what
        follows it is ignored). A `ProviderError` ends the attempt; the events appended
        before it still reach the caller."""
        ...

    def finish(self, ended: bool) -> None:
        """Append the events that close the answer, or raise `ProviderError` when the body
        ended short of a complete one (`ended`: the end marker came)."""
        ...


class HttpProviderArgs(TypedDict):
    """The constructor keywords of `HttpStreamProvider`, for subclasses that add their own."""

    client: httpx.AsyncClient
    base_url: str
    model: str
    api_key: Callable[[], str | None]
    retry: RetryPolicy
    timeout_s: float
    idle_timeout_s: NotRequired[float | None]
    provider: NotRequired[str | None]
    sleep: NotRequired[Callable[[float], Awaitable[None]]]
    rand: NotRequired[Callable[[], float]]


# --- the template ----------------------------------------------------------------------------


class HttpStreamProvider(ABC):
    """Base of the providers that stream one HTTP response per model call.

    `stream` is the whole exchange (attempts, request, status check, payload loop, drain,
    error mapping, retry notices); subclasses fill in the hooks below it.
    """

    provider_name: ClassVar[str]
    """The provider's name in labels and errors when the constructor is given none."""
    stream_format: ClassVar[StreamFormat] = SSE

    def __init__(
        self,
        *,
        client: httpx.AsyncClient,
        base_url: str,
        model: str,
        api_key: Callable[[], str | None],
        retry: RetryPolicy,
        timeout_s: float,
        idle_timeout_s: float | None = None,
        provider: str | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        """`timeout_s` bounds the whole call; `idle_timeout_s` (default: `timeout_s`) the
        longest silence of the server (see the module doc)."""
        self._client = client
        self._base_url = base_url.rstrip("/")
        self._model = model
        self._api_key = api_key
        self._retry = retry
        self._timeout_s = timeout_s
        idle = self._idle_s = timeout_s if idle_timeout_s is None else idle_timeout_s
        self._timeout = httpx.Timeout(idle, connect=min(10.0, idle))
        self._provider = provider or self.provider_name
        self._url = self._base_url + self._endpoint()
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

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Send `request` and yield its events; the last one is `StreamFinished`.

        Transient failures are retried per the policy. Before each retry a `RetryScheduled`
        notice is yielded (it is not part of the answer); a failure after part of the answer
        was yielded (a stream cut in the middle, an in-stream error of a transient kind) is
        retried at most `stream_max_retries` times, with a notice whose `restart` tells the
        caller to discard what it got of this answer. Each attempt ends within `timeout_s`
        (else a `timeout` error, not retried).
        """
        # One generator on purpose: every event passes through it, and another async
        # generator layer per attempt would cost each event a second hop.
        content = _encoded(json.dumps(self._body(request), ensure_ascii=False))
        key = self._api_key()  # read at first use; the context scrubs it from messages
        headers = self._headers(key)
        ctx = ErrorContext(provider=self._provider, base_url=self._base_url, secret=key)
        split = self.stream_format.split

        attempt = 0
        restarts = 0
        while True:
            attempt += 1
            yielded = False
            deadline = CallDeadline(self._timeout_s)
            bound = deadline.bound
            try:
                try:
                    async with AsyncExitStack() as stack:
                        post = self._post(content, headers)
                        response = await bound(partial(stack.enter_async_context, post))
                        batches = await stack.enter_async_context(aclosing(split(response)))
                        await bound(partial(self._check_response, response, ctx))
                        events: list[StreamEvent] = []
                        parser = self._parser(ctx, events)
                        feed = parser.feed
                        next_batch = batches.__anext__
                        ended = False
                        failure: ProviderError | None = None
                        while True:
                            try:
                                batch = await bound(next_batch)
                            except StopAsyncIteration:
                                break
                            try:
                                ended = feed(batch)
                            except ProviderError as exc:
                                failure = exc  # raised once what came before it is handed on
                            if events:
                                yielded = True
                                for event in events:
                                    yield event
                                events.clear()
                            if failure is not None:
                                raise failure
                            if ended:
                                break
                        if ended:
                            await drain(batches)
                        parser.finish(ended)
                        yielded = True
                        for event in events:
                            yield event
                        return
                except httpx.HTTPError as exc:
                    raise self._transport_error(ctx, exc) from exc
                except CallTimedOut:
                    raise self._call_timeout(ctx) from None
                except PayloadError as exc:  # an event or line over the size limit
                    raise ctx.error("protocol", str(exc)) from exc
                finally:
                    deadline.close()
            except ProviderError as err:
                notice = self._plan_retry(attempt, err, restarts=restarts if yielded else None)
                restarts += notice.restart
                yield notice
                await self._sleep(notice.delay_s)

    # --- the hooks ---------------------------------------------------------------------------

    @abstractmethod
    def _endpoint(self) -> str:
        """The path POSTed to, after `base_url`."""

    @abstractmethod
    def _body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body of the streaming request."""

    @abstractmethod
    def _parser(self, ctx: ErrorContext, out: list[StreamEvent]) -> PayloadParser:
        """A fresh parser for one attempt, appending its events to `out`."""

    def _headers(self, key: str | None) -> dict[str, str]:
        """The request headers, with the key (when there is one)."""
        headers = {"content-type": "application/json", "accept": self.stream_format.accept}
        headers.update(bearer(key))
        return headers

    def _error_in_body(self, ctx: ErrorContext, error: Any) -> ProviderError:
        """The error of an `error` object in a 200 answer that is not a stream."""
        return error_from_chunk(ctx, error)

    def _transport_error(self, ctx: ErrorContext, exc: httpx.HTTPError) -> ProviderError:
        """The error of an exception httpx raised while connecting or reading."""
        if isinstance(exc, httpx.ReadTimeout):
            return ctx.error(
                "timeout",
                f"the server sent nothing for {self._idle_s:g} s "
                f"(model.idle_timeout_ms = {round(self._idle_s * 1000)})",
            )
        return error_from_httpx(ctx, exc)

    def _call_timeout(self, ctx: ErrorContext) -> ProviderError:
        """The error of a call that ran out of its whole-call time; not retried."""
        return ctx.error(
            "timeout",
            f"the model call did not finish within {self._timeout_s:g} s "
            f"(model.timeout_ms = {round(self._timeout_s * 1000)}) and was stopped",
            should_retry=False,
        )

    def _not_found_hint(self, detail: str) -> str:
        """What to check when the endpoint answered 404; each provider says what is likely."""
        if "model" in detail.lower():
            return f"is [model].name {self._model!r} a model this server has?"
        return f"POST {self._url} does not exist; check [model].base_url"

    # --- the shell's parts -------------------------------------------------------------------

    def _post(
        self, content: bytes, headers: dict[str, str]
    ) -> AbstractAsyncContextManager[httpx.Response]:
        """The streaming POST of one attempt."""
        return self._client.stream(
            "POST", self._url, content=content, headers=headers, timeout=self._timeout
        )

    async def _check_response(self, response: httpx.Response, ctx: ErrorContext) -> None:
        """Raise the classified error of a failed response, or of one that is not a stream
        (an `error` object in such a body is classified by `_error_in_body`)."""
        status = response.status_code
        if status >= 400:
            body = await read_at_most(response, MAX_ERROR_BODY_BYTES)
            raise error_from_response(ctx, status, response.headers, body)
        content_type = response.headers.get("content-type", "").lower()
        if content_type.startswith(self.stream_format.not_streams):
            text = (await read_at_most(response, MAX_ERROR_BODY_BYTES)).decode("utf-8", "replace")
            try:
                parsed = parse_json(text.lstrip("\ufeff"))
            except PayloadError:
                parsed = None
            if isinstance(parsed, dict) and parsed.get("error"):
                raise self._error_in_body(ctx, parsed["error"])
            raise ctx.error(
                "protocol",
                f"expected {self.stream_format.description}, got {content_type}: " + excerpt(text),
                status=status,
            )

    def _plan_retry(
        self, attempt: int, error: ProviderError, *, restarts: int | None
    ) -> RetryScheduled:
        """The retry after failed attempt number `attempt`, or raise `error` (explained) when
        it may not be retried: only transient failures are (or what the server's
        `x-should-retry` header says, see `ProviderError.retryable`). `restarts` is given when
        the attempt had handed part of the answer on: the number of such retries made so
        far, bounded by the policy's `stream_max_retries`. A refused connection (nothing
        listens there) is retried once, after `UNREACHABLE_RETRY_S`: it rarely heals within
        seconds, and the user should hear about it at once rather than after the whole
        backoff."""
        if error.kind == "not_found":
            error = noted(error, self._not_found_hint(error.detail))
        retry = error.retryable and self._retry.should_retry(attempt, restarts=restarts)
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
            restart=restarts is not None,
        )


# --- helpers ---------------------------------------------------------------------------------


def noted(error: ProviderError, note: str) -> ProviderError:
    """`error` with `note` added in parentheses (itself when the note is empty)."""
    if not note:
        return error
    return ProviderError(
        f"{error.detail} ({note})",
        kind=error.kind,
        provider=error.provider,
        base_url=error.base_url,
        status=error.status,
        retry_after=error.retry_after,
        unreachable=error.unreachable,
        should_retry=error.should_retry,
    )


def bearer(key: str | None) -> dict[str, str]:
    """The `authorization` header of `key`; none without a key."""
    return {"authorization": f"Bearer {key}"} if key else {}


def malformed(ctx: ErrorContext, what: str, payload: str, why: str = "") -> ProviderError:
    """The protocol error of a payload that is not what the format promises: `what` it is
    (chunk, event, line), `why` (for a field: its path, what was expected, what came) and the
    start of the payload."""
    reason = f": {why}" if why else ""
    return ctx.error("protocol", f"malformed {what}{reason}; the {what}: {excerpt(payload)}")


def misshapen(ctx: ErrorContext, what: str, payload: str, exc: ShapeError) -> ProviderError:
    """The protocol error of a payload whose field `exc` names has the wrong type."""
    return malformed(ctx, what, payload, str(exc))


def parse(ctx: ErrorContext, what: str, payload: str) -> Any:
    """The JSON value of `payload`, bounded and cleaned (`payloads.parse_json`); a protocol
    error when it cannot be had."""
    try:
        return parse_json(payload)
    except PayloadError as exc:
        raise malformed(ctx, what, payload, str(exc)) from exc


def _encoded(body: str) -> bytes:
    """A request body as UTF-8. A lone surrogate that came past the run's boundaries (a hook's
    output, a mail, a compaction summary) is written out by the one text rule
    (`ports.text`), never a `UnicodeEncodeError` that fails every resume of the session."""
    try:
        return body.encode()
    except UnicodeEncodeError:
        return safe_json_text(body)[0].encode()
