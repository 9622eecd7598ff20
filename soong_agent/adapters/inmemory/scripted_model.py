"""A model that plays back scripted responses: for tests of agents built on soong-agent."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from soong_agent.adapters.inmemory.model_requests import request_problems
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.ports.model import ModelRequest
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


@dataclass(frozen=True, slots=True)
class ScriptedResponse:
    """One model answer: stream events, then a stop reason.

    Build with `ScriptedResponse.text(...)` or `ScriptedResponse.tool_calls(...)`.
    """

    events: tuple[StreamEvent, ...]
    delay_s: float = 0.0

    @classmethod
    def text(
        cls,
        text: str,
        *,
        pieces: int = 1,
        stop_reason: StopReason = "end_turn",
        usage: Usage | None = None,
        thinking: str | None = None,
        delay_s: float = 0.0,
    ) -> ScriptedResponse:
        """An answer of `text`, streamed in `pieces` deltas."""
        events: list[StreamEvent] = []
        if thinking:
            events.append(ThinkingDelta(text=thinking, signature="scripted-signature"))
        step = max(1, -(-len(text) // max(1, pieces)))
        events += [TextDelta(text[i : i + step]) for i in range(0, len(text), step)]
        if usage is not None:
            events.append(UsageReported(usage))
        events.append(StreamFinished(stop_reason))
        return cls(tuple(events), delay_s)

    @classmethod
    def tool_calls(
        cls,
        *calls: tuple[str, Mapping[str, Any] | str] | ToolCallBlock,
        text: str = "",
        usage: Usage | None = None,
        delay_s: float = 0.0,
    ) -> ScriptedResponse:
        """Tool calls given as ``(name, arguments)`` pairs or ready blocks."""
        events: list[StreamEvent] = [TextDelta(text)] if text else []
        for index, item in enumerate(calls):
            block = item
            if not isinstance(block, ToolCallBlock):
                name, args = block
                raw = args if isinstance(args, str) else json.dumps(args)
                block = ToolCallBlock(id=f"call_{index}", name=name, arguments=raw)
            events.append(ToolCallReady(block))
        if usage is not None:
            events.append(UsageReported(usage))
        events.append(StreamFinished("tool_use"))
        return cls(tuple(events), delay_s)


Script = ScriptedResponse | BaseException | Callable[[ModelRequest], "ScriptedResponse"]


@dataclass
class ScriptedModel:
    """A `ModelProvider` that answers each call with the next scripted item.

    Items are responses, exceptions to raise, or callables that build a response from the
    request. `calls` records every request; `default` answers when the script runs out (else a
    `ProviderError` says the script is exhausted).

    Like a strict server it refuses a request a real one would answer with HTTP 400 (see
    `model_requests`: tool results that answer no call, calls left unanswered, bad tool names
    …) with a `ProviderError` of kind ``bad_request``, consuming no scripted item; the refusals
    are kept in `rejections`. ``strict=False`` turns the checks off.
    """

    script: list[Script] = field(default_factory=list)
    default: Script | None = None
    name: str = "scripted"
    calls: list[ModelRequest] = field(default_factory=list)
    unique_call_ids: bool = True
    strict: bool = True
    rejections: list[tuple[ModelRequest, list[str]]] = field(default_factory=list)

    def __init__(
        self,
        script: Iterable[Script] = (),
        *,
        default: Script | None = None,
        name: str = "scripted",
        unique_call_ids: bool = True,
        strict: bool = True,
    ) -> None:
        self.script = list(script)
        self.default = default
        self.name = name
        self.calls = []
        self.unique_call_ids = unique_call_ids
        self.strict = strict
        self.rejections = []

    @property
    def label(self) -> str:
        return f"scripted {self.name}"

    @property
    def last_call(self) -> ModelRequest:
        return self.calls[-1]

    def _next(self, request: ModelRequest) -> ScriptedResponse:
        if self.script:
            item = self.script.pop(0)
        elif self.default is not None:
            item = self.default
        else:
            raise ProviderError(
                "the scripted model has no response left",
                kind="protocol",
                provider="scripted",
                base_url="memory://scripted",
            )
        if isinstance(item, BaseException):
            raise item
        if callable(item) and not isinstance(item, ScriptedResponse):
            return item(request)
        return item

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        snapshot = dataclasses.replace(
            request,
            system=list(request.system),
            messages=list(request.messages),
            tools=list(request.tools),
            metadata=dict(request.metadata),
        )
        self.calls.append(snapshot)
        problems = request_problems(snapshot) if self.strict else []
        if problems:
            self.rejections.append((snapshot, problems))
            raise ProviderError(
                "; ".join(problems),
                kind="bad_request",
                provider="scripted",
                base_url="memory://scripted",
                status=400,
            )
        response = self._next(snapshot)
        number = len(self.calls)
        for item in response.events:
            if response.delay_s:
                await asyncio.sleep(response.delay_s)
            if self.unique_call_ids and isinstance(item, ToolCallReady):
                call = item.call
                yield ToolCallReady(call.model_copy(update={"id": f"{call.id}_{number}"}))
            else:
                yield item
