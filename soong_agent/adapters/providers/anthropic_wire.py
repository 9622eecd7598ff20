"""The Anthropic Messages wire format: request bodies, stream state, stop reasons, errors.

Pure functions and small state holders; nothing here touches the network.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from soong_agent.adapters.providers.http_errors import (
    ErrorContext,
    error_from_chunk,
    mentions_context_overflow,
)
from soong_agent.ports.errors import ProviderError, ProviderErrorKind
from soong_agent.ports.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from soong_agent.ports.model import ModelRequest, SystemPart, ToolSpec
from soong_agent.ports.streaming import (
    StopReason,
    StreamEvent,
    StreamFinished,
    TextDelta,
    ThinkingDelta,
    ToolCallReady,
    Usage,
    UsageReported,
)

STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "refusal": "content_filter",
}

# max_tokens must exceed the thinking budget; this much room is left for the answer.
THINKING_ANSWER_ROOM = 1024

_CACHE = {"type": "ephemeral"}


# --- request conversion ----------------------------------------------------------------------


def convert_system(parts: Sequence[SystemPart]) -> list[dict[str, Any]]:
    """The system prompt as text blocks: the stable parts joined into one cached block, then
    the dynamic parts (which change between calls) in a later block without a breakpoint."""
    stable = "\n\n".join(p.text for p in parts if p.stable and p.text.strip())
    dynamic = "\n\n".join(p.text for p in parts if not p.stable and p.text.strip())
    blocks: list[dict[str, Any]] = []
    if stable:
        blocks.append({"type": "text", "text": stable, "cache_control": dict(_CACHE)})
    if dynamic:
        blocks.append({"type": "text", "text": dynamic})
    return blocks


def convert_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """Tool definitions; the last one carries the cache breakpoint of the tools prefix."""
    out: list[dict[str, Any]] = [
        {
            "name": t.name,
            "description": t.description,
            "input_schema": t.parameters or {"type": "object", "properties": {}},
        }
        for t in tools
    ]
    if out:
        out[-1]["cache_control"] = dict(_CACHE)
    return out


def tool_input(arguments: str) -> dict[str, Any]:
    """The `input` object of a tool_use block: the parsed arguments, or {} when they are not
    a JSON object (a model's broken arguments must not make the next request fail)."""
    if not arguments:
        return {}
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _has_text(text: str) -> bool:
    # the API rejects empty and whitespace-only text blocks
    return bool(text) and not text.isspace()


def _tool_result(block: ToolResultBlock) -> dict[str, Any]:
    wire: dict[str, Any] = {"type": "tool_result", "tool_use_id": block.call_id}
    if block.content:
        wire["content"] = block.content
    if block.is_error:
        wire["is_error"] = True
    return wire


def _thinking(block: ThinkingBlock) -> dict[str, Any] | None:
    if block.redacted:
        return {"type": "redacted_thinking", "data": block.redacted}
    if block.signature:
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    return None  # unsigned reasoning (another provider's): the API would reject it


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for b in message.content:
        if isinstance(b, ThinkingBlock):
            wire = _thinking(b)
            if wire is not None:
                blocks.append(wire)
    blocks.extend(
        {"type": "text", "text": b.text}
        for b in message.content
        if isinstance(b, TextBlock) and _has_text(b.text)
    )
    blocks.extend(
        {"type": "tool_use", "id": b.id, "name": b.name, "input": tool_input(b.arguments)}
        for b in message.content
        if isinstance(b, ToolCallBlock)
    )
    return blocks


def _user_blocks(message: Message) -> list[dict[str, Any]]:
    # tool results must open the user message that answers a tool_use turn
    blocks = [_tool_result(b) for b in message.content if isinstance(b, ToolResultBlock)]
    blocks.extend(
        {"type": "text", "text": b.text}
        for b in message.content
        if isinstance(b, TextBlock) and _has_text(b.text)
    )
    return blocks


def convert_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Neutral messages to Messages API turns.

    Tool messages become user turns of `tool_result` blocks; consecutive turns of one role are
    merged (the API wants user and assistant to alternate), with tool results kept first in a
    user turn. Messages left without content are dropped.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            role, blocks = "assistant", _assistant_blocks(message)
        else:
            role, blocks = "user", _user_blocks(message)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            merged: list[dict[str, Any]] = out[-1]["content"]
            merged.extend(blocks)
            if role == "user":
                merged.sort(key=lambda b: b["type"] != "tool_result")  # stable
        else:
            out.append({"role": role, "content": blocks})
    return out


def build_body(
    model: str,
    request: ModelRequest,
    *,
    max_output_tokens: int,
    thinking_budget_tokens: int | None,
) -> dict[str, Any]:
    """The JSON body of a streaming Messages request."""
    max_tokens = request.max_output_tokens or max_output_tokens
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": True}
    system = convert_system(request.system)
    if system:
        body["system"] = system
    body["messages"] = convert_messages(request.messages)
    if request.tools:
        body["tools"] = convert_tools(request.tools)
    if thinking_budget_tokens:
        if max_tokens <= thinking_budget_tokens:
            body["max_tokens"] = thinking_budget_tokens + THINKING_ANSWER_ROOM
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget_tokens}
    elif request.temperature is not None:
        # the API refuses a temperature together with extended thinking
        body["temperature"] = request.temperature
    return body


