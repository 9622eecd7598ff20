"""Ollama's native `/api/chat` over httpx streaming (NDJSON: one JSON object per line).

Normal runs never start Ollama: when nothing listens at `base_url` the error says so and how
to start it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import httpx

from soong_agent.adapters.providers.base import (
    HttpStreamProvider,
    StreamFormat,
    bearer,
    loads,
    malformed,
    scan,
)
from soong_agent.adapters.providers.http_errors import ErrorContext, connection_refused
from soong_agent.adapters.providers.ollama_wire import (
    ToolCalls,
    build_body,
    classify_stream_error,
    error_message,
    parse_usage,
    stop_reason,
)
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


NDJSON = StreamFormat(
    accept="application/x-ndjson",
    description="an NDJSON stream",
    not_streams=("text/html",),  # a plain JSON answer is read as a one-line stream
    split=_line_batches,
)


class OllamaChatProvider(HttpStreamProvider):
    """`ModelProvider` for a local (or gateway-fronted) Ollama server's `/api/chat`."""

    provider_name = "ollama"
    stream_format = NDJSON

    async def health(self) -> bool:
        """Whether an Ollama server answers at `base_url` (`GET /` gives 200). Never raises
        for network trouble; the key, when one is configured, is sent as for a chat."""
        timeout = httpx.Timeout(min(_HEALTH_TIMEOUT_S, self._timeout_s))
        try:
            response = await self._client.get(
                self._base_url + "/", headers=bearer(self._api_key()), timeout=timeout
            )
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def _endpoint(self) -> str:
        return "/api/chat"

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        return build_body(self._model, request)

    def _parser(self, ctx: ErrorContext, out: list[StreamEvent]) -> LineParser:
        return LineParser(ctx, out)

    def _error_in_body(self, ctx: ErrorContext, error: Any) -> ProviderError:
        return _stream_error(ctx, error)

    def _transport_error(self, ctx: ErrorContext, exc: httpx.HTTPError) -> ProviderError:
        if isinstance(exc, httpx.ConnectError) and connection_refused(exc):
            return ctx.error(
                "transport",
                f"Ollama is not running at {self._base_url} (connection refused); "
                "start it with `ollama serve`",
                unreachable=True,
            )
        return super()._transport_error(ctx, exc)

    def _not_found_hint(self, detail: str) -> str:
        if "model" in detail.lower():
            return f"pull it first: `ollama pull {self._model}`"
        # not Ollama's "model … not found": most likely base_url points elsewhere
        return (
            f"POST {self._url}; is base_url the Ollama server root, such as http://127.0.0.1:11434?"
        )


class LineParser:
    """The lines of one `/api/chat` stream, up to the final one (`done: true`), as events."""

    __slots__ = ("_calls", "_ctx", "_final", "_out")

    def __init__(self, ctx: ErrorContext, out: list[StreamEvent]) -> None:
        self._ctx = ctx
        self._out = out
        self._calls = ToolCalls()
        self._final: dict[str, Any] = {}

    def feed(self, batch: list[str]) -> bool:
        # --- the hot loop: one scan and a few lookups per line ---
        out = self._out
        append = out.append
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
                    raise malformed(self._ctx, "line", line) from exc
            if type(obj) is not dict:
                raise malformed(self._ctx, "line", line)
            error = obj.get("error")
            if error:
                raise _stream_error(self._ctx, error)
            message = obj.get("message")
            if message:
                if type(message) is not dict:
                    raise malformed(self._ctx, "line", line)
                text = message.get("content")
                if text and type(text) is str:
                    append(TextDelta(text))
                thinking = message.get("thinking")
                if thinking and type(thinking) is str:
                    append(ThinkingDelta(thinking))
                raw_calls = message.get("tool_calls")
                if raw_calls:
                    try:
                        out += self._calls.take(raw_calls)
                    except ValueError as exc:
                        raise malformed(self._ctx, "line", line, str(exc)) from exc
            if obj.get("done") is True:
                self._final = obj
                return True
        return False

    def finish(self, ended: bool) -> None:
        if not ended:
            raise self._ctx.error("transport", "stream ended before the final line (done: true)")
        final = self._final
        usage = parse_usage(final)
        if usage is not None:
            self._out.append(UsageReported(usage))
        had_calls = bool(self._calls)
        self._out.append(StreamFinished(stop_reason(final.get("done_reason"), had_calls=had_calls)))


def _stream_error(ctx: ErrorContext, error: Any) -> ProviderError:
    message = error_message(error)
    return ctx.error(classify_stream_error(message), f"error in stream: {message}")
