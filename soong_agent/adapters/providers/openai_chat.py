"""OpenAI Chat Completions over httpx streaming (SSE); also serves compatible gateways."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any

import httpx

from soong_agent.adapters.providers.base import (
    HttpStreamProvider,
    check_event_stream,
    drain,
    loads,
    scan,
)
from soong_agent.adapters.providers.http_errors import (
    ErrorContext,
    error_from_chunk,
    error_from_httpx,
)
from soong_agent.adapters.providers.openai_wire import (
    FINISH_REASONS,
    ToolCalls,
    build_body,
    parse_usage,
)
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.adapters.providers.sse import payload_batches
from soong_agent.ports.errors import ProviderError
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


# --- the provider ----------------------------------------------------------------------------


class OpenAIChatProvider(HttpStreamProvider):
    """`ModelProvider` for OpenAI Chat Completions and compatible gateways."""

    def __init__(
        self,
        *,
        client: httpx.AsyncClient,
        base_url: str,
        model: str,
        api_key: Callable[[], str | None],
        retry: RetryPolicy,
        timeout_s: float,
        provider: str = "openai",
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
        self._url = self._base_url + "/chat/completions"

    def _not_found_hint(self, detail: str) -> str:
        if "model" in detail.lower():
            return f"is [model].name {self._model!r} a model this server has?"
        if not self._base_url.endswith("/v1"):
            return (
                f"POST {self._url} does not exist; OpenAI-compatible servers usually serve "
                f"{self._base_url}/v1/chat/completions: is /v1 missing from base_url?"
            )
        return f"POST {self._url} does not exist; check [model].base_url"

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Send `request` and yield its events; the last one is `StreamFinished`.

        Transient failures are retried per the policy, but only while nothing has been
        yielded yet: once the caller has seen an event, a failure is raised at once.
        """
        content, headers, ctx = self._prepare(
            build_body(self._model, request),
            {"content-type": "application/json", "accept": "text/event-stream"},
        )

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
                        await check_event_stream(response, ctx, error_in_body=error_from_chunk)
                        # --- the hot loop: one json.loads and a few lookups per chunk ---
                        calls = ToolCalls()
                        usage: Any = None
                        finish: Any = None
                        done = False
                        received = False
                        async for batch in batches:
                            received = received or bool(batch)
                            for payload in batch:
                                if payload == _DONE:
                                    done = True
                                    break
                                try:
                                    chunk, end = scan(payload, 0)
                                except (StopIteration, ValueError):
                                    end = -1
                                if end != len(payload):
                                    try:
                                        chunk = loads(payload)
                                    except ValueError as exc:
                                        raise _malformed(ctx, payload) from exc
                                if type(chunk) is not dict:
                                    raise _malformed(ctx, payload)
                                choices = chunk.get("choices")
                                if choices:
                                    try:
                                        choice = choices[0]
                                        delta = choice.get("delta")
                                        reason = choice.get("finish_reason")
                                    except (AttributeError, LookupError, TypeError) as exc:
                                        raise _malformed(ctx, payload) from exc
                                    if delta and type(delta) is dict:
                                        text = delta.get("content")
                                        if text and type(text) is str:
                                            yielded = True
                                            yield TextDelta(text)
                                        thinking = delta.get("reasoning_content") or delta.get(
                                            "reasoning"
                                        )
                                        if thinking and type(thinking) is str:
                                            yielded = True
                                            yield ThinkingDelta(thinking)
                                        fragments = delta.get("tool_calls")
                                        if fragments:
                                            for fragment in fragments:
                                                calls.add(fragment)
                                    if reason:
                                        finish = reason
                                        for ready in calls.drain():
                                            yielded = True
                                            yield ready
                                reported_usage = chunk.get("usage")
                                if reported_usage:
                                    usage = reported_usage
                                error = chunk.get("error")
                                if error:
                                    raise error_from_chunk(ctx, error)
                            if done:
                                break
                        if not done and finish is None:
                            # a clean close after finish_reason (some gateways omit [DONE]) is a
                            # complete answer; one before it lost part of the answer
                            raise ctx.error("transport", _ended_early(chunk_seen=received))
                        if done:
                            await drain(batches)
                        had_calls = bool(calls)
                        for ready in calls.drain():
                            yielded = True
                            yield ready
                        reported = parse_usage(usage)
                        if reported is not None:
                            yielded = True
                            yield UsageReported(reported)
                        stop: StopReason
                        if had_calls:
                            stop = "tool_use"
                        elif finish:
                            stop = FINISH_REASONS.get(str(finish), "other")
                        else:
                            stop = "end_turn"
                        yielded = True
                        yield StreamFinished(stop)
                        return
                except httpx.HTTPError as exc:
                    raise error_from_httpx(ctx, exc) from exc
            except ProviderError as err:
                retry = self._plan_retry(attempt, err, yielded=yielded)
                yield retry
                await self._sleep(retry.delay_s)


# --- helpers of the exchange -----------------------------------------------------------------


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


def _malformed(ctx: ErrorContext, payload: str) -> ProviderError:
    return ctx.error("protocol", "malformed chunk: " + payload[:200])
