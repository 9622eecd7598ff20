"""Asks the compact model profile for a summary of a slice of the conversation (CTX-6)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from soong_agent.application.runs.model_answers import answer_text
from soong_agent.ports.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    user_text,
)
from soong_agent.ports.model import ModelProvider, ModelRequest, SystemPart, ToolSpec

SUMMARY_PROMPT = """You compact the history of a coding agent's session so that the agent can \
continue the work without it. Write a dense summary for the agent itself, not for the user: the \
goals and requests of the user, decisions taken and why, what was done (files created or changed \
and how), what was learned about the project (commands, structure, pitfalls), errors met and how \
they were resolved, and what remains to be done next. Keep exact names: file paths, functions, \
commands, identifiers, numbers. Do not invent anything. Use short sections and bullet points."""

_RESULT_CHARS = 4_000


def render_transcript(messages: Sequence[Message]) -> str:
    """The messages as plain text for the summariser; long tool results are shortened."""
    lines: list[str] = []
    for message in messages:
        label = {"user": "USER", "assistant": "ASSISTANT", "tool": "TOOL RESULTS"}[message.role]
        if message.kind == "summary":
            label = "EARLIER SUMMARY"
        lines.append(f"### {label}")
        for block in message.content:
            if isinstance(block, TextBlock) and block.text:
                lines.append(block.text)
            elif isinstance(block, ThinkingBlock) and block.text:
                lines.append(f"(thinking) {block.text[:_RESULT_CHARS]}")
            elif isinstance(block, ToolCallBlock):
                lines.append(f"-> {block.name} {block.arguments[:_RESULT_CHARS]}")
            elif isinstance(block, ToolResultBlock):
                content = block.content
                if len(content) > _RESULT_CHARS:
                    cut = len(content) - _RESULT_CHARS
                    content = content[:_RESULT_CHARS] + f"\n[... {cut} characters not shown]"
                state = "error" if block.is_error else "ok"
                lines.append(f"<- {block.name} ({state}): {content}")
    return "\n".join(lines)


class Summarizer:
    """Summaries from one model provider, at most `max_summary_tokens` long."""

    def __init__(self, provider: ModelProvider, *, max_summary_tokens: int) -> None:
        self._provider = provider
        self._max_tokens = max_summary_tokens

    async def summarize(self, messages: Sequence[Message]) -> str:
        """The summary text (possibly empty); provider errors propagate."""
        request = ModelRequest(
            system=[SystemPart(label="compact", text=SUMMARY_PROMPT)],
            messages=[
                user_text(
                    "Summarise this part of the session in at most "
                    f"{self._max_tokens} tokens:\n\n{render_transcript(messages)}"
                )
            ],
            tools=(),
            max_output_tokens=self._max_tokens,
        )
        return (await answer_text(self._provider, request)).strip()


def message_text(message: Message) -> str:
    """Everything of a message that costs tokens, as one string (for counting)."""
    parts: list[str] = [message.role]
    for block in message.content:
        if isinstance(block, (TextBlock, ThinkingBlock)):  # a tuple: faster than a union
            parts.append(block.text)
        elif isinstance(block, ToolCallBlock):
            parts.append(block.name)
            parts.append(block.arguments)
        elif isinstance(block, ToolResultBlock):
            parts.append(block.content)
    return "\n".join(parts)


_TOOLS_TEXT: dict[tuple[int, ...], tuple[Sequence[ToolSpec], str]] = {}
_TOOLS_TEXT_MAX = 64


def tools_text(specs: Sequence[ToolSpec]) -> str:
    """The tool definitions as the text they roughly cost.

    Remembered per set of spec objects (a runtime's runs send the same ones, and the specs of
    a tool are built once): serialising ~15 schemas costs ~70 µs a run otherwise.
    """
    key = tuple(id(s) for s in specs)
    hit = _TOOLS_TEXT.get(key)
    if hit is not None:
        return hit[1]
    text = json.dumps(
        [{"name": s.name, "description": s.description, "parameters": s.parameters} for s in specs]
    )
    if len(_TOOLS_TEXT) >= _TOOLS_TEXT_MAX:
        _TOOLS_TEXT.clear()
    _TOOLS_TEXT[key] = (list(specs), text)  # the specs stay alive, so their ids stay theirs
    return text
