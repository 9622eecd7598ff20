"""OpenAI Chat Completions over httpx streaming (SSE); also serves compatible gateways."""

from __future__ import annotations

from typing import Any, Unpack

from soong_agent.adapters.providers.base import (
    SCAN_MAX,
    HttpProviderArgs,
    HttpStreamProvider,
    misshapen,
    parse,
    scan,
)
from soong_agent.adapters.providers.http_errors import ErrorContext, error_from_chunk
from soong_agent.adapters.providers.openai_wire import (
    FINISH_REASONS,
    ToolCalls,
    accepts_cache_key,
    build_body,
    echoes_reasoning,
    parse_usage,
)
from soong_agent.adapters.providers.payloads import ShapeError
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import (
    StopReason,
    StreamEvent,
    StreamFinished,
    TextDelta,
    ThinkingDelta,
    Usage,
    UsageReported,
)

_DONE = "[DONE]"


class OpenAIChatProvider(HttpStreamProvider):
    """`ModelProvider` for OpenAI Chat Completions and compatible gateways.

    `reasoning_effort` (``low``, ``medium``, ``high``) is sent when given; `prompt_cache_key`
    sends one key per conversation (None: to the endpoints known to take it); `vision` False
    sends a line of text in place of each image. See `openai_wire` for what goes where.
    """

    provider_name = "openai"

    def __init__(
        self,
        *,
        reasoning_effort: str | None = None,
        prompt_cache_key: bool | None = None,
        vision: bool = True,
        **args: Unpack[HttpProviderArgs],
    ) -> None:
        super().__init__(**args)
        self._effort = reasoning_effort
        self._cache_key = (
            accepts_cache_key(self._base_url) if prompt_cache_key is None else prompt_cache_key
        )
        self._vision = vision
        self._echo = echoes_reasoning(self._model, self._base_url)

    def _endpoint(self) -> str:
        return "/chat/completions"

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        return build_body(
            self._model,
            request,
            reasoning_effort=self._effort,
            prompt_cache_key=self._cache_key,
            vision=self._vision,
            echo_reasoning=self._echo,
        )

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
    """The chunks of one Chat Completions stream, up to `[DONE]`, as events.

    Every field read is type-checked; a chunk that does not fit is a protocol error naming
    the field (``choices[0].delta.tool_calls``), what came, and the start of the chunk. Fields
    not read are not looked at, and a null field counts as an absent one.
    """

    __slots__ = ("_calls", "_ctx", "_finish", "_out", "_received", "_usage")

    def __init__(self, ctx: ErrorContext, out: list[StreamEvent]) -> None:
        self._ctx = ctx
        self._out = out
        self._calls = ToolCalls()
        self._usage: Usage | None = None
        self._finish: str | None = None
        self._received = False

    def feed(self, batch: list[str]) -> bool:
        # --- the hot loop: one JSON scan, a few lookups and type checks per chunk ---
        self._received = self._received or bool(batch)
        ctx = self._ctx
        out = self._out
        append = out.append
        for payload in batch:
            if payload == _DONE:
                return True
            if len(payload) <= SCAN_MAX:
                try:
                    chunk, end = scan(payload, 0)
                except (StopIteration, ValueError, RecursionError):
                    end = -1
                if end != len(payload):
                    chunk = parse(ctx, "chunk", payload)
            else:
                chunk = parse(ctx, "chunk", payload)
            try:
                if type(chunk) is not dict:
                    raise ShapeError("", "an object", chunk)
                choices = chunk.get("choices")
                if choices:
                    if type(choices) is not list:
                        raise ShapeError("choices", "a list", choices)
                    choice = choices[0]
                    if type(choice) is not dict:
                        raise ShapeError("choices[0]", "an object", choice)
                    delta = choice.get("delta")
                    if type(delta) is dict:
                        text = delta.get("content")
                        if type(text) is str:
                            if text:
                                append(TextDelta(text))
                        elif text is not None:
                            self._content_parts(text)
                        thinking = delta.get("reasoning_content")
                        if (
                            not thinking
                        ):  # DeepSeek and vLLM say reasoning_content, others reasoning
                            thinking = delta.get("reasoning", thinking)
                        if type(thinking) is str:
                            if thinking:
                                append(ThinkingDelta(thinking))
                        elif thinking is not None:
                            self._bad_reasoning(delta)
                        fragments = delta.get("tool_calls")
                        if fragments is not None:
                            self._add_calls(fragments)
                    elif delta is not None:
                        raise ShapeError("choices[0].delta", "an object", delta)
                    reason = choice.get("finish_reason")
                    if reason is not None:
                        if type(reason) is not str:
                            raise ShapeError("choices[0].finish_reason", "a string", reason)
                        if reason:
                            self._finish = reason
                            out.extend(self._calls.drain())
                elif choices is not None and type(choices) is not list:
                    raise ShapeError("choices", "a list", choices)
                usage = chunk.get("usage")
                if usage is not None:
                    self._take_usage(usage)
            except ShapeError as exc:
                raise misshapen(ctx, "chunk", payload, exc) from None
            error = chunk.get("error")
            if error:
                raise error_from_chunk(ctx, error)
        return False

    def _take_usage(self, usage: Any) -> None:
        if type(usage) is not dict:
            raise ShapeError("usage", "an object", usage)
        if usage:
            try:
                self._usage = parse_usage(usage)
            except ShapeError as exc:
                raise exc.under("usage") from None

    @staticmethod
    def _bad_reasoning(delta: dict[str, Any]) -> None:
        for key in ("reasoning_content", "reasoning"):
            value = delta.get(key)
            if value is not None and type(value) is not str:
                raise ShapeError(f"choices[0].delta.{key}", "a string", value)

    def _content_parts(self, content: Any) -> None:
        """`delta.content` as a list of parts (Mistral's reasoning models stream it so):
        the text of its text parts; other kinds of part are not ours to read."""
        if type(content) is not list:
            raise ShapeError("choices[0].delta.content", "a string", content)
        for i, part in enumerate(content):
            if type(part) is not dict:
                raise ShapeError(f"choices[0].delta.content[{i}]", "an object", part)
            if part.get("type") == "text":
                text = part.get("text")
                if type(text) is not str:
                    raise ShapeError(f"choices[0].delta.content[{i}].text", "a string", text)
                if text:
                    self._out.append(TextDelta(text))

    def _add_calls(self, fragments: Any) -> None:
        if type(fragments) is not list:
            raise ShapeError("choices[0].delta.tool_calls", "a list", fragments)
        add = self._calls.add
        for i, fragment in enumerate(fragments):
            try:
                add(fragment)
            except ShapeError as exc:
                raise exc.under(f"choices[0].delta.tool_calls[{i}]") from None

    def finish(self, ended: bool) -> None:
        finish = self._finish
        if not ended and finish is None:
            # a clean close after finish_reason (some gateways omit [DONE]) is a complete
            # answer; one before it lost part of the answer
            raise self._ctx.error("transport", _ended_early(chunk_seen=self._received))
        had_calls = bool(self._calls)
        out = self._out
        out.extend(self._calls.drain())
        if self._usage is not None:
            out.append(UsageReported(self._usage))
        stop: StopReason
        if had_calls:
            stop = "tool_use"
        elif finish:
            stop = FINISH_REASONS.get(finish, "other")
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
