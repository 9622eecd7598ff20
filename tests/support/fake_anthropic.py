"""A real loopback HTTP server that speaks the Anthropic Messages streaming format.

The builders have the names of those in `fake_openai`, so one contract suite can script either
server. Tests point a provider at `base_url` (the host, no /v1: the adapter appends
/v1/messages) and inspect what the server received::

    with FakeAnthropicServer() as srv:
        srv.enqueue(text_response("Hello there"), tool_call_response([("toolu_1", "ls", "{}")]))
        ...
        assert srv.requests[0].json["stream"] is True

POST .../v1/messages is answered from the queue in FIFO order (a 500 api_error "no scripted
response left" when it is empty); anything else gets a 404 not_found_error.

Every stream has the event order of the real API, byte for byte in shape::

    message_start
    content_block_start (index 0)   ping   content_block_delta ...   content_block_stop
    content_block_start (index 1)   content_block_delta ...          content_block_stop
    ...
    message_delta (stop_reason, cumulative output_tokens)
    message_stop

Each event is an `event: <type>` line, a `data: <json>` line whose "type" repeats the event
name, and a blank line. Errors after the 200 are `event: error` with
`{"type": "error", "error": {"type": ..., "message": ...}}`; HTTP errors carry the same body
plus a `request_id`.
"""

from __future__ import annotations

import json
import threading
import uuid
from http.server import ThreadingHTTPServer
from typing import Any

from tests.support.fake_openai import (
    FakeOpenAIServer,
    Framing,
    RecordedRequest,
    ScriptedResponse,
    _Handler,
    _HTTPServer,
    split_text,
)

__all__ = [
    "FakeAnthropicServer",
    "Framing",
    "RecordedRequest",
    "ScriptedResponse",
    "cut_stream_response",
    "error_response",
    "events_response",
    "malformed_chunk_response",
    "raw_bytes_response",
    "raw_sse_response",
    "redacted_thinking_response",
    "split_text",
    "stream_error_response",
    "text_response",
    "thinking_response",
    "tool_call_response",
]

DEFAULT_MODEL = "claude-fake-1"
DEFAULT_SIGNATURE = "EqQBCkgIARABGAIiQFakeSignatureOfTheThinkingBlockAAAA+/=="
_SSE_HEADERS = [("Content-Type", "text/event-stream; charset=utf-8"), ("Cache-Control", "no-cache")]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _frame(event: str, data: str) -> bytes:
    return f"event: {event}\ndata: {data}\n\n".encode()


class _Events:
    """Builds the events of one streamed message in the API's order and shapes."""

    def __init__(
        self,
        *,
        model: str,
        usage: bool,
        input_tokens: int,
        output_tokens: int,
        cache_read: int,
        cache_write: int,
    ) -> None:
        self.model = model
        self.usage = usage
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cache_read = cache_read
        self.cache_write = cache_write
        self.index = 0
        self.pinged = False
        self.out: list[bytes] = []
        self._start()

    def event(self, obj: dict[str, Any]) -> None:
        self.out.append(_frame(obj["type"], _dumps(obj)))

    def _start(self) -> None:
        message: dict[str, Any] = {
            "id": "msg_01" + uuid.uuid4().hex[:22],
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
        }
        if self.usage:
            message["usage"] = {
                "input_tokens": self.input_tokens,
                "cache_creation_input_tokens": self.cache_write,
                "cache_read_input_tokens": self.cache_read,
                "output_tokens": 1,
                "service_tier": "standard",
            }
        self.event({"type": "message_start", "message": message})

    def _ping_once(self) -> None:
        # the API sends one ping after the first content_block_start
        if not self.pinged:
            self.pinged = True
            self.out.append(_frame("ping", '{"type": "ping"}'))

    def block(self, content_block: dict[str, Any], deltas: list[dict[str, Any]]) -> None:
        index = self.index
        self.index += 1
        self.event({"type": "content_block_start", "index": index, "content_block": content_block})
        self._ping_once()
        for delta in deltas:
            self.event({"type": "content_block_delta", "index": index, "delta": delta})
        self.event({"type": "content_block_stop", "index": index})

    def text(self, text: str, pieces: int) -> None:
        deltas = [{"type": "text_delta", "text": p} for p in split_text(text, pieces)]
        self.block({"type": "text", "text": ""}, deltas)

    def open_text(self, text: str, pieces: int) -> None:
        """A text block's start, ping and deltas, left open (for broken streams)."""
        index = self.index
        self.index += 1
        self.event(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "text", "text": ""},
            }
        )
        self._ping_once()
        for p in split_text(text, pieces):
            self.event(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": p},
                }
            )

    def tool_use(self, call_id: str, name: str, arguments: str, fragments: int) -> None:
        deltas = [{"type": "input_json_delta", "partial_json": ""}]
        deltas += [
            {"type": "input_json_delta", "partial_json": p}
            for p in split_text(arguments, fragments)
        ]
        self.block({"type": "tool_use", "id": call_id, "name": name, "input": {}}, deltas)

    def thinking(self, thinking: str, signature: str, pieces: int) -> None:
        deltas: list[dict[str, Any]] = [
            {"type": "thinking_delta", "thinking": p} for p in split_text(thinking, pieces)
        ]
        deltas.append({"type": "signature_delta", "signature": signature})
        self.block({"type": "thinking", "thinking": "", "signature": ""}, deltas)

    def redacted_thinking(self, data: str) -> None:
        self.block({"type": "redacted_thinking", "data": data}, [])

    def finish(self, stop_reason: str) -> list[bytes]:
        delta: dict[str, Any] = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        }
        if self.usage:
            delta["usage"] = {"output_tokens": self.output_tokens}
        self.event(delta)
        self.event({"type": "message_stop"})
        return self.out


