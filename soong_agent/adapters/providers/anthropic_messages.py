"""Anthropic Messages API over httpx streaming (SSE): text, tool use, thinking, prompt caching."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing

import httpx

from soong_agent.adapters.providers.anthropic_wire import (
    MalformedEvent,
    StreamState,
    build_body,
    error_from_event,
)
from soong_agent.adapters.providers.base import (
    HttpStreamProvider,
    check_event_stream,
    drain,
    loads,
    scan,
)
from soong_agent.adapters.providers.http_errors import (
    ErrorContext,
    error_from_httpx,
)
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.adapters.providers.sse import payload_batches
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import StreamEvent, TextDelta

DEFAULT_VERSION = "2023-06-01"


class AnthropicMessagesProvider(HttpStreamProvider):
    """`ModelProvider` for the Anthropic Messages API (and servers that speak it)."""

    def __init__(
        self,
        *,
        client: httpx.AsyncClient,
        base_url: str,
        model: str,
        api_key: Callable[[], str | None],
        retry: RetryPolicy,
        timeout_s: float,
        max_output_tokens: int = 8192,
        thinking_budget_tokens: int | None = None,
        provider: str = "anthropic",
        anthropic_version: str = DEFAULT_VERSION,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        super().__init__(
            client=client,
            base_url=base_url,
            model=model,
            api_key=api_key,
            retry=retry,
            timeout_s=timeout_s,
            provider=provider,
            sleep=sleep,
            rand=rand,
        )
        # base_url is the host ("https://api.anthropic.com"); one that already names /v1 works too
        suffix = "/messages" if self._base_url.endswith("/v1") else "/v1/messages"
        self._url = self._base_url + suffix
        self._max_output_tokens = max_output_tokens
        self._thinking_budget = thinking_budget_tokens
        self._version = anthropic_version

    def _not_found_hint(self, detail: str) -> str:
        if "model" in detail.lower():
            return f"is [model].name {self._model!r} a model this API serves?"
        return (
            f"POST {self._url} does not exist; base_url should be the server root, "
            "such as https://api.anthropic.com"
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Send `request` and yield its events; the last one is `StreamFinished`.

        Transient failures are retried per the policy, but only while nothing has been
        yielded yet: once the caller has seen an event, a failure is raised at once.
        """
        body = build_body(
            self._model,
            request,
            max_output_tokens=self._max_output_tokens,
            thinking_budget_tokens=self._thinking_budget,
        )
        headers = {
            "anthropic-version": self._version,
            "content-type": "application/json",
            "accept": "text/event-stream",
        }
        content, headers, ctx = self._prepare(body, headers, key_header="x-api-key")

        attempt = 0
        yielded = False
        while True:
            attempt += 1
            try:
                try:
                    async with (
                        self._post(content, headers) as response,
                        aclosing(payload_batches(response.aiter_bytes())) as batches,
                    ):
                        await check_event_stream(
                            response,
                            ctx,
                            error_in_body=error_from_event,
                            not_streams=("application/json", "text/html", "text/plain"),
                        )
                        # --- the hot loop: one JSON scan and a few lookups per event ---
                        state = StreamState()
                        tool_args = state.tool_args
                        on_event = state.on_event
                        done = False
                        async for batch in batches:
                            for payload in batch:
                                try:
                                    event, end = scan(payload, 0)
                                except (StopIteration, ValueError):
                                    end = -1
                                if end != len(payload):
                                    try:
                                        event = loads(payload)
                                    except ValueError as exc:
                                        raise _malformed(ctx, payload) from exc
                                if type(event) is not dict:
                                    raise _malformed(ctx, payload)
                                kind = event.get("type")
                                if kind == "content_block_delta":
                                    delta = event.get("delta")
                                    if type(delta) is not dict:
                                        raise _malformed(ctx, payload)
                                    delta_kind = delta.get("type")
                                    if delta_kind == "text_delta":
                                        text = delta.get("text")
                                        if text and type(text) is str:
                                            yielded = True
                                            yield TextDelta(text)
                                        continue
                                    if delta_kind == "input_json_delta":
                                        part = delta.get("partial_json")
                                        if part:
                                            args = tool_args.get(event.get("index"))
                                            if args is not None and type(part) is str:
                                                args.append(part)
                                                continue
                                        else:
                                            continue
                                elif kind == "ping":
                                    continue
                                elif kind == "message_stop":
                                    done = True
                                    break
                                elif kind == "error" or (kind is None and "error" in event):
                                    raise error_from_event(ctx, event.get("error"))
                                try:
                                    out = on_event(kind, event)
                                except MalformedEvent as exc:
                                    raise _malformed(ctx, payload, str(exc)) from exc
                                for item in out:
                                    yielded = True
                                    yield item
                            if done:
                                break
                        if not done:
                            raise ctx.error("transport", "stream ended before message_stop")
                        await drain(batches)
                        for item in state.finish():
                            yielded = True
                            yield item
                        return
                except httpx.HTTPError as exc:
                    raise error_from_httpx(ctx, exc) from exc
            except ProviderError as err:
                retry = self._plan_retry(attempt, err, yielded=yielded)
                yield retry
                await self._sleep(retry.delay_s)


# --- helpers of the exchange -----------------------------------------------------------------


def _malformed(ctx: ErrorContext, payload: str, why: str = "") -> ProviderError:
    prefix = f"malformed event ({why}): " if why else "malformed event: "
    return ctx.error("protocol", prefix + payload[:200])
