"""The Anthropic Messages wire format: request bodies.

Pure functions and small state holders; nothing here touches the network.

What the request builder guarantees, so that the API (and strict servers that speak it) never
refuses a body built from a valid neutral history:

- user and assistant turns alternate (consecutive turns of one role are merged), and the
  first turn is a user turn;
- no turn is empty and no text block is empty or only whitespace (such blocks are left out,
  and a turn left without content is dropped);
- every `tool_use` is answered by a `tool_result` in the next (user) turn, and those results
  open that turn; a call without a recorded result gets an error result, and a result
  without its call is sent as text;
- `tool_use` ids match ``^[a-zA-Z0-9_-]+$`` (other providers' ids are rewritten, on the call
  and its result alike); `tool_use.input` is always an object;
- an error `tool_result` always has content;
- thinking blocks go back only signed (or redacted), first in their turn, never alone in a
  turn, and only when thinking is enabled for the request (the API requires the signed
  thinking of a tool-use turn back while its tool loop runs, and strips older ones itself);
- images are `image` blocks with a base64 source, in user turns and inside tool results (the
  API takes both); a profile that is not shown images gets a line of text in their place;
- the two newest user turns end with a cache breakpoint (see `mark_newest`), within the API's
  limit of 4 breakpoints a request;
- a final assistant turn (a prefill) does not end with whitespace;
- extended thinking is only sent when the request is compatible with it (see
  `build_body`): forced tool use, a prefill, or a tool loop whose last assistant turn did not
  start with a thinking block turn it off for that one request.

The stream's side (events in, neutral events out) is `anthropic_stream`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from soong_agent.adapters.providers.calls import arguments_object, wire_name
from soong_agent.adapters.providers.images import b64, unseen
from soong_agent.ports.messages import (
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from soong_agent.ports.model import ModelRequest, SystemPart, ToolChoice, ToolSpec

# max_tokens must exceed the thinking budget; this much room is left for the answer.
THINKING_ANSWER_ROOM = 1024

EFFORT_BUDGETS: dict[str, int] = {"low": 2_048, "medium": 8_192, "high": 24_576}
"""The thinking budget of `[model] reasoning_effort` when `thinking_budget_tokens` is unset
(the high one leaves room for the answer under Claude Opus 4's 32k output limit)."""

_CACHE = {"type": "ephemeral"}
MAX_BREAKPOINTS = 4
"""The API refuses a request with more blocks carrying `cache_control`."""

NO_RESULT = "no result was recorded for this tool call"
"""The content of the error result given to a call whose result is missing."""
EMPTY_ERROR = "the tool failed without a message"
"""The content of an error result that has none (the API refuses it empty)."""
FIRST_TURN = "(the conversation continues)"
"""The text of the user turn put before a history that starts with the assistant."""

_THINKING_TYPES = ("thinking", "redacted_thinking")
_NOT_ID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


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
            "input_schema": _input_schema(t.parameters),
        }
        for t in tools
    ]
    if out:
        out[-1]["cache_control"] = dict(_CACHE)
    return out


def _input_schema(parameters: dict[str, Any]) -> dict[str, Any]:
    # the API requires an object schema with its "type"
    if not parameters:
        return {"type": "object", "properties": {}}
    if "type" not in parameters:
        return {"type": "object", **parameters}
    return parameters


def convert_tool_choice(choice: ToolChoice) -> dict[str, Any]:
    """`tool_choice` in the Messages shape: auto, none, any (for "required"), or the tool."""
    if choice.mode == "required":
        return {"type": "any"}
    if choice.mode == "tool" and choice.name:
        return {"type": "tool", "name": choice.name}
    if choice.mode == "none":
        return {"type": "none"}
    return {"type": "auto"}


def forces_tool_use(choice: ToolChoice | None) -> bool:
    return choice is not None and choice.mode in ("required", "tool")


def wire_id(call_id: str) -> str:
    """`call_id` as the API accepts a tool_use id (``^[a-zA-Z0-9_-]+$``).

    Ids made by other providers may hold other characters (e.g. ``functions.read_file:0``);
    those become "_". The call and its result are rewritten alike, so they still match.
    """
    return _NOT_ID_CHARS.sub("_", call_id) or "call"


def _has_text(text: str) -> bool:
    # the API rejects empty and whitespace-only text blocks
    return bool(text) and not text.isspace()


def _image(block: ImageBlock, *, vision: bool) -> dict[str, Any]:
    if not vision:
        return {"type": "text", "text": unseen(block)}
    source = {"type": "base64", "media_type": block.media_type, "data": b64(block)}
    return {"type": "image", "source": source}


