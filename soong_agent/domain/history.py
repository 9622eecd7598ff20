"""Rules over a message history: every tool call gets exactly one result (LOOP-4)."""

from __future__ import annotations

from collections.abc import Sequence

from soong_agent.ports.messages import Message, ToolCallBlock, ToolResultBlock

CONTINUATION_PROMPT = (
    "Your previous answer was cut off by the output token limit. Continue exactly where it "
    "stopped, without repeating what you already wrote."
)


def unanswered_calls(messages: Sequence[Message]) -> list[ToolCallBlock]:
    """Tool calls of the last assistant message that have no result after it."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "assistant":
            calls = message.tool_calls
            if not calls:
                return []
            answered = {r.call_id for later in messages[index + 1 :] for r in later.tool_results}
            return [c for c in calls if c.id not in answered]
    return []


def synthetic_results(calls: Sequence[ToolCallBlock], reason: str) -> list[ToolResultBlock]:
    """Error results standing in for calls that never ran, so the next request stays valid."""
    return [
        ToolResultBlock(call_id=c.id, name=c.name, content=reason, is_error=True) for c in calls
    ]