def _events(
    *,
    model: str = DEFAULT_MODEL,
    usage: bool = True,
    input_tokens: int = 11,
    output_tokens: int = 7,
    cache_read: int = 0,
    cache_write: int = 0,
) -> _Events:
    return _Events(
        model=model,
        usage=usage,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read=cache_read,
        cache_write=cache_write,
    )


def _sse(chunks: list[bytes], *, framing: Framing = "chunked") -> ScriptedResponse:
    return ScriptedResponse(headers=list(_SSE_HEADERS), chunks=chunks, framing=framing)


# --- builders --------------------------------------------------------------------------------


def text_response(
    text: str,
    *,
    pieces: int = 3,
    usage: bool = True,
    stop_reason: str = "end_turn",
    model: str = DEFAULT_MODEL,
    input_tokens: int = 11,
    output_tokens: int = 7,
    cache_read: int = 0,
    cache_write: int = 0,
) -> ScriptedResponse:
    """A streamed answer of `text` in `pieces` text deltas of one text block."""
    e = _events(
        model=model,
        usage=usage,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read=cache_read,
        cache_write=cache_write,
    )
    e.text(text, pieces)
    return _sse(e.finish(stop_reason))


def tool_call_response(
    calls: list[tuple[str, str, str]],
    *,
    fragments: int = 3,
    text: str = "",
    usage: bool = True,
    model: str = DEFAULT_MODEL,
    input_tokens: int = 11,
    output_tokens: int = 7,
    cache_read: int = 0,
    cache_write: int = 0,
) -> ScriptedResponse:
    """A streamed answer making the tool calls `(id, name, arguments_json)`, each a tool_use
    block whose input arrives in an empty then `fragments` input_json_delta pieces; `text`
    (if any) comes first in its own text block."""
    e = _events(
        model=model,
        usage=usage,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read=cache_read,
        cache_write=cache_write,
    )
    if text:
        e.text(text, 3)
    for call_id, name, arguments in calls:
        e.tool_use(call_id, name, arguments, fragments)
    return _sse(e.finish("tool_use"))


def thinking_response(
    thinking: str,
    text: str,
    *,
    signature: str = DEFAULT_SIGNATURE,
    calls: list[tuple[str, str, str]] | None = None,
    pieces: int = 3,
    usage: bool = True,
    model: str = DEFAULT_MODEL,
) -> ScriptedResponse:
    """A thinking block (`thinking` in pieces, closed by a signature_delta), then a text block
    of `text` (if any), then the tool calls (if any)."""
    e = _events(model=model, usage=usage)
    e.thinking(thinking, signature, pieces)
    if text:
        e.text(text, pieces)
    for call_id, name, arguments in calls or []:
        e.tool_use(call_id, name, arguments, 3)
    return _sse(e.finish("tool_use" if calls else "end_turn"))


def redacted_thinking_response(
    data: str, text: str, *, usage: bool = True, model: str = DEFAULT_MODEL
) -> ScriptedResponse:
    """A redacted_thinking block (its data whole in content_block_start), then `text`."""
    e = _events(model=model, usage=usage)
    e.redacted_thinking(data)
    e.text(text, 3)
    return _sse(e.finish("end_turn"))


