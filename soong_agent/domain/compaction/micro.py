"""Micro-compaction: old tool results become short stubs (rungs micro, micro_aggressive)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from soong_agent.domain.compaction.structure import (
    _check_tokens,
    _copy,
    approx_tokens,
    recent_window_start,
)
from soong_agent.ports.messages import ContentBlock, Message, ToolCallBlock, ToolResultBlock

STUB_PREFIX = "[elided: "
"""How a micro-compacted tool result starts; such results are never stubbed again."""

_ARTIFACT_RE = re.compile(r"\bart_[0-9a-f]{8,64}\b")
_ARGS_LIMIT = 160


@dataclass(frozen=True, slots=True)
class MicroPlan:
    """The outcome of micro-compaction: the new messages and their estimated token counts."""

    messages: list[Message]
    tokens: list[int]
    tokens_saved: int
    changed_ids: list[str]
    changed_indices: list[int] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether any tool result was stubbed."""
        return bool(self.changed_indices)


def _short_arguments(call: ToolCallBlock | None) -> str:
    if call is None:
        return "(call not in context)"
    raw = call.arguments
    try:
        text = json.dumps(json.loads(raw), ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError):
        text = " ".join(raw.split())
    if len(text) > _ARGS_LIMIT:
        text = text[: _ARGS_LIMIT - 1] + "…"
    return text


def stub_text(result: ToolResultBlock, tokens: int, call: ToolCallBlock | None) -> str:
    """The stub standing for an elided tool result."""
    head = f"{STUB_PREFIX}{result.name} result of {tokens} tokens; "
    head += f"arguments {_short_arguments(call)}"
    artifact = _ARTIFACT_RE.search(result.content)
    if artifact is not None:
        return f"{head}; artifact {artifact.group(0)} — read_artifact to see it]"
    return f"{head}; not stored — run the tool again if it is needed]"


def _result_share(message_tokens: int, block: ToolResultBlock, results: int, chars: int) -> int:
    if results == 1:
        return message_tokens
    if chars == 0:
        return message_tokens // results
    return message_tokens * len(block.content) // chars


def micro_compact(
    messages: Sequence[Message],
    tokens: Sequence[int],
    *,
    keep_recent_tokens: int,
    stub_threshold_tokens: int = 200,
    aggressive: bool = False,
    estimate: Callable[[str], int] = approx_tokens,
) -> MicroPlan:
    """Stub the tool results older than the recent window whose size is over the threshold.

    `tokens` holds one estimate per message. A result's size is its message's estimate (shared
    by content length when a message carries several results). A result is stubbed only when
    the stub is smaller; results already stubbed are left alone. `aggressive` uses threshold 0
    and half the recent window. Message ids, parents and kinds are kept; copies are returned.
    """
    _check_tokens(messages, tokens)
    keep = keep_recent_tokens // 2 if aggressive else keep_recent_tokens
    threshold = 0 if aggressive else stub_threshold_tokens
    cutoff = recent_window_start(tokens, keep)
    calls: dict[str, ToolCallBlock] = {}
    out: list[Message] = []
    new_tokens: list[int] = []
    changed_ids: list[str] = []
    changed_indices: list[int] = []
    saved = 0
    for index, message in enumerate(messages):
        for call in message.tool_calls:
            calls[call.id] = call
        results = message.tool_results
        if index >= cutoff or message.role != "tool" or not results:
            out.append(_copy(message))
            new_tokens.append(tokens[index])
            continue
        chars = sum(len(r.content) for r in results)
        content: list[ContentBlock] = []
        message_saved = 0
        for block in message.content:
            if not isinstance(block, ToolResultBlock) or block.content.startswith(STUB_PREFIX):
                content.append(block)
                continue
            size = _result_share(tokens[index], block, len(results), chars)
            stub = stub_text(block, size, calls.get(block.call_id))
            stub_size = estimate(stub)
            if size <= threshold or stub_size >= size:
                content.append(block)
                continue
            content.append(
                ToolResultBlock(
                    call_id=block.call_id, name=block.name, content=stub, is_error=block.is_error
                )
            )
            message_saved += size - stub_size
        if message_saved > 0:
            changed_ids.append(message.id)
            changed_indices.append(index)
        out.append(_copy(message, content=content))
        new_tokens.append(tokens[index] - message_saved)
        saved += message_saved
    return MicroPlan(
        messages=out,
        tokens=new_tokens,
        tokens_saved=saved,
        changed_ids=changed_ids,
        changed_indices=changed_indices,
    )