def _tool_result(block: ToolResultBlock, *, vision: bool) -> dict[str, Any]:
    wire: dict[str, Any] = {"type": "tool_result", "tool_use_id": wire_id(block.call_id)}
    if block.images:  # a list of text and image blocks: the API takes images in results
        parts = [{"type": "text", "text": block.content}] if _has_text(block.content) else []
        parts.extend(_image(image, vision=vision) for image in block.images)
        wire["content"] = parts
    elif _has_text(block.content):
        wire["content"] = block.content
    elif block.is_error:
        wire["content"] = EMPTY_ERROR  # "content cannot be empty if `is_error` is true"
    if block.is_error:
        wire["is_error"] = True
    return wire


def _thinking(block: ThinkingBlock) -> dict[str, Any] | None:
    if block.redacted:
        return {"type": "redacted_thinking", "data": block.redacted}
    if block.signature:
        return {"type": "thinking", "thinking": block.text, "signature": block.signature}
    return None  # unsigned reasoning (another provider's, or cut short): the API refuses it


def _assistant_blocks(message: Message, *, thinking: bool) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if thinking:
        for b in message.content:
            if isinstance(b, ThinkingBlock):
                wire = _thinking(b)
                if wire is not None:
                    blocks.append(wire)
    reasoning = len(blocks)
    blocks.extend(
        {"type": "text", "text": b.text}
        for b in message.content
        if isinstance(b, TextBlock) and _has_text(b.text)
    )
    blocks.extend(
        {
            "type": "tool_use",
            "id": wire_id(b.id),
            "name": wire_name(b.name),
            "input": arguments_object(b.arguments),
        }
        for b in message.content
        if isinstance(b, ToolCallBlock)
    )
    if len(blocks) == reasoning:
        # only reasoning (a turn cancelled after its thinking): "the final block in an
        # assistant message cannot be `thinking`", and there is nothing else to keep
        return []
    return blocks


def _user_blocks(message: Message, *, vision: bool) -> list[dict[str, Any]]:
    # tool results must open the user message that answers a tool_use turn
    blocks = [
        _tool_result(b, vision=vision) for b in message.content if isinstance(b, ToolResultBlock)
    ]
    for b in message.content:
        if isinstance(b, TextBlock):
            if _has_text(b.text):
                blocks.append({"type": "text", "text": b.text})
        elif isinstance(b, ImageBlock):
            blocks.append(_image(b, vision=vision))
    return blocks


def convert_messages(
    messages: Sequence[Message], *, thinking: bool = True, vision: bool = True
) -> list[dict[str, Any]]:
    """Neutral messages to Messages API turns that the API accepts (see the module doc).

    Tool messages become user turns of `tool_result` blocks; consecutive turns of one role are
    merged, with tool results first in a user turn and thinking first in an assistant turn.
    Messages left without content are dropped. Thinking blocks are sent back only when
    `thinking` (extended thinking is enabled for the request); images only when `vision`.
    """
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            role, blocks = "assistant", _assistant_blocks(message, thinking=thinking)
        else:
            role, blocks = "user", _user_blocks(message, vision=vision)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            merged: list[dict[str, Any]] = turns[-1]["content"]
            merged.extend(blocks)
            if role == "user":
                merged.sort(key=lambda b: b["type"] != "tool_result")  # stable
            else:
                merged.sort(key=lambda b: b["type"] not in _THINKING_TYPES)
        else:
            turns.append({"role": role, "content": blocks})
    _pair_tool_results(turns)
    if turns and turns[0]["role"] == "assistant":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": FIRST_TURN}]})
    if turns and turns[-1]["role"] == "assistant":
        _trim_prefill(turns)
    return turns


def _pair_tool_results(turns: list[dict[str, Any]]) -> None:
    """Give every tool_use its result in the next turn, and every result its call."""
    index = 0
    while index < len(turns):
        turn = turns[index]
        if turn["role"] == "assistant":
            calls = [b["id"] for b in turn["content"] if b["type"] == "tool_use"]
            following = turns[index + 1] if index + 1 < len(turns) else None
            if calls and (following is None or following["role"] != "user"):
                turns.insert(index + 1, {"role": "user", "content": []})
            index += 1
            continue
        previous = turns[index - 1] if index > 0 else None
        calls = (
            [b["id"] for b in previous["content"] if b["type"] == "tool_use"] if previous else []
        )
        answered: set[str] = set()
        results: list[dict[str, Any]] = []
        rest: list[dict[str, Any]] = []
        for block in turn["content"]:
            if block["type"] != "tool_result":
                rest.append(block)
            elif block["tool_use_id"] in calls and block["tool_use_id"] not in answered:
                answered.add(block["tool_use_id"])
                results.append(block)
            else:
                rest.extend(_orphan_blocks(block))
        results.extend(
            {"type": "tool_result", "tool_use_id": c, "content": NO_RESULT, "is_error": True}
            for c in calls
            if c not in answered
        )
        turn["content"] = results + rest
        index += 1


