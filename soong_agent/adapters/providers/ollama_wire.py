"""The Ollama `/api/chat` wire format: request bodies, whole tool calls, usage, stop reasons,
and the classification of Ollama's error strings.

Pure functions and small state holders; nothing here touches the network.

`/api/chat` has no `tool_choice` field, so a `ToolChoice` is approximated with the `tools`
list, the only lever it has: "none" sends no tools (the model cannot call what it is not
shown), a named tool sends only that tool's definition (all of them when no tool has that
name), and "required" and "auto" send the tools as usual (nothing can force a call).

Messages are sent as Ollama decodes them (`api.Message`): `content` always a string (""
beside tool calls), tool-call `arguments` always a JSON object (Ollama refuses a string), a
tool result as a `tool` message naming its tool in `tool_name`; an assistant turn left with
neither text nor calls (e.g. only thinking) is left out.

Reasoning and images (PROV-7): `[model] reasoning_effort` is sent as `think`: the level itself
for the models that take levels (gpt-oss), `true` for the others (they think or not). The
thinking an assistant turn had goes back in its `thinking` field, which `api.Message` has:
each model's template decides what of it the model sees again (most drop it before the last
user turn; gpt-oss keeps it through a tool loop). Images go as base64 in a message's
`images`; those of tool results in a user message after the turn's tool messages (as the
templates render images of user messages).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from soong_agent.adapters.providers.calls import arguments_object, wire_name
from soong_agent.adapters.providers.images import attached_note, b64, unseen
from soong_agent.adapters.providers.openai_wire import convert_tools, system_text
from soong_agent.adapters.providers.payloads import (
    ShapeError,
    count_or_none,
    opt_str,
)
from soong_agent.ports.errors import ProviderErrorKind
from soong_agent.ports.messages import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from soong_agent.ports.model import ModelRequest, ToolChoice, ToolSpec
from soong_agent.ports.streaming import StopReason, ToolCallReady, Usage

DONE_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "length": "max_tokens",
}
LEVEL_MODELS = ("gpt-oss",)
"""Models whose `think` takes a level (``low``, ``medium``, ``high``) rather than a boolean."""


def think_value(model: str, effort: str | None) -> bool | str | None:
    """The `think` of `[model] reasoning_effort` (None: not sent)."""
    if effort is None:
        return None
    return effort if model.lower().startswith(LEVEL_MODELS) else True


# --- request conversion ----------------------------------------------------------------------


class _Shown:
    """The images of a turn's tool results, for the user message after its tool messages."""

    __slots__ = ("images", "notes")

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.images: list[str] = []

    def message(self) -> dict[str, Any]:
        message = {"role": "user", "content": "\n".join(self.notes), "images": self.images}
        self.notes, self.images = [], []
        return message


def _tool_result(block: ToolResultBlock, *, vision: bool, shown: _Shown) -> dict[str, Any]:
    content = block.content
    if block.images and vision:
        shown.notes.append(attached_note(len(block.images), block.call_id, block.name))
        shown.images.extend(b64(image) for image in block.images)
    elif block.images:
        content = "\n".join(t for t in (content, *map(unseen, block.images)) if t)
    return {"role": "tool", "content": content, "tool_name": wire_name(block.name)}


def _user(message: Message, *, vision: bool) -> tuple[str, list[str]]:
    """A user message's text and the base64 of its images (a note each when not shown)."""
    texts: list[str] = []
    images: list[str] = []
    for b in message.content:
        if isinstance(b, TextBlock):
            texts.append(b.text)
        elif isinstance(b, ImageBlock):
            if vision:
                images.append(b64(b))
            else:
                texts.insert(0, unseen(b) + "\n")
    return "".join(texts), images


def convert_messages(messages: Sequence[Message], *, vision: bool = True) -> list[dict[str, Any]]:
    """Neutral messages to Ollama chat messages (see the module doc)."""
    out: list[dict[str, Any]] = []
    shown = _Shown()
    for message in messages:
        if message.role != "tool" and shown.images:
            out.append(shown.message())
        if message.role == "tool":
            out.extend(
                _tool_result(b, vision=vision, shown=shown)
                for b in message.content
                if isinstance(b, ToolResultBlock)
            )
        elif message.role == "assistant":
            text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
            wire: dict[str, Any] = {"role": "assistant", "content": text}
            thinking = "".join(b.text for b in message.content if isinstance(b, ThinkingBlock))
            if thinking:
                wire["thinking"] = thinking
            calls = [
                {
                    "function": {
                        "name": wire_name(b.name),
                        "arguments": arguments_object(b.arguments),
                    }
                }
                for b in message.content
                if isinstance(b, ToolCallBlock)
            ]
            if calls:
                wire["tool_calls"] = calls
            elif not text:
                continue  # nothing to send: only thinking, or a stream cut before any text
            out.append(wire)
        else:
            # Tool results inside a user message are sent as tool messages, as Ollama expects.
            results = [b for b in message.content if isinstance(b, ToolResultBlock)]
            out.extend(_tool_result(b, vision=vision, shown=shown) for b in results)
            if shown.images:
                out.append(shown.message())
            text, images = _user(message, vision=vision)
            if text or images or not results:
                wire = {"role": "user", "content": text}
                if images:
                    wire["images"] = images
                out.append(wire)
    if shown.images:
        out.append(shown.message())
    return out


