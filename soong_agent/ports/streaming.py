"""What a model provider streams to the run loop: small immutable events, cheap to create."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from soong_agent.ports.messages import ToolCallBlock

StopReason = Literal["end_turn", "tool_use", "max_tokens", "content_filter", "other"]


class Usage(BaseModel):
    """Token usage of one model call as the provider reported it.

    `input_tokens` are prompt tokens not served from the provider's cache; cache reads and
    writes are counted separately, so the whole prompt is the sum of the three.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    estimated: bool = False
    """True when (part of) the counts are the runtime's own estimate: the server sent none."""

    def __add__(self, other: Usage) -> Usage:
        # sums of two valid usages need no validation: made as `Usage(...)` with every field
        # given would make it (its fields, all of them set), at half the cost (one a turn)
        total = _new(Usage)
        _set(
            total,
            "__dict__",
            {
                "input_tokens": self.input_tokens + other.input_tokens,
                "output_tokens": self.output_tokens + other.output_tokens,
                "cache_read_tokens": self.cache_read_tokens + other.cache_read_tokens,
                "cache_write_tokens": self.cache_write_tokens + other.cache_write_tokens,
                "estimated": self.estimated or other.estimated,
            },
        )
        _set(total, "__pydantic_fields_set__", _EVERY_FIELD)
        _set(total, "__pydantic_extra__", None)
        _set(total, "__pydantic_private__", None)
        return total


_new = object.__new__
_set = object.__setattr__
_EVERY_FIELD = set(Usage.model_fields)
"""The fields set of every sum (shared: a frozen model's set is never added to)."""


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of answer text."""

    text: str


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    """A piece of reasoning text, or what closes a thinking block.

    A delta with a `signature` closes the current thinking block (the next thinking text starts
    a new block). A delta with `redacted` data is a whole encrypted block by itself.
    """

    text: str
    signature: str | None = None
    redacted: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallReady:
    """A tool call whose arguments have fully arrived."""

    call: ToolCallBlock


@dataclass(frozen=True, slots=True)
class UsageReported:
    """Usage of the call, when the provider sends it."""

    usage: Usage


@dataclass(frozen=True, slots=True)
class StreamFinished:
    """The last event of a successful stream."""

    stop_reason: StopReason


@dataclass(frozen=True, slots=True)
class RetryScheduled:
    """The call failed and will be sent again after `delay_s`.

    Not part of the answer: it only tells the caller (and so the user) why it is waiting.
    `attempt` is the failed attempt's number (1-based) of at most `max_attempts`.
    `restart`: the failure came after part of the answer had been yielded (a stream cut in
    the middle); everything yielded for this call so far is void, and the answer starts
    again from its first event.
    """

    kind: str
    reason: str
    attempt: int
    max_attempts: int
    delay_s: float
    restart: bool = False


StreamEvent = (
    TextDelta | ThinkingDelta | ToolCallReady | UsageReported | StreamFinished | RetryScheduled
)