def _orphan_blocks(block: dict[str, Any]) -> list[dict[str, Any]]:
    # a result whose call is not in the turn before: the API refuses it as a tool_result, so
    # it goes as text (and its images, if any, as the images of the user turn)
    content = block.get("content", "")
    parts: list[dict[str, Any]] = content if isinstance(content, list) else []
    if parts:
        content = "\n".join(p["text"] for p in parts if p["type"] == "text")
    error = " (an error)" if block.get("is_error") else ""
    header = f"[result{error} of the earlier tool call {block['tool_use_id']}]"
    text = {"type": "text", "text": f"{header}\n{content}" if content else header}
    return [text, *(p for p in parts if p["type"] != "text")]


def _trim_prefill(turns: list[dict[str, Any]]) -> None:
    # "final assistant content cannot end with trailing whitespace"
    blocks: list[dict[str, Any]] = turns[-1]["content"]
    last = blocks[-1]
    if last["type"] == "text":
        last["text"] = last["text"].rstrip()


def thinking_compatible(turns: Sequence[dict[str, Any]]) -> bool:
    """Whether extended thinking may be enabled for a request with these turns.

    Not with a final assistant turn (a prefill), and not in a tool loop (the last turn holds
    tool results) whose assistant turn does not start with a thinking block: the API wants
    that turn's thinking sent back, and one made without thinking (by another provider, before
    thinking was enabled, or under forced tool use) has none.
    """
    if not turns:
        return True
    last = turns[-1]
    if last["role"] == "assistant":
        return False
    if len(turns) < 2 or not any(b["type"] == "tool_result" for b in last["content"]):
        return True
    first = turns[-2]["content"][0]
    return bool(first["type"] in _THINKING_TYPES)


def mark_newest(turns: Sequence[dict[str, Any]], *, room: int) -> None:
    """Put a cache breakpoint on the last block of each of the `room` newest user turns (at
    most two), so that a long session reads almost all of its input from the cache.

    The newest one writes the whole conversation to the cache; the one before it sits where
    the previous request's newest breakpoint was (the request before added one assistant and
    one user turn), so the prefix this request reads is exactly the one the last request
    wrote, however many blocks lie between (the API's own look-back for an earlier hit spans
    only about 20 blocks). Each request thus reads the last one's prefix and writes only its
    own two new turns.
    """
    left = min(room, 2)
    for turn in reversed(turns):
        if left <= 0:
            return
        if turn["role"] == "user" and turn["content"]:
            turn["content"][-1]["cache_control"] = dict(_CACHE)
            left -= 1


def build_body(
    model: str,
    request: ModelRequest,
    *,
    max_output_tokens: int,
    thinking_budget_tokens: int | None,
    vision: bool = True,
) -> dict[str, Any]:
    """The JSON body of a streaming Messages request.

    `tool_choice` is sent only beside `tools`. Extended thinking is incompatible with forced
    tool use ("any" or a named tool: the API answers 400 "Thinking may not be enabled when
    tool_choice forces tool use"); the user's explicit choice wins, so thinking is left out of
    that one request rather than the choice being weakened to "auto". It is also left out of a
    request `thinking_compatible` rejects. Without thinking, the temperature is sent.

    Cache breakpoints: the stable system prompt, the last tool, and the two newest user turns
    (`mark_newest`), four in all.
    """
    max_tokens = request.max_output_tokens or max_output_tokens
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": True}
    system = convert_system(request.system)
    if system:
        body["system"] = system
    choice = request.tool_choice if request.tools else None
    thinking = bool(thinking_budget_tokens) and not forces_tool_use(choice)
    messages = convert_messages(request.messages, thinking=thinking, vision=vision)
    if thinking and not thinking_compatible(messages):
        thinking = False
        messages = convert_messages(request.messages, thinking=False, vision=vision)
    body["messages"] = messages
    used = sum(1 for block in system if "cache_control" in block) + bool(request.tools)
    mark_newest(messages, room=MAX_BREAKPOINTS - used)
    if request.tools:
        body["tools"] = convert_tools(request.tools)
    if choice is not None:
        body["tool_choice"] = convert_tool_choice(choice)
    if thinking and thinking_budget_tokens:
        if max_tokens <= thinking_budget_tokens:
            body["max_tokens"] = thinking_budget_tokens + THINKING_ANSWER_ROOM
        body["thinking"] = {"type": "enabled", "budget_tokens": thinking_budget_tokens}
    elif request.temperature is not None:
        # the API refuses a temperature together with extended thinking
        body["temperature"] = request.temperature
    return body