def events_response(
    events: list[dict[str, Any]], *, framing: Framing = "chunked"
) -> ScriptedResponse:
    """Exactly these event objects, each framed as `event: <its type>` + `data: <json>`."""
    return _sse([_frame(str(obj.get("type")), _dumps(obj)) for obj in events], framing=framing)


def error_response(
    status: int,
    *,
    message: str = "fake error",
    type_: str | None = None,
    headers: dict[str, str] | None = None,
) -> ScriptedResponse:
    """A non-streamed JSON error in Anthropic's shape, with a request id."""
    if type_ is None:
        type_ = {
            400: "invalid_request_error",
            401: "authentication_error",
            403: "permission_error",
            404: "not_found_error",
            413: "request_too_large",
            429: "rate_limit_error",
            529: "overloaded_error",
        }.get(status, "api_error" if status >= 500 else "invalid_request_error")
    request_id = "req_01" + uuid.uuid4().hex[:22]
    body = _dumps(
        {"type": "error", "error": {"type": type_, "message": message}, "request_id": request_id}
    )
    all_headers = [("Content-Type", "application/json"), ("request-id", request_id)]
    all_headers += list((headers or {}).items())
    return ScriptedResponse(
        status=status, headers=all_headers, chunks=[body.encode()], framing="length"
    )


def stream_error_response(
    type_: str = "overloaded_error", message: str = "Overloaded", *, text: str = ""
) -> ScriptedResponse:
    """A 200 stream that breaks with `event: error`: after message_start alone, or after a
    text block's start, ping and the deltas of `text` when it is given."""
    e = _events()
    if text:
        e.open_text(text, 3)
    error = {"type": "error", "error": {"type": type_, "message": message}}
    e.out.append(_frame("error", json.dumps(error)))
    return _sse(e.out)


def cut_stream_response(text: str, *, framing: Framing = "chunked") -> ScriptedResponse:
    """message_start and a text block's first events, then the connection closes without
    message_stop (chunked: an unfinished body; "close": a clean end of the body)."""
    e = _events()
    if text:
        e.open_text(text, 3)
    response = _sse(e.out, framing=framing)
    response.cut_after = len(e.out)
    return response


def malformed_chunk_response() -> ScriptedResponse:
    """message_start, then a data line that is not JSON, then the rest of a normal answer."""
    e = _events()
    e.out.append(b'event: content_block_start\ndata: {"type":"content_block_start","index":0,\n\n')
    e.text("never seen", 2)
    return _sse(e.finish("end_turn"))


def raw_sse_response(
    lines: list[str], *, status: int = 200, framing: Framing = "chunked"
) -> ScriptedResponse:
    """Each string is sent as one line (a "\\n" is appended) and flushed on its own."""
    return ScriptedResponse(
        status=status,
        headers=list(_SSE_HEADERS),
        chunks=[(line + "\n").encode() for line in lines],
        framing=framing,
    )


def raw_bytes_response(
    chunks: list[bytes], *, status: int = 200, framing: Framing = "chunked"
) -> ScriptedResponse:
    """Exactly these bytes, each piece flushed on its own."""
    return ScriptedResponse(
        status=status, headers=list(_SSE_HEADERS), chunks=list(chunks), framing=framing
    )


def _no_script_left() -> ScriptedResponse:
    return error_response(500, message="fake server: no scripted response left", type_="api_error")


# --- the server ------------------------------------------------------------------------------


class _AnthropicHandler(_Handler):
    def do_GET(self) -> None:
        self._record(b"")
        self._serve(error_response(404, message=f"no route for GET {self.path}"))

    def do_POST(self) -> None:
        body = self._read_body()
        self._record(body)
        if self.path.split("?")[0].rstrip("/").endswith("/v1/messages"):
            response = self.server.owner._next() or _no_script_left()
        else:
            response = error_response(404, message=f"no route for POST {self.path}")
        self._serve(response)


class _AnthropicHTTPServer(_HTTPServer):
    def __init__(self, owner: FakeOpenAIServer) -> None:
        self.owner = owner
        ThreadingHTTPServer.__init__(self, ("127.0.0.1", 0), _AnthropicHandler)


class FakeAnthropicServer(FakeOpenAIServer):
    """A scripted Anthropic Messages server on 127.0.0.1 (a free port), in background threads.

    It shares the recording, queueing and connection bookkeeping of `FakeOpenAIServer`; only
    the route, the error bodies and `base_url` (the host, without /v1) differ.
    """

    def start(self) -> FakeAnthropicServer:
        if self._httpd is not None:
            return self
        self._httpd = _AnthropicHTTPServer(self)
        port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __enter__(self) -> FakeAnthropicServer:
        return self.start()
