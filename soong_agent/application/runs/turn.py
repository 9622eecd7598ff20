"""What the current model call has produced so far: the pieces of one assistant turn."""

from __future__ import annotations

from dataclasses import dataclass, field

from soong_agent.ports.messages import ContentBlock, TextBlock, ThinkingBlock, ToolCallBlock
from soong_agent.ports.streaming import StopReason, ThinkingDelta, Usage


@dataclass(slots=True)
class Turn:
    """What the current model call has produced so far (kept for cancellation)."""

    text: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    closed_thinking: list[ThinkingBlock] = field(default_factory=list)
    calls: list[ToolCallBlock] = field(default_factory=list)
    stop: StopReason = "other"
    usage: Usage | None = None

    def add_thinking(self, delta: ThinkingDelta) -> None:
        if delta.redacted is not None:
            self.closed_thinking.append(ThinkingBlock(text="", redacted=delta.redacted))
            return
        if delta.text:
            self.thinking.append(delta.text)
        if delta.signature is not None:
            self.closed_thinking.append(
                ThinkingBlock(text="".join(self.thinking), signature=delta.signature)
            )
            self.thinking = []

    def content(self) -> list[ContentBlock]:
        blocks: list[ContentBlock] = list(self.closed_thinking)
        if self.thinking:
            blocks.append(ThinkingBlock(text="".join(self.thinking)))
        if self.text or not self.calls:
            blocks.append(TextBlock(text="".join(self.text)))
        blocks.extend(self.calls)
        return blocks

    def output_text(self) -> str:
        """Everything the model wrote in this call, as one text (for a token estimate)."""
        text = "".join(self.text) + "".join(self.thinking)
        return text + "".join(c.name + c.arguments for c in self.calls)

    def one_call_per_id(self) -> list[str]:
        """Make every tool call id unique (a model may repeat one in a response): an identical
        repeat is dropped, a different call sharing an id gets a fresh id, so each call runs
        once and the next request stays valid for every provider. Returns what was changed,
        one line each."""
        if len(self.calls) < 2:
            return []  # the usual turn: nothing to compare
        seen: dict[str, ToolCallBlock] = {}
        taken = {call.id for call in self.calls}
        kept: list[ToolCallBlock] = []
        notes: list[str] = []
        for call in self.calls:
            first = seen.get(call.id)
            if first is None:
                seen[call.id] = call
                kept.append(call)
            elif (first.name, first.arguments) == (call.name, call.arguments):
                notes.append(f"the model repeated tool call {call.id} ({call.name}); it runs once")
            else:
                fresh = _fresh_id(call.id, taken)
                taken.add(fresh)
                kept.append(call.model_copy(update={"id": fresh}))
                notes.append(
                    f"tool call id {call.id} was used by two different calls; the second "
                    f"({call.name}) runs as {fresh}"
                )
        self.calls = kept
        return notes


def _fresh_id(base: str, taken: set[str]) -> str:
    n = 2
    while f"{base}_{n}" in taken:
        n += 1
    return f"{base}_{n}"
