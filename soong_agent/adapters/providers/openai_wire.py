"""The Chat Completions wire format: request bodies, tool-call fragments, usage, stop reasons.

Pure functions and small state holders; nothing here touches the network.

What a request carries besides the conversation (PROV-7):

- images: a user message's images as `image_url` parts holding a `data:` URL; a tool
  message takes only text, so the images of tool results follow the tool messages of their
  turn in one user message (a profile that is not shown images gets a line of text instead);
- reasoning: `reasoning_effort` when configured (the token cap then goes as
  `max_completion_tokens`, which OpenAI's reasoning models require in place of `max_tokens`);
  the thinking read from `reasoning_content` / `reasoning` is not part of the Chat Completions
  input (OpenAI does not define it; strict gateways refuse it), except for the servers whose
  documentation requires it back (`echoes_reasoning`: DeepSeek and Kimi K2 refuse a request
  whose tool-call turns lack their `reasoning_content`; it goes with every assistant turn that
  has thinking, as DeepSeek ignores it where it does not need it);
- caching: the prefix (system prompt, tools, earlier messages) is built the same, byte for
  byte, from the same history, and `prompt_cache_key` (one key per conversation) goes to the
  endpoints known to take it (`accepts_cache_key`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from soong_agent.adapters.providers.calls import arguments_text, wire_name
from soong_agent.adapters.providers.images import attached_note, data_url, unseen
from soong_agent.adapters.providers.payloads import ShapeError, opt_count, opt_dict
from soong_agent.ports.messages import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
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


CACHE_KEY_HOSTS = ("api.openai.com", "api.mistral.ai")
"""The hosts whose Chat Completions document `prompt_cache_key` (others may refuse an unknown
parameter)."""
ECHO_REASONING_MODELS = ("deepseek", "kimi-k2")
"""Model names (lower-case, within the name) whose servers want `reasoning_content` back."""


def accepts_cache_key(base_url: str) -> bool:
    """Whether the endpoint at `base_url` is known to take `prompt_cache_key`."""
    host = (urlsplit(base_url).hostname or "").lower()
    return host in CACHE_KEY_HOSTS


def echoes_reasoning(model: str, base_url: str) -> bool:
    """Whether the model's server requires the thinking of a tool-call turn back."""
    name = model.lower()
    host = (urlsplit(base_url).hostname or "").lower()
    return any(n in name for n in ECHO_REASONING_MODELS) or host.endswith("deepseek.com")


def cache_key(messages: Sequence[Message]) -> str | None:
    """One `prompt_cache_key` per conversation: from its first message (its id, which a
    stored message has, else its text), so every request of a session shares it and no text
    of the conversation is sent in it."""
    if not messages:
        return None
    first = messages[0]
    basis = first.id or f"{first.role}:{first.text}"
    return "soong-" + hashlib.sha256(basis.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def convert_messages(
    messages: Sequence[Message], *, vision: bool = True, echo_reasoning: bool = False
) -> list[dict[str, Any]]:
    """Neutral messages to Chat Completions messages: thinking is dropped (sent back as
    `reasoning_content` with `echo_reasoning`), images as the module doc says."""
    out: list[dict[str, Any]] = []
    shown: list[dict[str, Any]] = []  # images of tool results, for the user message after them
    for message in messages:
        if message.role != "tool" and shown:
            out.append({"role": "user", "content": shown})
            shown = []
        if message.role == "tool":
            for b in message.content:
                if isinstance(b, ToolResultBlock):
                    out.append(_tool_result(b, vision=vision, shown=shown))
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
            if echo_reasoning:
                reasoning = _reasoning(message)
                if reasoning:
                    wire["reasoning_content"] = reasoning
            out.append(wire)
        else:
            # Tool results in a user message would be malformed here; send them as tool messages.
            results = [b for b in message.content if isinstance(b, ToolResultBlock)]
            out.extend(_tool_result(b, vision=vision, shown=shown) for b in results)
            content = _user_content(message, vision=vision, before=shown)
            shown = []
            if content or not results:
                out.append({"role": "user", "content": content})
    if shown:
        out.append({"role": "user", "content": shown})
    return out


def _reasoning(message: Message) -> str:
    return "".join(b.text for b in message.content if isinstance(b, ThinkingBlock))


def _tool_result(
    block: ToolResultBlock, *, vision: bool, shown: list[dict[str, Any]]
) -> dict[str, Any]:
    content = block.content
    if block.images:
        if vision:
            note = attached_note(len(block.images), block.call_id, block.name)
            shown.append({"type": "text", "text": note})
            shown.extend(_image_part(image) for image in block.images)
        else:
            content = "\n".join(t for t in (content, *map(unseen, block.images)) if t)
    return {"role": "tool", "tool_call_id": block.call_id, "content": content}


def _image_part(block: ImageBlock) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url(block)}}


def _user_content(
    message: Message, *, vision: bool, before: list[dict[str, Any]]
) -> str | list[dict[str, Any]]:
    """A user message's content: its text, or a list of parts when it shows images (those of
    the tool results just before it first)."""
    if not before and not any(isinstance(b, ImageBlock) for b in message.content):
        return "".join(b.text for b in message.content if isinstance(b, TextBlock))
    parts = list(before)
    for b in message.content:
        if isinstance(b, TextBlock):
            if b.text:
                parts.append({"type": "text", "text": b.text})
        elif isinstance(b, ImageBlock):
            if vision:
                parts.append(_image_part(b))
            else:
                parts.append({"type": "text", "text": unseen(b)})
    if not vision:
        return "\n".join(p["text"] for p in parts)
    return parts


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


def build_body(
    model: str,
    request: ModelRequest,
    *,
    reasoning_effort: str | None = None,
    prompt_cache_key: bool = False,
    vision: bool = True,
    echo_reasoning: bool = False,
) -> dict[str, Any]:
    """The JSON body of a streaming Chat Completions request (see the module doc).

    `tool_choice` goes only beside `tools`: strict servers (vLLM, llama.cpp) refuse it alone.
    """
    messages = convert_messages(request.messages, vision=vision, echo_reasoning=echo_reasoning)
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
        # OpenAI's reasoning models refuse max_tokens; DeepSeek documents only max_tokens
        reasoning_cap = reasoning_effort is not None and not echo_reasoning
        cap = "max_completion_tokens" if reasoning_cap else "max_tokens"
        body[cap] = request.max_output_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if reasoning_effort is not None:
        body["reasoning_effort"] = reasoning_effort
    if prompt_cache_key:
        key = cache_key(request.messages)
        if key is not None:
            body["prompt_cache_key"] = key
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
