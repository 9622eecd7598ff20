"""The Anthropic Messages stream: its events in, neutral events out; stop reasons and errors.

Pure state holders and functions; nothing here touches the network. The request side is
`anthropic_wire`.
"""

from __future__ import annotations

import json
from typing import Any

from soong_agent.adapters.providers.http_errors import (
    ErrorContext,
    error_from_chunk,
    mentions_context_overflow,
)
from soong_agent.adapters.providers.payloads import (
    ShapeError,
    count_or_none,
    opt_dict,
    opt_index,
    opt_str,
    req_str,
)
from soong_agent.ports.errors import ProviderError, ProviderErrorKind
from soong_agent.ports.messages import ToolCallBlock
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


# --- stream state ----------------------------------------------------------------------------


class _OpenBlock:
    """A content block between its content_block_start and content_block_stop."""

    __slots__ = ("data", "id", "kind", "name", "signed", "start_input")

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.id = ""
        self.name = ""
        self.data = ""  # redacted data, or a signature that came with the start
        self.signed = False
        self.start_input: dict[str, Any] | None = None


_USAGE_FIELDS = (
    ("input_tokens", 0),
    ("output_tokens", 1),
    ("cache_read_input_tokens", 2),
    ("cache_creation_input_tokens", 3),
)


class StreamState:
    """What one Messages stream has said so far, apart from the text deltas.

    `tool_args` maps the index of each open tool_use block to its `partial_json` fragments; the
    provider's hot loop appends to it directly. Each handler checks the type of every field
    it reads and raises `ShapeError` (with the field's path in the event) for one that does
    not fit; an event type it does not know is skipped, as the API's versioning policy asks.
    """

    __slots__ = ("_blocks", "_calls", "_stop", "_usage", "tool_args")

    def __init__(self) -> None:
        self._blocks: dict[int, _OpenBlock] = {}
        self.tool_args: dict[int, list[str]] = {}
        self._usage: list[int] | None = None
        self._stop: str | None = None
        self._calls = 0

    def on_event(self, kind: Any, event: dict[str, Any]) -> list[StreamEvent]:
        """Handle every event but text and JSON deltas, ping, error and message_stop."""
        if type(kind) is not str:
            raise ShapeError("type", "a string", kind)
        if kind == "content_block_start":
            return self._start(opt_index(event), event.get("content_block"))
        if kind == "content_block_stop":
            return self._stop_block(opt_index(event))
        if kind == "content_block_delta":
            delta = event.get("delta")
            if type(delta) is not dict:
                raise ShapeError("delta", "an object", delta)
            index = opt_index(event)
            try:
                return self.on_delta(index, delta)
            except ShapeError as exc:
                if exc.path == "index":  # the event's own index (see `add_json`)
                    raise
                raise exc.under("delta") from None
        if kind == "message_start":
            message = event.get("message")
            if type(message) is not dict:
                raise ShapeError("message", "an object", message)
            try:
                self._add_usage(opt_dict(message, "usage"))
            except ShapeError as exc:
                raise exc.under("message") from None
        elif kind == "message_delta":
            delta = opt_dict(event, "delta")
            if delta is not None:
                try:
                    stop = opt_str(delta, "stop_reason")
                except ShapeError as exc:
                    raise exc.under("delta") from None
                if stop:
                    self._stop = stop
            self._add_usage(opt_dict(event, "usage"))
        return []

    def on_delta(self, index: int | None, delta: dict[str, Any]) -> list[StreamEvent]:
        """A content_block_delta's `delta` (paths in errors are relative to it)."""
        kind = delta.get("type")
        if kind == "text_delta":
            text = req_str(delta, "text")
            return [TextDelta(text)] if text else []
        if kind == "thinking_delta":
            text = req_str(delta, "thinking")
            return [ThinkingDelta(text)] if text else []
        if kind == "signature_delta":
            signature = req_str(delta, "signature")
            if not signature:
                raise ShapeError("signature", "a signature", signature)
            block = self._blocks.get(index) if index is not None else None
            if block is not None:
                block.signed = True
            return [ThinkingDelta("", signature=signature)]
        if kind == "input_json_delta":
            self.add_json(index, req_str(delta, "partial_json"))
        elif type(kind) is not str:
            raise ShapeError("type", "a string", kind)
        return []

    def add_json(self, index: int | None, part: str) -> None:
        if index is None:
            raise ShapeError("index", "an integer", index)
        args = self.tool_args.get(index)
        if args is not None:
            if part:
                args.append(part)
        elif index not in self._blocks:
            raise ShapeError("index", "the index of an open content block", index)
        # else: the input of a block we do not run (a server tool's): not ours to collect

    def _start(self, index: int | None, block: Any) -> list[StreamEvent]:
        if index is None:
            raise ShapeError("index", "an integer", index)
        if type(block) is not dict:
            raise ShapeError("content_block", "an object", block)
        try:
            return self._open(index, block)
        except ShapeError as exc:
            raise exc.under("content_block") from None

    def _open(self, index: int, block: dict[str, Any]) -> list[StreamEvent]:
        kind = block.get("type")
        if type(kind) is not str:
            raise ShapeError("type", "a string", kind)
        open_block = self._blocks[index] = _OpenBlock(kind)
        if kind == "text":
            text = opt_str(block, "text")
            return [TextDelta(text)] if text else []
        if kind == "tool_use":
            call_id = req_str(block, "id")
            name = req_str(block, "name")
            if not name:
                raise ShapeError("name", "a tool name", name)
            open_block.id = call_id
            open_block.name = name
            open_block.start_input = opt_dict(block, "input")
            self.tool_args[index] = []
        elif kind == "thinking":
            signature = opt_str(block, "signature")
            if signature:
                open_block.data = signature
            text = opt_str(block, "thinking")
            return [ThinkingDelta(text)] if text else []
        elif kind == "redacted_thinking":
            data = req_str(block, "data")
            if not data:
                raise ShapeError("data", "the redacted thinking", data)
            open_block.data = data
        return []

    def _stop_block(self, index: int | None) -> list[StreamEvent]:
        if index is None:
            raise ShapeError("index", "an integer", index)
        block = self._blocks.pop(index, None)
        if block is None:
            return []
        return self._close(index, block)

    def _close(self, index: int, block: _OpenBlock) -> list[StreamEvent]:
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

    def _add_usage(self, raw: dict[str, Any] | None) -> None:
        if raw is None:
            return
        try:
            counts = [count_or_none(raw, name) for name, _ in _USAGE_FIELDS]
        except ShapeError as exc:
            raise exc.under("usage") from None
        usage = self._usage
        if usage is None:
            usage = self._usage = [0, 0, 0, 0]
        for (_, slot), value in zip(_USAGE_FIELDS, counts, strict=True):
            # message_delta counts are cumulative: a later value replaces an earlier one
            if value is not None:
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
            stop = STOP_REASONS.get(self._stop, "other")
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
