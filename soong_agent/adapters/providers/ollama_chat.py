"""Ollama's native `/api/chat` over httpx streaming (NDJSON: one JSON object per line).

Normal runs never start Ollama: when nothing listens at `base_url` the error says so and how
to start it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

import httpx

from soong_agent.adapters.providers.base import HttpStreamProvider, drain, loads, scan
from soong_agent.adapters.providers.http_errors import (
    ErrorContext,
    connection_refused,
    error_from_httpx,
    error_from_response,
)
from soong_agent.adapters.providers.ollama_wire import (
    ToolCalls,
    build_body,
    classify_stream_error,
    error_message,
    parse_usage,
    stop_reason,
)
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import (
    StreamEvent,
    StreamFinished,
    TextDelta,
    ThinkingDelta,
    UsageReported,
)

_HEALTH_TIMEOUT_S = 5.0


class OllamaChatProvider(HttpStreamProvider):
    """`ModelProvider` for a local (or gateway-fronted) Ollama server's `/api/chat`."""

    def __init__(
        self,
        *,
        client: httpx.AsyncClient,
        base_url: str,
        model: str,
        api_key: Callable[[], str | None],
        retry: RetryPolicy,
        timeout_s: float,
        provider: str = "ollama",
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        super().__init__(
            client=client,
            base_url=base_url,
            model=model,
            api_key=api_key,
            retry=retry,
            timeout_s=timeout_s,
            provider=provider,
            sleep=sleep,
            rand=rand,
        )
        self._url = self._base_url + "/api/chat"
        self._health_timeout = httpx.Timeout(min(_HEALTH_TIMEOUT_S, timeout_s))

    async def health(self) -> bool:
        """Whether an Ollama server answers at `base_url` (`GET /` gives 200). Never raises
        for network trouble; the key, when one is configured, is sent as for a chat."""
        key = self._api_key()
        headers = {"authorization": f"Bearer {key}"} if key else {}
        try:
            response = await self._client.get(
                self._base_url + "/", headers=headers, timeout=self._health_timeout
            )
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Send `request` and yield its events; the last one is `StreamFinished`.

        Transient failures are retried per the policy, but only while nothing has been
        yielded yet: once the caller has seen an event, a failure is raised at once.
        """
        content, headers, ctx = self._prepare(
            build_body(self._model, request),
            {"content-type": "application/json", "accept": "application/x-ndjson"},
        )

        attempt = 0
        yielded = False
        while True:
            attempt += 1
            try:
                try:
                    async with (
                        self._post(content, headers) as response,
                        aclosing(_line_batches(response)) as batches,
                    ):
                        await _check_status(response, ctx)
                        # --- the hot loop: one scan and a few lookups per line ---
                        calls = ToolCalls()
                        final: dict[str, Any] | None = None
                        async for batch in batches:
                            for line in batch:
                                try:
                                    obj, end = scan(line, 0)
                                except (StopIteration, ValueError):
                                    end = -1
                                if end != len(line):
                                    if not line.strip():
                                        continue
                                    try:
                                        obj = loads(line)
                                    except ValueError as exc:
                                        raise _malformed(ctx, line) from exc
                                if type(obj) is not dict:
                                    raise _malformed(ctx, line)
                                error = obj.get("error")
                                if error:
                                    raise _stream_error(ctx, error)
                                message = obj.get("message")
                                if message:
                                    if type(message) is not dict:
                                        raise _malformed(ctx, line)
                                    text = message.get("content")
                                    if text and type(text) is str:
                                        yielded = True
                                        yield TextDelta(text)
                                    thinking = message.get("thinking")
                                    if thinking and type(thinking) is str:
                                        yielded = True
                                        yield ThinkingDelta(thinking)
                                    raw_calls = message.get("tool_calls")
                                    if raw_calls:
                                        try:
                                            ready = calls.take(raw_calls)
                                        except ValueError as exc:
                                            raise _malformed(ctx, line, str(exc)) from exc
                                        for event in ready:
                                            yielded = True
                                            yield event
                                if obj.get("done") is True:
                                    final = obj
                                    break
                            if final is not None:
                                break
                        if final is None:
                            raise ctx.error(
                                "transport", "stream ended before the final line (done: true)"
                            )
                        await drain(batches)
                        usage = parse_usage(final)
                        if usage is not None:
                            yielded = True
                            yield UsageReported(usage)
                        yielded = True
                        yield StreamFinished(
                            stop_reason(final.get("done_reason"), had_calls=bool(calls))
                        )
                        return
                except httpx.HTTPError as exc:
                    raise self._transport_error(ctx, exc) from exc
            except ProviderError as err:
                retry = self._plan_retry(attempt, err, yielded=yielded)
                yield retry
                await self._sleep(retry.delay_s)

    def _transport_error(self, ctx: ErrorContext, exc: httpx.HTTPError) -> ProviderError:
        if isinstance(exc, httpx.ConnectError) and connection_refused(exc):
            return ctx.error(
                "transport",
                f"Ollama is not running at {self._base_url} (connection refused); "
                "start it with `ollama serve`",
                unreachable=True,
            )
        return error_from_httpx(ctx, exc)

    def _not_found_hint(self, detail: str) -> str:
        if "model" in detail.lower():
            return f"pull it first: `ollama pull {self._model}`"
        # not Ollama's "model … not found": most likely base_url points elsewhere
        return (
            f"POST {self._url}; is base_url the Ollama server root, such as http://127.0.0.1:11434?"
        )


# --- helpers of the exchange -----------------------------------------------------------------


async def _check_status(response: httpx.Response, ctx: ErrorContext) -> None:
    """Raise the classified error of a failed response, or of one that is not a stream."""
    status = response.status_code
    if status >= 400:
        body = await response.aread()
        raise error_from_response(ctx, status, response.headers, body)
    content_type = response.headers.get("content-type", "").lower()
    if content_type.startswith("text/html"):
        body = await response.aread()
        raise ctx.error(
            "protocol",
            f"expected an NDJSON stream, got {content_type}: "
            + body[:200].decode("utf-8", "replace"),
            status=status,
        )


async def _line_batches(response: httpx.Response) -> AsyncGenerator[list[str], None]:
    """The lines of the body, in batches (one per byte piece that completes lines).

    A plain JSON answer (`application/json`, e.g. from a gateway that ignored `stream`) is
    one object that may span lines; it is given as one line.
    """
    if response.headers.get("content-type", "").lower().startswith("application/json"):
        body = (await response.aread()).decode("utf-8", "replace")
        # Raw line breaks in JSON can only be whitespace between tokens.
        body = body.replace("\r", " ").replace("\n", " ").strip()
        if body:
            yield [body]
        return
    tail = b""
    async for piece in response.aiter_bytes():
        cut = piece.rfind(b"\n")
        if cut < 0:
            tail += piece
            continue
        chunk = tail + piece[:cut] if tail else piece[:cut]
        tail = piece[cut + 1 :]
        text = chunk.decode("utf-8", "replace")
        if "\r" in text:
            text = text.replace("\r", "")
        lines = text.split("\n")
        if "\n\n" in text or not lines[0]:
            lines = [line for line in lines if line]
        yield lines
    if tail.strip():
        yield [tail.decode("utf-8", "replace")]


def _malformed(ctx: ErrorContext, line: str, why: str = "") -> ProviderError:
    reason = f" ({why})" if why else ""
    return ctx.error("protocol", f"malformed line{reason}: " + line[:200])


def _stream_error(ctx: ErrorContext, error: Any) -> ProviderError:
    message = error_message(error)
    return ctx.error(classify_stream_error(message), f"error in stream: {message}")
