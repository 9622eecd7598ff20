"""Anthropic Messages API over httpx streaming (SSE): text, tool use, thinking, prompt caching."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Unpack

from soong_agent.adapters.providers.anthropic_stream import StreamState, error_from_event
from soong_agent.adapters.providers.anthropic_wire import EFFORT_BUDGETS, build_body
from soong_agent.adapters.providers.base import (
    SCAN_MAX,
    HttpProviderArgs,
    HttpStreamProvider,
    misshapen,
    parse,
    scan,
)
from soong_agent.adapters.providers.framing import SSE
from soong_agent.adapters.providers.http_errors import ErrorContext
from soong_agent.adapters.providers.payloads import ShapeError
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import StreamEvent, TextDelta

DEFAULT_VERSION = "2023-06-01"


class AnthropicMessagesProvider(HttpStreamProvider):
    """`ModelProvider` for the Anthropic Messages API (and servers that speak it).

    `thinking_budget_tokens` turns extended thinking on; without it, `reasoning_effort`
    (``low``, ``medium``, ``high``) does, with the budget `EFFORT_BUDGETS` gives it. `vision`
    False sends a line of text in place of each image.
    """

    provider_name = "anthropic"
    stream_format = replace(SSE, not_streams=(*SSE.not_streams, "text/plain"))

    def __init__(
        self,
        *,
        max_output_tokens: int = 8192,
        thinking_budget_tokens: int | None = None,
        reasoning_effort: str | None = None,
        vision: bool = True,
        anthropic_version: str = DEFAULT_VERSION,
        **args: Unpack[HttpProviderArgs],
    ) -> None:
        super().__init__(**args)
        if reasoning_effort is not None and reasoning_effort not in EFFORT_BUDGETS:
            raise ValueError(
                f"reasoning_effort: expected low, medium or high, found {reasoning_effort!r}"
            )
        self._max_output_tokens = max_output_tokens
        self._thinking_budget = thinking_budget_tokens
        self._effort_budget = EFFORT_BUDGETS.get(reasoning_effort or "")
        self._vision = vision
        self._version = anthropic_version

    def _endpoint(self) -> str:
        # base_url is the host ("https://api.anthropic.com"); one that already names /v1 works too
        return "/messages" if self._base_url.endswith("/v1") else "/v1/messages"

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        return build_body(
            self._model,
            request,
            max_output_tokens=self._max_output_tokens,
            thinking_budget_tokens=self._thinking_budget or self._effort_budget,
            vision=self._vision,
        )

    def _headers(self, key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": self._version, **super()._headers(None)}
        if key:
            headers["x-api-key"] = key
        return headers

    def _parser(self, ctx: ErrorContext, out: list[StreamEvent]) -> EventParser:
        return EventParser(ctx, out)

    def _error_in_body(self, ctx: ErrorContext, error: Any) -> ProviderError:
        return error_from_event(ctx, error)

    def _not_found_hint(self, detail: str) -> str:
        if "model" in detail.lower():
            return f"is [model].name {self._model!r} a model this API serves?"
        return (
            f"POST {self._url} does not exist; base_url should be the server root, "
            "such as https://api.anthropic.com"
        )


class EventParser:
    """The events of one Messages stream, up to `message_stop`, as neutral events.

    Every field read is type-checked (here for the text and JSON deltas of the hot path,
    in `StreamState` for the rest); an event that does not fit is a protocol error naming
    the field (``content_block.input``), what came, and the start of the event.
    """

    __slots__ = ("_ctx", "_out", "_state")

    def __init__(self, ctx: ErrorContext, out: list[StreamEvent]) -> None:
        self._ctx = ctx
        self._out = out
        self._state = StreamState()

    def feed(self, batch: list[str]) -> bool:
        # --- the hot loop: one JSON scan, a few lookups and type checks per event ---
        out = self._out
        append = out.append
        tool_args = self._state.tool_args
        on_event = self._state.on_event
        for payload in batch:
            if len(payload) <= SCAN_MAX:
                try:
                    event, end = scan(payload, 0)
                except (StopIteration, ValueError, RecursionError):
                    end = -1
                if end != len(payload):
                    event = parse(self._ctx, "event", payload)
            else:
                event = parse(self._ctx, "event", payload)
            if type(event) is not dict:
                raise misshapen(self._ctx, "event", payload, ShapeError("", "an object", event))
            kind = event.get("type")
            if kind == "content_block_delta":
                delta = event.get("delta")
                if type(delta) is dict:
                    delta_kind = delta.get("type")
                    if delta_kind == "text_delta":
                        text = delta.get("text")
                        if type(text) is str:
                            if text:
                                append(TextDelta(text))
                            continue
                    elif delta_kind == "input_json_delta":
                        part = delta.get("partial_json")
                        if type(part) is str:
                            if not part:
                                continue
                            index = event.get("index")
                            if type(index) is int:
                                args = tool_args.get(index)
                                if args is not None:
                                    args.append(part)
                                    continue
                # anything else (and every error) is left to `on_event`
            elif kind == "ping":
                continue
            elif kind == "message_stop":
                return True
            elif kind == "error" or (kind is None and "error" in event):
                raise error_from_event(self._ctx, event.get("error"))
            try:
                out += on_event(kind, event)
            except ShapeError as exc:
                raise misshapen(self._ctx, "event", payload, exc) from None
        return False

    def finish(self, ended: bool) -> None:
        if not ended:
            raise self._ctx.error("transport", "stream ended before message_stop")
        self._out += self._state.finish()