def offered_tools(tools: Sequence[ToolSpec], choice: ToolChoice | None) -> Sequence[ToolSpec]:
    """The tools to send for `choice`, Ollama having no `tool_choice` (see the module doc)."""
    if choice is None:
        return tools
    if choice.mode == "none":
        return ()
    if choice.mode == "tool":
        named = [t for t in tools if t.name == choice.name]
        return named or tools
    return tools


def build_body(
    model: str, request: ModelRequest, *, reasoning_effort: str | None = None, vision: bool = True
) -> dict[str, Any]:
    """The JSON body of a streaming `/api/chat` request."""
    messages = convert_messages(request.messages, vision=vision)
    system = system_text(request.system)
    if system:
        messages.insert(0, {"role": "system", "content": system})
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": True}
    think = think_value(model, reasoning_effort)
    if think is not None:
        body["think"] = think
    tools = offered_tools(request.tools, request.tool_choice)
    if tools:
        body["tools"] = convert_tools(tools)
    options: dict[str, Any] = {}
    if request.max_output_tokens is not None:
        options["num_predict"] = request.max_output_tokens
    if request.temperature is not None:
        options["temperature"] = request.temperature
    if options:
        body["options"] = options
    return body


# --- stream state ----------------------------------------------------------------------------


class ToolCalls:
    """Turns the whole tool calls of a stream into `ToolCallReady` events with unique ids.

    Ollama sends each call complete (name and an arguments object) in one line; newer
    versions give it an `id`, older ones do not, and then one is made up (`call_<n>`).
    """

    __slots__ = ("_ids",)

    def __init__(self) -> None:
        self._ids: set[str] = set()

    def __bool__(self) -> bool:
        return bool(self._ids)

    def take(self, raw: Any) -> list[ToolCallReady]:
        """The events of a `message.tool_calls` list; `ShapeError` (its path relative to the
        message) when a field does not fit: each call an object with an optional string `id`
        and a `function` object with a non-empty string `name` and `arguments` that are an
        object (or a string of one, or absent)."""
        if type(raw) is not list:
            raise ShapeError("tool_calls", "a list", raw)
        calls = []
        for i, item in enumerate(raw):
            try:
                calls.append(_call(item))
            except ShapeError as exc:
                raise exc.under(f"tool_calls[{i}]") from None
        ready: list[ToolCallReady] = []
        for given, name, text in calls:
            call_id = given if given and given not in self._ids else self._new_id()
            self._ids.add(call_id)
            ready.append(ToolCallReady(ToolCallBlock(id=call_id, name=name, arguments=text)))
        return ready

    def _new_id(self) -> str:
        n = len(self._ids)
        while f"call_{n}" in self._ids:
            n += 1
        return f"call_{n}"


def _call(item: Any) -> tuple[str, str, str]:
    """(id, name, arguments text) of one whole tool call; `ShapeError` when it does not fit."""
    if type(item) is not dict:
        raise ShapeError("", "an object", item)
    call_id = opt_str(item, "id") or ""
    function = item.get("function")
    if type(function) is not dict:
        raise ShapeError("function", "an object", function)
    try:
        name = opt_str(function, "name")
    except ShapeError as exc:
        raise exc.under("function") from None
    if not name:
        raise ShapeError("function.name", "a tool name", name)
    arguments = function.get("arguments")
    if arguments is None:
        text = "{}"
    elif type(arguments) is str:
        text = arguments or "{}"
    elif type(arguments) is dict:
        text = json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
    else:
        raise ShapeError("function.arguments", "an object", arguments)
    return call_id, name, text


def parse_usage(final: dict[str, Any]) -> Usage | None:
    """Usage from the final line's eval counts; None when it has neither (`ShapeError` for a
    count that is not one)."""
    prompt = count_or_none(final, "prompt_eval_count")
    output = count_or_none(final, "eval_count")
    if prompt is None and output is None:
        return None
    return Usage(input_tokens=prompt or 0, output_tokens=output or 0)


def stop_reason(done_reason: str | None, *, had_calls: bool) -> StopReason:
    """The neutral stop reason of the final line's `done_reason`.

    Old Ollama versions send no `done_reason`; that counts as a normal stop.
    """
    if had_calls:
        return "tool_use"
    if not done_reason:
        return "end_turn"
    return DONE_REASONS.get(done_reason, "other")


# --- errors ----------------------------------------------------------------------------------

# "context canceled" (Go's cancellation error) is not about the context window.
_CONTEXT_WORDS = (
    "context length",
    "context window",
    "context size",
    "exceeds the context",
    "too long",
    "too many tokens",
)
_BAD_REQUEST_WORDS = ("not found", "does not support", "invalid")


def error_message(error: Any) -> str:
    """The text of an `error` value: Ollama sends a string, some gateways an object."""
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        message = error.get("message") or error.get("error") or error.get("detail")
        if isinstance(message, str) and message:
            return message
    return json.dumps(error, ensure_ascii=False)


def classify_stream_error(message: str) -> ProviderErrorKind:
    """The kind of an error line that arrived inside the NDJSON stream."""
    text = message.lower()
    if _mentions(text, _CONTEXT_WORDS):
        return "context_too_long"
    if _mentions(text, _BAD_REQUEST_WORDS):
        return "bad_request"
    if "timed out" in text or "timeout" in text:
        return "timeout"
    return "server"


def _mentions(haystack: str, needles: tuple[str, ...]) -> bool:
    return any(n in haystack for n in needles)