# --- stream state ----------------------------------------------------------------------------


class MalformedEvent(Exception):
    """An event whose JSON parsed but whose shape is not what the format promises."""


class _OpenBlock:
    """A content block between its content_block_start and content_block_stop."""

    __slots__ = ("data", "id", "kind", "name", "signed", "start_input")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.id = ""
        self.name = ""
        self.data = ""  # redacted data, or a signature that came with the start
        self.signed = False
        self.start_input: Any = None


_USAGE_FIELDS = (
    ("input_tokens", 0),
    ("output_tokens", 1),
    ("cache_read_input_tokens", 2),
    ("cache_creation_input_tokens", 3),
)


class StreamState:
    """What one Messages stream has said so far, apart from the text deltas.

    `tool_args` maps the index of each open tool_use block to its `partial_json` fragments; the
    provider's hot loop appends to it directly.
    """

    __slots__ = ("_blocks", "_calls", "_stop", "_usage", "tool_args")

    def __init__(self) -> None:
        self._blocks: dict[Any, _OpenBlock] = {}
        self.tool_args: dict[Any, list[str]] = {}
        self._usage: list[int] | None = None
        self._stop: Any = None
        self._calls = 0

    def on_event(self, kind: Any, event: dict[str, Any]) -> list[StreamEvent]:
        """Handle every event but text and JSON deltas, ping, error and message_stop."""
        if kind == "content_block_start":
            return self._start(event.get("index"), event.get("content_block"))
        if kind == "content_block_stop":
            return self._stop_block(event.get("index"))
        if kind == "message_start":
            message = event.get("message")
            if not isinstance(message, dict):
                raise MalformedEvent("message_start without a message")
            self._add_usage(message.get("usage"))
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason"):
                self._stop = delta["stop_reason"]
            self._add_usage(event.get("usage"))
        elif kind == "content_block_delta":
            delta = event.get("delta")
            if not isinstance(delta, dict):
                raise MalformedEvent("content_block_delta without a delta")
            return self.on_delta(event.get("index"), delta)
        # anything else (a new event type) is skipped, as the API's versioning policy asks
        return []

    def on_delta(self, index: Any, delta: dict[str, Any]) -> list[StreamEvent]:
        """A delta other than text_delta and input_json_delta."""
        kind = delta.get("type")
        if kind == "thinking_delta":
            text = delta.get("thinking")
            return [ThinkingDelta(text)] if text and isinstance(text, str) else []
        if kind == "signature_delta":
            signature = delta.get("signature")
            if not isinstance(signature, str) or not signature:
                raise MalformedEvent("signature_delta without a signature")
            block = self._blocks.get(index)
            if block is not None:
                block.signed = True
            return [ThinkingDelta("", signature=signature)]
        if kind == "text_delta":
            text = delta.get("text")
            return [TextDelta(text)] if text and isinstance(text, str) else []
        if kind == "input_json_delta":
            self.add_json(index, delta.get("partial_json"))
        return []

    def add_json(self, index: Any, part: Any) -> None:
        if not part:
            return
        if not isinstance(part, str):
            raise MalformedEvent("partial_json is not a string")
        args = self.tool_args.get(index)
        if args is not None:
            args.append(part)
        elif index not in self._blocks:
            raise MalformedEvent("input_json_delta outside any content block")
        # else: the input of a block we do not run (a server tool's): not ours to collect

    def _start(self, index: Any, block: Any) -> list[StreamEvent]:
        if not isinstance(block, dict):
            raise MalformedEvent("content_block_start without a content_block")
        kind = block.get("type")
        if not isinstance(kind, str):
            raise MalformedEvent("content block without a type")
        open_block = self._blocks[index] = _OpenBlock(kind)
        if kind == "text":
            text = block.get("text")
            return [TextDelta(text)] if text and isinstance(text, str) else []
        if kind == "tool_use":
            call_id, name = block.get("id"), block.get("name")
            if not isinstance(call_id, str) or not isinstance(name, str) or not name:
                raise MalformedEvent("tool_use block without an id and a name")
            open_block.id = call_id
            open_block.name = name
            open_block.start_input = block.get("input")
            self.tool_args[index] = []
        elif kind == "thinking":
            signature = block.get("signature")
            if signature and isinstance(signature, str):
                open_block.data = signature
            text = block.get("thinking")
            return [ThinkingDelta(text)] if text and isinstance(text, str) else []
        elif kind == "redacted_thinking":
            data = block.get("data")
            if not isinstance(data, str) or not data:
                raise MalformedEvent("redacted_thinking block without data")
            open_block.data = data
        return []

    def _stop_block(self, index: Any) -> list[StreamEvent]:
        block = self._blocks.pop(index, None)
        if block is None:
            return []
        return self._close(index, block)

    def _close(self, index: Any, block: _OpenBlock) -> list[StreamEvent]:
        if block.kind == "tool_use":
            parts = self.tool_args.pop(index, None)
            arguments = "".join(parts) if parts else ""
            if not arguments:
                start = block.start_input
                arguments = json.dumps(start, ensure_ascii=False) if start else "{}"
            self._calls += 1
            call = ToolCallBlock(id=block.id, name=block.name, arguments=arguments)
            return [ToolCallReady(call)]
        if block.kind == "redacted_thinking":
            return [ThinkingDelta("", redacted=block.data)]
        if block.kind == "thinking" and block.data and not block.signed:
            return [ThinkingDelta("", signature=block.data)]
        return []

    def _add_usage(self, raw: Any) -> None:
        if not isinstance(raw, dict):
            return
        usage = self._usage
        if usage is None:
            usage = self._usage = [0, 0, 0, 0]
        for name, slot in _USAGE_FIELDS:
            value = raw.get(name)
            # message_delta counts are cumulative: a later value replaces an earlier one
            if isinstance(value, int) and value >= 0:
                usage[slot] = value

    def finish(self) -> list[StreamEvent]:
        """The events that end a complete stream: calls left open, usage, the stop reason."""
        out: list[StreamEvent] = []
        for index, block in list(self._blocks.items()):
            if block.kind == "tool_use":
                out.extend(self._close(index, block))
        self._blocks.clear()
        if self._usage is not None:
            i, o, read, write = self._usage
            out.append(
                UsageReported(
                    Usage(
                        input_tokens=i,
                        output_tokens=o,
                        cache_read_tokens=read,
                        cache_write_tokens=write,
                    )
                )
            )
        stop: StopReason
        if self._stop:
            stop = STOP_REASONS.get(str(self._stop), "other")
        else:
            stop = "tool_use" if self._calls else "end_turn"
        out.append(StreamFinished(stop))
        return out


# --- errors ----------------------------------------------------------------------------------

_ERROR_KINDS: dict[str, ProviderErrorKind] = {
    "overloaded_error": "overloaded",
    "rate_limit_error": "rate_limit",
    "api_error": "server",
    "timeout_error": "timeout",
    "authentication_error": "auth",
    "permission_error": "auth",
    "billing_error": "bad_request",
    "not_found_error": "bad_request",
    "request_too_large": "bad_request",
}


def error_from_event(ctx: ErrorContext, error: Any) -> ProviderError:
    """A ProviderError for an `event: error` that arrived after a 200, by its error type."""
    if not isinstance(error, dict):
        return error_from_chunk(ctx, error)
    type_ = error.get("type")
    message = error.get("message")
    if not isinstance(message, str) or not message:
        message = json.dumps(error, ensure_ascii=False)
    kind: ProviderErrorKind | None
    if type_ == "invalid_request_error":
        kind = "context_too_long" if mentions_context_overflow(message) else "bad_request"
    else:
        kind = _ERROR_KINDS.get(str(type_))
    if kind is None:
        return error_from_chunk(ctx, error)
    return ctx.error(kind, f"error in stream: {message} [{type_}]")
