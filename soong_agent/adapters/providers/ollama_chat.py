"""Ollama's native `/api/chat` over httpx streaming (NDJSON: one JSON object per line).

Normal runs never start Ollama: when nothing listens at `base_url` the error says so and how
to start it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any, Unpack

import httpx

from soong_agent.adapters.providers.base import (
    SCAN_MAX,
    HttpProviderArgs,
    HttpStreamProvider,
    bearer,
    misshapen,
    parse,
    scan,
)
from soong_agent.adapters.providers.framing import StreamFormat
from soong_agent.adapters.providers.http_errors import ErrorContext, connection_refused
from soong_agent.adapters.providers.ollama_wire import (
    ToolCalls,
    build_body,
    classify_stream_error,
    error_message,
    parse_usage,
    stop_reason,
)
from soong_agent.adapters.providers.payloads import MAX_PAYLOAD_CHARS, ShapeError, opt_str
from soong_agent.adapters.providers.sse import OversizedPayload
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import (
    StreamEvent,
    StreamFinished,
    TextDelta,
    ThinkingDelta,
    Usage,
    UsageReported,
)

_HEALTH_TIMEOUT_S = 5.0
_BOM = b"\xef\xbb\xbf"


async def _line_batches(response: httpx.Response) -> AsyncGenerator[list[str], None]:
    """The lines of the body, in batches (one per byte piece that completes lines).

    A plain JSON answer (`application/json`, e.g. from a gateway that ignored `stream`) is
    one object that may span lines; it is given as one line. A byte order mark at the start
    is skipped; a line longer than `MAX_PAYLOAD_CHARS` bytes raises `OversizedPayload`.
    """
    if response.headers.get("content-type", "").lower().startswith("application/json"):
        yield await _whole_body(response)
        return
    tail = bytearray()  # an unfinished line
    first = True
    async for piece in response.aiter_bytes():
        cut = piece.rfind(b"\n")
        if cut < 0:
            tail += piece
            if len(tail) > MAX_PAYLOAD_CHARS:
                raise OversizedPayload("NDJSON line")
            continue
        if tail:
            tail += piece[:cut]
            chunk = bytes(tail)
        else:
            chunk = piece[:cut]
        tail = bytearray(piece[cut + 1 :])
        if first:
            first = False
            chunk = chunk.removeprefix(_BOM)
        text = chunk.decode("utf-8", "replace")
        if "\r" in text:
            text = text.replace("\r", "")
        lines = text.split("\n")
        if "\n\n" in text or not lines[0] or not lines[-1]:  # blank lines are not lines
            lines = [line for line in lines if line]
        if len(chunk) > MAX_PAYLOAD_CHARS and any(len(x) > MAX_PAYLOAD_CHARS for x in lines):
            raise OversizedPayload("NDJSON line")
        yield lines
    if first:
        tail = bytearray(bytes(tail).removeprefix(_BOM))
    if tail.strip():
        yield [tail.decode("utf-8", "replace")]


async def _whole_body(response: httpx.Response) -> list[str]:
    """A plain JSON body as one line (none when empty); `OversizedPayload` past the limit."""
    parts: list[bytes] = []
    size = 0
    async for piece in response.aiter_bytes():
        size += len(piece)
        if size > MAX_PAYLOAD_CHARS:
            raise OversizedPayload("answer")
        parts.append(piece)
    body = b"".join(parts).removeprefix(_BOM).decode("utf-8", "replace")
    # Raw line breaks in JSON can only be whitespace between tokens.
    body = body.replace("\r", " ").replace("\n", " ").strip()
    return [body] if body else []


NDJSON = StreamFormat(
    accept="application/x-ndjson",
    description="an NDJSON stream",
    not_streams=("text/html",),  # a plain JSON answer is read as a one-line stream
    split=_line_batches,
)


class OllamaChatProvider(HttpStreamProvider):
    """`ModelProvider` for a local (or gateway-fronted) Ollama server's `/api/chat`.

    `reasoning_effort` is sent as `think` (see `ollama_wire`); `vision` False sends a line of
    text in place of each image.
    """

    provider_name = "ollama"
    stream_format = NDJSON

    def __init__(
        self,
        *,
        reasoning_effort: str | None = None,
        vision: bool = True,
        **args: Unpack[HttpProviderArgs],
    ) -> None:
        super().__init__(**args)
        self._effort = reasoning_effort
        self._vision = vision

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
        return build_body(self._model, request, reasoning_effort=self._effort, vision=self._vision)

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
    """The lines of one `/api/chat` stream, up to the final one (`done: true`), as events.

    Every field read is type-checked; a line that does not fit is a protocol error naming the
    field (``message.tool_calls[0].function.name``), what came, and the start of the line.
    """

    __slots__ = ("_calls", "_ctx", "_done_reason", "_out", "_usage")

    def __init__(self, ctx: ErrorContext, out: list[StreamEvent]) -> None:
        self._ctx = ctx
        self._out = out
        self._calls = ToolCalls()
        self._usage: Usage | None = None
        self._done_reason: str | None = None

    def feed(self, batch: list[str]) -> bool:
        # --- the hot loop: one scan, a few lookups and type checks per line ---
        out = self._out
        append = out.append
        for line in batch:
            if len(line) <= SCAN_MAX:
                try:
                    obj, end = scan(line, 0)
                except (StopIteration, ValueError, RecursionError):
                    end = -1
                if end != len(line):
                    if not line.strip():
                        continue
                    obj = parse(self._ctx, "line", line)
            elif not line.strip():
                continue
            else:
                obj = parse(self._ctx, "line", line)
            if type(obj) is not dict:
                raise misshapen(self._ctx, "line", line, ShapeError("", "an object", obj))
            error = obj.get("error")
            if error:
                raise _stream_error(self._ctx, error)
            message = obj.get("message")
            if message is not None:
                if type(message) is not dict:
                    raise misshapen(
                        self._ctx, "line", line, ShapeError("message", "an object", message)
                    )
                text = message.get("content")
                thinking = message.get("thinking")
                raw_calls = message.get("tool_calls")
                if type(text) is str and text:
                    append(TextDelta(text))
                if type(thinking) is str and thinking:
                    append(ThinkingDelta(thinking))
                if (
                    raw_calls is not None
                    or (text is not None and type(text) is not str)
                    or (thinking is not None and type(thinking) is not str)
                ):
                    try:
                        opt_str(message, "content")
                        opt_str(message, "thinking")
                        if raw_calls is not None:
                            out += self._calls.take(raw_calls)
                    except ShapeError as exc:
                        raise misshapen(self._ctx, "line", line, exc.under("message")) from None
            done = obj.get("done")
            if done is True:
                try:
                    self._usage = parse_usage(obj)
                    self._done_reason = opt_str(obj, "done_reason")
                except ShapeError as exc:
                    raise misshapen(self._ctx, "line", line, exc) from None
                return True
            if done is not None and done is not False:
                raise misshapen(self._ctx, "line", line, ShapeError("done", "true or false", done))
        return False

    def finish(self, ended: bool) -> None:
        if not ended:
            raise self._ctx.error("transport", "stream ended before the final line (done: true)")
        if self._usage is not None:
            self._out.append(UsageReported(self._usage))
        had_calls = bool(self._calls)
        self._out.append(StreamFinished(stop_reason(self._done_reason, had_calls=had_calls)))


def _stream_error(ctx: ErrorContext, error: Any) -> ProviderError:
    message = error_message(error)
    return ctx.error(classify_stream_error(message), f"error in stream: {message}")
