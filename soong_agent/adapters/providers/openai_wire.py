"""The Chat Completions wire format: request bodies, tool-call fragments, usage, stop reasons.

Pure functions and small state holders; nothing here touches the network.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from soong_agent.adapters.providers.calls import arguments_text, wire_name
from soong_agent.adapters.providers.payloads import ShapeError, opt_count, opt_dict
from soong_agent.ports.messages import Message, TextBlock, ToolCallBlock, ToolResultBlock
from soong_agent.ports.model import ModelRequest, SystemPart, ToolChoice, ToolSpec
from soong_agent.ports.streaming import StopReason, ToolCallReady, Usage

FINISH_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filter",
}


# --- request conversion ----------------------------------------------------------------------


def system_text(parts: Sequence[SystemPart]) -> str:
    """The system parts joined into one text, empty parts left out."""
    return "\n\n".join(p.text for p in parts if p.text)


def convert_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Neutral messages to Chat Completions messages (thinking blocks are dropped)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "tool":
            out.extend(_tool_result(b) for b in message.content if isinstance(b, ToolResultBlock))
        elif message.role == "assistant":
            text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
            calls = [
                {
                    "id": b.id,
                    "type": "function",
                    "function": {
                        "name": wire_name(b.name),
                        "arguments": arguments_text(b.arguments),
                    },
                }
                for b in message.content
                if isinstance(b, ToolCallBlock)
            ]
            # Always a string: strict servers (llama.cpp, some vLLM versions) refuse `null`
            # beside `tool_calls` with HTTP 500/400, and the official API accepts "".
            wire: dict[str, Any] = {"role": "assistant", "content": text}
            if calls:
                wire["tool_calls"] = calls
            out.append(wire)
        else:
            # Tool results in a user message would be malformed here; send them as tool messages.
            out.extend(_tool_result(b) for b in message.content if isinstance(b, ToolResultBlock))
            text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
            if text or not any(isinstance(b, ToolResultBlock) for b in message.content):
                out.append({"role": "user", "content": text})
    return out


def _tool_result(block: ToolResultBlock) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": block.call_id, "content": block.content}


def convert_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            },
        }
        for t in tools
    ]


def convert_tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    """`tool_choice` in the Chat Completions shape: "auto", "none", "required", or the named
    function object."""
    if choice.mode == "tool" and choice.name:
        return {"type": "function", "function": {"name": choice.name}}
    return "auto" if choice.mode == "tool" else choice.mode


def build_body(model: str, request: ModelRequest) -> dict[str, Any]:
    """The JSON body of a streaming Chat Completions request.

    `tool_choice` goes only beside `tools`: strict servers (vLLM, llama.cpp) refuse it alone.
    """
    messages = convert_messages(request.messages)
    system = system_text(request.system)
    if system:
        messages.insert(0, {"role": "system", "content": system})
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = convert_tools(request.tools)
        if request.tool_choice is not None:
            body["tool_choice"] = convert_tool_choice(request.tool_choice)
    if request.max_output_tokens is not None:
        body["max_tokens"] = request.max_output_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    return body


# --- stream state ----------------------------------------------------------------------------


class _PendingCall:
    __slots__ = ("args", "id", "name", "order")

    def __init__(self, order: tuple[int, int, int]) -> None:
        self.order = order
        self.id = ""
        self.name = ""
        self.args: list[str] = []


class ToolCalls:
    """Tool-call fragments, keyed by `index` (or `id` when a server leaves `index` out).

    `add` checks the type of each field it reads (`ShapeError`, with the path inside the
    fragment): `index` an integer, `id` and `function.name` strings, `function.arguments` a
    string (or an object, which some gateways send), each of them possibly absent or null.
    """

    __slots__ = ("_by_key", "_emitted", "_last", "_seq")

    def __init__(self) -> None:
        self._by_key: dict[object, _PendingCall] = {}
        self._last: _PendingCall | None = None
        self._seq = 0
        self._emitted = 0

    def __bool__(self) -> bool:
        return bool(self._by_key) or self._emitted > 0

    def add(self, fragment: Any) -> None:
        if type(fragment) is not dict:
            raise ShapeError("", "an object", fragment)
        index = fragment.get("index")
        call_id = fragment.get("id")
        function = fragment.get("function")
        name = args = None
        if type(function) is dict:
            name = function.get("name")
            args = function.get("arguments")
            if name is not None and type(name) is not str:
                raise ShapeError("function.name", "a string", name)
            if args is not None and type(args) is not str and type(args) is not dict:
                raise ShapeError("function.arguments", "a string", args)
        elif function is not None:
            raise ShapeError("function", "an object", function)
        if index is not None and type(index) is not int:
            raise ShapeError("index", "an integer", index)
        if type(call_id) is not str:
            if call_id is not None:
                raise ShapeError("id", "a string", call_id)
            call_id = ""
        key: object
        call: _PendingCall | None
        if isinstance(index, int):
            key = index
            call = self._by_key.get(key)
            if call is not None and call_id and call.id and call_id != call.id:
                # A server that reuses one index for several calls: tell them apart by id.
                key = ("id", call_id)
                call = self._by_key.get(key)
        elif call_id:
            key = ("id", call_id)
            call = self._by_key.get(key)
        else:
            call = self._last
            key = 0
        if call is None:
            self._seq += 1
            order = (0, index, self._seq) if isinstance(index, int) else (1, 0, self._seq)
            call = self._by_key[key] = _PendingCall(order)
        self._last = call
        if call_id and not call.id:
            call.id = call_id
        if name and not call.name:
            call.name = name
        if args:
            call.args.append(args if type(args) is str else json.dumps(args, ensure_ascii=False))

    def drain(self) -> list[ToolCallReady]:
        """The complete calls in index order; forgets them."""
        if not self._by_key:
            return []
        calls = sorted(self._by_key.values(), key=lambda c: c.order)
        self._by_key.clear()
        self._last = None
        ready: list[ToolCallReady] = []
        for call in calls:
            call_id = call.id or f"call_{self._emitted}"
            self._emitted += 1
            arguments = "".join(call.args) or "{}"
            ready.append(
                ToolCallReady(ToolCallBlock(id=call_id, name=call.name, arguments=arguments))
            )
        return ready


def parse_usage(raw: dict[str, Any]) -> Usage:
    """The usage of a `usage` object; `ShapeError` for a count that is not one."""
    details = opt_dict(raw, "prompt_tokens_details")
    try:
        cache_read = opt_count(details, "cached_tokens") if details is not None else 0
    except ShapeError as exc:
        raise exc.under("prompt_tokens_details") from None
    prompt = opt_count(raw, "prompt_tokens")
    # Usage.input_tokens counts prompt tokens not served from the cache (as Anthropic reports
    # them); OpenAI's prompt_tokens includes the cached ones.
    return Usage(
        input_tokens=max(0, prompt - cache_read),
        output_tokens=opt_count(raw, "completion_tokens"),
        cache_read_tokens=cache_read,
    )
