"""OpenAI Chat Completions over httpx streaming (SSE); also serves compatible gateways."""

from __future__ import annotations

from typing import Any

from soong_agent.adapters.providers.base import HttpStreamProvider, loads, malformed, scan
from soong_agent.adapters.providers.http_errors import ErrorContext, error_from_chunk
from soong_agent.adapters.providers.openai_wire import (
    FINISH_REASONS,
    ToolCalls,
    build_body,
    parse_usage,
)
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import (
    StopReason,
    StreamEvent,
    StreamFinished,
    TextDelta,
    ThinkingDelta,
    UsageReported,
)

_DONE = "[DONE]"


class OpenAIChatProvider(HttpStreamProvider):
    """`ModelProvider` for OpenAI Chat Completions and compatible gateways."""

    provider_name = "openai"

    def _endpoint(self) -> str:
        return "/chat/completions"

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        return build_body(self._model, request)

    def _parser(self, ctx: ErrorContext, out: list[StreamEvent]) -> ChunkParser:
        return ChunkParser(ctx, out)

    def _not_found_hint(self, detail: str) -> str:
        if "model" not in detail.lower() and not self._base_url.endswith("/v1"):
            return (
                f"POST {self._url} does not exist; OpenAI-compatible servers usually serve "
                f"{self._base_url}/v1/chat/completions: is /v1 missing from base_url?"
            )
        return super()._not_found_hint(detail)


class ChunkParser:
    """The chunks of one Chat Completions stream, up to `[DONE]`, as events."""

    __slots__ = ("_calls", "_ctx", "_finish", "_out", "_received", "_usage")

    def __init__(self, ctx: ErrorContext, out: list[StreamEvent]) -> None:
        self._ctx = ctx
        self._out = out
        self._calls = ToolCalls()
        self._usage: Any = None
        self._finish: Any = None
        self._received = False

    def feed(self, batch: list[str]) -> bool:
        # --- the hot loop: one JSON scan and a few lookups per chunk ---
        self._received = self._received or bool(batch)
        append = self._out.append
        add_call = self._calls.add
        for payload in batch:
            if payload == _DONE:
                return True
            try:
                chunk, end = scan(payload, 0)
            except (StopIteration, ValueError):
                end = -1
            if end != len(payload):
                try:
                    chunk = loads(payload)
                except ValueError as exc:
                    raise malformed(self._ctx, "chunk", payload) from exc
            if type(chunk) is not dict:
                raise malformed(self._ctx, "chunk", payload)
            choices = chunk.get("choices")
            if choices:
                try:
                    choice = choices[0]
                    delta = choice.get("delta")
                    reason = choice.get("finish_reason")
                except (AttributeError, LookupError, TypeError) as exc:
                    raise malformed(self._ctx, "chunk", payload) from exc
                if delta and type(delta) is dict:
                    text = delta.get("content")
                    if text and type(text) is str:
                        append(TextDelta(text))
                    thinking = delta.get("reasoning_content") or delta.get("reasoning")
                    if thinking and type(thinking) is str:
                        append(ThinkingDelta(thinking))
                    fragments = delta.get("tool_calls")
                    if fragments:
                        for fragment in fragments:
                            add_call(fragment)
                if reason:
                    self._finish = reason
                    self._out.extend(self._calls.drain())
            usage = chunk.get("usage")
            if usage:
                self._usage = usage
            error = chunk.get("error")
            if error:
                raise error_from_chunk(self._ctx, error)
        return False

    def finish(self, ended: bool) -> None:
        finish = self._finish
        if not ended and finish is None:
            # a clean close after finish_reason (some gateways omit [DONE]) is a complete
            # answer; one before it lost part of the answer
            raise self._ctx.error("transport", _ended_early(chunk_seen=self._received))
        had_calls = bool(self._calls)
        out = self._out
        out.extend(self._calls.drain())
        usage = parse_usage(self._usage)
        if usage is not None:
            out.append(UsageReported(usage))
        stop: StopReason
        if had_calls:
            stop = "tool_use"
        elif finish:
            stop = FINISH_REASONS.get(str(finish), "other")
        else:
            stop = "end_turn"
        out.append(StreamFinished(stop))


def _ended_early(*, chunk_seen: bool) -> str:
    if chunk_seen:
        return "stream ended before [DONE]"
    # llama.cpp's server answers a prompt longer than its context (n_ctx) this way when
    # streaming: 200, an event-stream content type, and no event at all
    return (
        "the server ended the stream without sending anything; llama.cpp does this when the "
        "prompt does not fit its context size (n_ctx): is [model].context_window larger than "
        "the server's?"
    )
