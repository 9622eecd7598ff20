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

Strict mode (the default; `FakeAnthropicServer(strict=False)` turns it off) validates each POST
to .../v1/messages before a scripted response is consumed. An invalid request is recorded,
consumes nothing, is answered as the API answers it, HTTP 400 {"type": "error", "error":
{"type": "invalid_request_error", "message": <the first problem>}, "request_id": ...}, and is
kept in `server.rejections` (`.messages` lists every problem). The rules, one a line, with the
API's wording where it is known (N is the message index, M the block index):

- the body is a JSON object; no unknown top-level field ("<name>: Extra inputs are not permitted").
- `model` a non-empty string; `max_tokens` an integer >= 1 ("max_tokens: Field required").
- `stream` a boolean; `temperature` a number in [0, 1] (the API's range, not OpenAI's [0, 2]).
- `system` a non-empty string or a list of text blocks ("system: text content blocks must be
  non-empty").
- `messages` a non-empty list ("messages: at least one message is required").
- a message is {"role": "user" | "assistant", "content": ...} (no "system"/"tool" roles).
- the first message is a user message (the API said so for long; Bedrock still does).
- content is a non-empty string or list ("messages.N: all messages must have non-empty content
  except for the optional final assistant message").
- block types by role: user text/image/document/tool_result; assistant text/thinking/
  redacted_thinking/tool_use ("messages.N.content.M: ... not permitted in `user` messages").
- a text block's text is a string that is not empty nor only whitespace ("messages: text
  content blocks must contain non-whitespace text").
- a thinking block has a non-empty `signature` ("messages.N.content.M.thinking.signature:
  Field required"); a redacted_thinking block has its `data`.
- an assistant message holding thinking starts with it ("If an assistant message contains any
  thinking blocks, the first block must be thinking or redacted_thinking. Found text.").
- an assistant message does not end with thinking ("The final block in an assistant message
  cannot be `thinking`.").
- a tool_use has an id matching ^[a-zA-Z0-9_-]+$ ("messages.N.content.M.tool_use.id: String
  should match pattern"), unique in the request ("`tool_use` ids must be unique"), a
  non-empty name and an object `input`.
- every tool_use is answered in the next message, a user one ("messages.N: `tool_use` ids were
  found without `tool_result` blocks immediately after: <ids>").
- every tool_result answers a tool_use of the previous message ("unexpected `tool_use_id`
  found in `tool_result` blocks: <id>"), and answers it once.
- tool_result blocks come before any other block of their user message (the API refuses text
  or images ahead of them).
- a tool_result's content is a string or a list of text/image blocks, and is not empty when
  `is_error` is true ("content cannot be empty if `is_error` is true").
- a final assistant message (a prefill) does not end with whitespace ("final assistant
  content cannot end with trailing whitespace").
- at most 4 blocks carry `cache_control` ("A maximum of 4 blocks with cache_control may be
  provided. Found 5."), each {"type": "ephemeral"} with an optional "ttl" of "5m" or "1h", and
  none on a thinking block ("cache_control cannot be set for thinking blocks").
- an `image` block (in a user message or a tool_result's content) has a `source` of type
  "base64" with a `media_type` of image/jpeg, image/png, image/gif or image/webp and `data`
  that is standard base64 of an image of that type, at most 5 MB decoded ("Image does not
  match the provided media type image/png", "image exceeds 5 MB maximum: N bytes > 5242880
  bytes"), or of type "url" with a `url`.
- `tools` a list of {"name": ^[a-zA-Z0-9_-]{1,64}$, unique, "input_schema": {"type":
  "object", ...}, "description"?: string}.
- `tool_choice` one of {"type": "auto" | "any" | "none"} or {"type": "tool", "name": <a tool
  in `tools`>}, and only beside `tools`.
- `thinking` is {"type": "disabled"} or {"type": "enabled", "budget_tokens": >= 1024 and
  < max_tokens}; with thinking enabled: no temperature but 1, no forced tool use ("Thinking may
  not be enabled when tool_choice forces tool use."), no final assistant message (no
  prefill), and in a tool loop (the last message holds tool results) the assistant message
  before it starts with a thinking block ("When `thinking` is enabled, a final `assistant`
  message must start with a thinking block").
- with thinking not enabled, a final assistant message holds no thinking ("When thinking is
  disabled, an `assistant` message in the final position cannot contain `thinking`.").

Consecutive messages of one role are accepted (the API merges them into one turn).

`FakeAnthropicServer(prompt_cache=True)` also models the prompt cache as Anthropic documents it
(`tests/support/anthropic_cache.py`): the `input_tokens`, `cache_creation_input_tokens` and
`cache_read_input_tokens` of each answer's `message_start` are computed from the request and
what earlier requests wrote at their breakpoints, in place of the scripted ones.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import threading
import uuid
from dataclasses import dataclass, replace
from http.server import ThreadingHTTPServer
from typing import Any

from tests.support.anthropic_cache import CacheUsage, PromptCache
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
    "Rejection",
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
    "validate_messages_request",
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


# --- strict request validation ---------------------------------------------------------------

_KNOWN_FIELDS = frozenset(
    {
        "model", "messages", "max_tokens", "system", "stream", "temperature", "top_p", "top_k",
        "stop_sequences", "tools", "tool_choice", "thinking", "metadata", "service_tier",
        "container", "mcp_servers", "context_management",
    }
)  # fmt: skip
_BLOCKS_BY_ROLE = {
    "user": ("text", "image", "document", "tool_result"),
    "assistant": ("text", "thinking", "redacted_thinking", "tool_use"),
}
_THINKING = ("thinking", "redacted_thinking")
_TOOL_USE_ID = re.compile(r"[a-zA-Z0-9_-]+")
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_MAX_CACHE_BREAKPOINTS = 4
_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
_MAX_IMAGE_BYTES = 5 * 1024 * 1024
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def image_type_of(data: bytes) -> str | None:
    """The media type the bytes of an image show (as the API checks it), None for another."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


@dataclass(frozen=True)
class Rejection:
    """A request the strict server refused: the 400 went out, no script was consumed."""

    request_index: int  # its index in `FakeAnthropicServer.requests`
    status: int
    problems: tuple[str, ...]  # the first one is the answer's message

    @property
    def messages(self) -> list[str]:
        return list(self.problems)

    def __str__(self) -> str:
        return f"request {self.request_index} (HTTP {self.status}): " + "; ".join(self.problems)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _blank(text: Any) -> bool:
    return not isinstance(text, str) or not text.strip()


class _Validator:
    """Walks one Messages request body and collects what the API refuses."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.cache_blocks = 0

    def fail(self, message: str) -> None:
        self.problems.append(message)

    def count_cache(self, block: Any, where: str = "") -> None:
        if not isinstance(block, dict) or "cache_control" not in block:
            return
        self.cache_blocks += 1
        control = block["cache_control"]
        if (
            not isinstance(control, dict)
            or control.get("type") != "ephemeral"
            or set(control) - {"type", "ttl"}
            or control.get("ttl", "5m") not in ("5m", "1h")
        ):
            self.fail(f"{where}cache_control: Input should be {{'type': 'ephemeral'}}")
        if block.get("type") in _THINKING:
            self.fail(f"{where}cache_control cannot be set for thinking blocks")

    def image(self, where: str, block: dict[str, Any]) -> None:
        """An image block's source (see the module doc)."""
        source = block.get("source")
        kind = source.get("type") if isinstance(source, dict) else None
        if kind == "url":
            if _blank(source.get("url")):  # type: ignore[union-attr]
                self.fail(f"{where}.image.source.url.url: Field required")
            return
        if kind != "base64":
            self.fail(f"{where}.image.source: Input tag does not match 'base64' or 'url'")
            return
        assert isinstance(source, dict)
        media_type = source.get("media_type")
        if media_type not in _IMAGE_TYPES:
            self.fail(
                f"{where}.image.source.base64.media_type: Input should be 'image/jpeg', "
                "'image/png', 'image/gif' or 'image/webp'"
            )
            return
        data = source.get("data")
        if not isinstance(data, str) or not data or not _BASE64.fullmatch(data):
            self.fail(f"{where}.image.source.base64.data: the image data is not valid base64")
            return
        try:
            raw = base64.b64decode(data, validate=True)
        except binascii.Error:
            self.fail(f"{where}.image.source.base64.data: the image data is not valid base64")
            return
        if len(raw) > _MAX_IMAGE_BYTES:
            self.fail(
                f"{where}.image.source.base64: image exceeds 5 MB maximum: {len(raw)} bytes > "
                f"{_MAX_IMAGE_BYTES} bytes"
            )
        elif image_type_of(raw) != media_type:
            self.fail(
                f"{where}.image.source.base64.data: Image does not match the provided media "
                f"type {media_type}"
            )

    # -- the body --

    def body(self, raw: bytes) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            self.fail("There was an issue with your request body: it is not valid JSON")
            return
        if not isinstance(body, dict):
            self.fail("The request body is not a JSON object")
            return
        for name in body:
            if name not in _KNOWN_FIELDS:
                self.fail(f"{name}: Extra inputs are not permitted")
        if not isinstance(body.get("model"), str) or not body["model"]:
            self.fail("model: Field required")
        max_tokens = body.get("max_tokens")
        if not _is_int(max_tokens) or max_tokens < 1:
            self.fail("max_tokens: Field required (an integer >= 1)")
        if "stream" in body and not isinstance(body["stream"], bool):
            self.fail("stream: Input should be a valid boolean")
        temperature = body.get("temperature")
        if temperature is not None and (not _is_number(temperature) or not 0 <= temperature <= 1):
            self.fail("temperature: Input should be a number between 0 and 1")
        self.system(body.get("system"))
        tool_names = self.tools(body.get("tools"))
        self.tool_choice(body, tool_names)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            self.fail("messages: at least one message is required")
        else:
            self.messages(messages)
            self.thinking(body, messages)
        if self.cache_blocks > _MAX_CACHE_BREAKPOINTS:
            self.fail(
                f"A maximum of {_MAX_CACHE_BREAKPOINTS} blocks with cache_control may be "
                f"provided. Found {self.cache_blocks}."
            )

    def system(self, system: Any) -> None:
        if system is None:
            return
        if isinstance(system, str):
            if not system.strip():
                self.fail("system: text content blocks must be non-empty")
            return
        if not isinstance(system, list):
            self.fail("system: Input should be a valid string or list of text blocks")
            return
        for i, block in enumerate(system):
            self.count_cache(block)
            if not isinstance(block, dict) or block.get("type") != "text":
                self.fail(f"system.{i}: Input should be a text block")
            elif _blank(block.get("text")):
                self.fail("system: text content blocks must be non-empty")

    # -- tools --

    def tools(self, tools: Any) -> set[str] | None:
        if tools is None:
            return None
        if not isinstance(tools, list):
            self.fail("tools: Input should be a valid list")
            return None
        names: set[str] = set()
        for i, tool in enumerate(tools):
            self.count_cache(tool)
            if not isinstance(tool, dict):
                self.fail(f"tools.{i}: Input should be an object")
                continue
            name = tool.get("name")
            if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
                self.fail(f"tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'")
            elif name in names:
                self.fail("tools: Tool names must be unique.")
            else:
                names.add(name)
            schema = tool.get("input_schema")
            if not isinstance(schema, dict) or schema.get("type") != "object":
                self.fail(f"tools.{i}.input_schema: an object schema with type 'object' required")
            if "description" in tool and not isinstance(tool["description"], str):
                self.fail(f"tools.{i}.description: Input should be a valid string")
        return names

    def tool_choice(self, body: dict[str, Any], tool_names: set[str] | None) -> None:
        choice = body.get("tool_choice")
        if choice is None:
            return
        if not tool_names:
            self.fail("tool_choice: may only be specified while providing tools")
        if not isinstance(choice, dict) or choice.get("type") not in (
            "auto",
            "any",
            "none",
            "tool",
        ):
            self.fail("tool_choice: Input tag does not match 'auto', 'any', 'tool' or 'none'")
        elif choice["type"] == "tool" and choice.get("name") not in (tool_names or set()):
            self.fail(f"tool_choice.name: no tool named {choice.get('name')!r} in `tools`")

    # -- messages --

    def messages(self, messages: list[Any]) -> None:
        seen_ids: set[str] = set()
        last = len(messages) - 1
        for n, message in enumerate(messages):
            if not isinstance(message, dict):
                self.fail(f"messages.{n}: Input should be an object")
                continue
            role = message.get("role")
            if role not in _BLOCKS_BY_ROLE:
                self.fail(f"messages.{n}.role: Input should be 'user' or 'assistant'")
                continue
            if n == 0 and role != "user":
                self.fail('messages: first message must use the "user" role')
            content = message.get("content")
            final_assistant = n == last and role == "assistant"
            if isinstance(content, str):
                if not content.strip() and not final_assistant:
                    self.fail(
                        f"messages.{n}: all messages must have non-empty content except for "
                        "the optional final assistant message"
                    )
                if final_assistant and content != content.rstrip():
                    self.fail("final assistant content cannot end with trailing whitespace")
                continue
            if not isinstance(content, list):
                self.fail(f"messages.{n}.content: Input should be a valid string or list")
                continue
            if not content and not final_assistant:
                self.fail(
                    f"messages.{n}: all messages must have non-empty content except for the "
                    "optional final assistant message"
                )
            for m, block in enumerate(content):
                self.block(n, m, role, block, seen_ids)
            if role == "assistant":
                self.assistant_order(n, content)
                if final_assistant and content:
                    tail = content[-1]
                    text = tail.get("text") if isinstance(tail, dict) else None
                    if isinstance(text, str) and text != text.rstrip():
                        self.fail("final assistant content cannot end with trailing whitespace")
            else:
                self.user_order(n, content)
        self.pairing(messages)

    def block(self, n: int, m: int, role: str, block: Any, seen_ids: set[str]) -> None:
        where = f"messages.{n}.content.{m}"
        if not isinstance(block, dict):
            self.fail(f"{where}: Input should be an object")
            return
        self.count_cache(block, f"{where}.")
        kind = block.get("type")
        if kind not in _BLOCKS_BY_ROLE[role]:
            self.fail(f"{where}: blocks of type {kind!r} are not permitted in `{role}` messages")
            return
        if kind == "image":
            self.image(where, block)
        elif kind == "text":
            text = block.get("text")
            if not isinstance(text, str) or not text:
                self.fail("messages: text content blocks must be non-empty")
            elif not text.strip():
                self.fail("messages: text content blocks must contain non-whitespace text")
        elif kind == "thinking":
            if not isinstance(block.get("thinking"), str):
                self.fail(f"{where}.thinking.thinking: Field required")
            if _blank(block.get("signature")):
                self.fail(f"{where}.thinking.signature: Field required")
        elif kind == "redacted_thinking":
            if _blank(block.get("data")):
                self.fail(f"{where}.redacted_thinking.data: Field required")
        elif kind == "tool_use":
            call_id = block.get("id")
            if not isinstance(call_id, str) or not _TOOL_USE_ID.fullmatch(call_id):
                self.fail(f"{where}.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'")
            elif call_id in seen_ids:
                self.fail(f"{where}: `tool_use` ids must be unique")
            else:
                seen_ids.add(call_id)
            if _blank(block.get("name")):
                self.fail(f"{where}.tool_use.name: Field required")
            if not isinstance(block.get("input"), dict):
                self.fail(f"{where}.tool_use.input: Input should be a valid dictionary")
        elif kind == "tool_result":
            self.tool_result(where, block)

    def tool_result(self, where: str, block: dict[str, Any]) -> None:
        if not isinstance(block.get("tool_use_id"), str):
            self.fail(f"{where}.tool_result.tool_use_id: Field required")
        content = block.get("content")
        if isinstance(content, list):
            if not content and block.get("is_error") is True:
                content = None
            for i, part in enumerate(content or []):
                if not isinstance(part, dict) or part.get("type") not in ("text", "image"):
                    self.fail(f"{where}.tool_result.content.{i}: a text or image block expected")
                    continue
                self.count_cache(part, f"{where}.tool_result.content.{i}.")
                if part["type"] == "text" and _blank(part.get("text")):
                    self.fail("messages: text content blocks must contain non-whitespace text")
                elif part["type"] == "image":
                    self.image(f"{where}.tool_result.content.{i}", part)
        elif content is not None and not isinstance(content, str):
            self.fail(f"{where}.tool_result.content: Input should be a valid string or list")
        if block.get("is_error") is True and not content:
            self.fail(f"{where}.tool_result: content cannot be empty if `is_error` is true")

    def assistant_order(self, n: int, content: list[Any]) -> None:
        kinds = [b.get("type") if isinstance(b, dict) else None for b in content]
        if any(k in _THINKING for k in kinds) and kinds[0] not in _THINKING:
            self.fail(
                f"messages.{n}.content.0: If an assistant message contains any thinking "
                f"blocks, the first block must be thinking or redacted_thinking. Found {kinds[0]}."
            )
        if kinds and kinds[-1] == "thinking":
            self.fail(
                f"messages.{n}: The final block in an assistant message cannot be `thinking`."
            )

    def user_order(self, n: int, content: list[Any]) -> None:
        kinds = [b.get("type") if isinstance(b, dict) else None for b in content]
        if "tool_result" in kinds:
            first_other = next((i for i, k in enumerate(kinds) if k != "tool_result"), len(kinds))
            if "tool_result" in kinds[first_other:]:
                self.fail(
                    f"messages.{n}: tool_result blocks must come first in the message, before "
                    "any other content"
                )

    def pairing(self, messages: list[Any]) -> None:
        calls: list[str] = []  # the tool_use ids of the message before
        for n, message in enumerate(messages):
            blocks = _blocks(message)
            role = message.get("role") if isinstance(message, dict) else None
            results: list[Any] = []
            if role == "user":
                results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
                unexpected = [str(r) for r in results if r not in calls]
                if unexpected:
                    self.fail(
                        f"messages.{n}: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{', '.join(unexpected)}. Each `tool_result` block must have a "
                        "corresponding `tool_use` block in the previous message."
                    )
                if len(set(map(str, results))) != len(results):
                    self.fail(f"messages.{n}: a `tool_use` id has more than one `tool_result`")
            self.unanswered(n - 1, [c for c in calls if c not in results])
            calls = []
            if role == "assistant":
                calls = [str(b.get("id")) for b in blocks if b.get("type") == "tool_use"]
        self.unanswered(len(messages) - 1, calls)

    def unanswered(self, n: int, calls: list[str]) -> None:
        if calls:
            self.fail(
                f"messages.{n}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(calls)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )

    # -- extended thinking --

    def thinking(self, body: dict[str, Any], messages: list[Any]) -> None:
        thinking = body.get("thinking")
        enabled = isinstance(thinking, dict) and thinking.get("type") == "enabled"
        final = messages[-1] if isinstance(messages[-1], dict) else {}
        final_blocks = _blocks(final)
        if thinking is not None:
            if not isinstance(thinking, dict) or thinking.get("type") not in (
                "enabled",
                "disabled",
            ):
                self.fail("thinking: Input tag does not match 'enabled' or 'disabled'")
            elif enabled:
                budget = thinking.get("budget_tokens")
                max_tokens = body.get("max_tokens")
                if not _is_int(budget) or budget < 1024:
                    self.fail("thinking.enabled.budget_tokens: Input should be >= 1024")
                elif _is_int(max_tokens) and max_tokens <= budget:
                    self.fail("`max_tokens` must be greater than `thinking.budget_tokens`")
        if not enabled:
            if final.get("role") == "assistant" and any(
                b.get("type") in _THINKING for b in final_blocks
            ):
                self.fail(
                    f"messages.{len(messages) - 1}.content.0: When thinking is disabled, an "
                    "`assistant` message in the final position cannot contain `thinking`. To "
                    "use thinking blocks, enable `thinking` in your request."
                )
            return
        temperature = body.get("temperature")
        if temperature is not None and temperature != 1:
            self.fail("`temperature` may only be set to 1 when thinking is enabled")
        choice = body.get("tool_choice")
        if isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
            self.fail("Thinking may not be enabled when tool_choice forces tool use.")
        if final.get("role") == "assistant":
            self.fail("Prefilling the assistant message is not supported with thinking enabled")
        elif len(messages) >= 2 and any(b.get("type") == "tool_result" for b in final_blocks):
            before = _blocks(messages[-2])
            first = before[0].get("type") if before else None
            if first not in _THINKING:
                self.fail(
                    f"messages.{len(messages) - 2}.content.0.type: Expected `thinking` or "
                    f"`redacted_thinking`, but found `{first}`. When `thinking` is enabled, a "
                    "final `assistant` message must start with a thinking block (preceeding "
                    "the lastmost set of `tool_use` and `tool_result` blocks). We recommend you "
                    "include thinking blocks from previous turns. To avoid this requirement, "
                    "disable `thinking`."
                )


def _blocks(message: Any) -> list[dict[str, Any]]:
    """The content blocks of a message (a string content as one text block)."""
    if not isinstance(message, dict):
        return []
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict)]


def validate_messages_request(body: bytes) -> list[str]:
    """What the API refuses in this Messages request body (empty: valid)."""
    validator = _Validator()
    validator.body(body)
    return validator.problems


# --- the server ------------------------------------------------------------------------------


class _AnthropicHandler(_Handler):
    server: _AnthropicHTTPServer

    def do_GET(self) -> None:
        self._record(b"")
        self._serve(error_response(404, message=f"no route for GET {self.path}"))

    def do_POST(self) -> None:
        body = self._read_body()
        self._record(body)
        owner = self.server.owner
        if self.path.split("?")[0].rstrip("/").endswith("/v1/messages"):
            problems = validate_messages_request(body) if owner.strict else []
            if problems:
                response = error_response(400, message=problems[0])
                owner._reject_last(response.status, problems)
            else:
                response = owner._next() or _no_script_left()
                if owner.prompt_cache is not None and response.status == 200:
                    response = _with_cache_usage(
                        response, owner.prompt_cache.usage(json.loads(body))
                    )
        else:
            response = error_response(404, message=f"no route for POST {self.path}")
        self._serve(response)


def _with_cache_usage(response: ScriptedResponse, usage: CacheUsage) -> ScriptedResponse:
    """The response with the input counts of its `message_start` replaced by `usage`."""
    chunks = list(response.chunks)
    for i, chunk in enumerate(chunks):
        if chunk.startswith(b"event: message_start\n"):
            data = json.loads(chunk.split(b"\ndata: ", 1)[1])
            counts = data["message"].get("usage")
            if counts is not None:
                counts["input_tokens"] = usage.input_tokens
                counts["cache_creation_input_tokens"] = usage.cache_creation_input_tokens
                counts["cache_read_input_tokens"] = usage.cache_read_input_tokens
            chunks[i] = _frame("message_start", _dumps(data))
            break
    return replace(response, chunks=chunks)


class _AnthropicHTTPServer(_HTTPServer):
    owner: FakeAnthropicServer

    def __init__(self, owner: FakeAnthropicServer) -> None:
        self.owner = owner
        ThreadingHTTPServer.__init__(self, ("127.0.0.1", 0), _AnthropicHandler)


class FakeAnthropicServer(FakeOpenAIServer):
    """A scripted Anthropic Messages server on 127.0.0.1 (a free port), in background threads.

    It shares the recording, queueing and connection bookkeeping of `FakeOpenAIServer`; only
    the route, the error bodies, the request validation and `base_url` (the host, without /v1)
    differ. `strict` (the default) refuses invalid Messages requests as the API does: see the
    module docstring for the rules, and `rejections` for what was refused.
    """

    def __init__(self, *, strict: bool = True, prompt_cache: bool = False) -> None:
        super().__init__()
        self.strict = strict
        self._refused: list[Rejection] = []
        self.prompt_cache: PromptCache | None = PromptCache() if prompt_cache else None
        """The prompt cache the answers' usage is computed from (`prompt_cache=True`)."""

    @property
    def rejections(self) -> list[Rejection]:
        """The requests strict mode refused, in arrival order (empty when all were valid)."""
        with self._lock:
            return list(self._refused)

    def _reject_last(self, status: int, problems: list[str]) -> None:
        # called right after the request was recorded, from its handler thread
        with self._lock:
            index = len(self._requests) - 1
            self._refused.append(Rejection(index, status, tuple(problems)))

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
