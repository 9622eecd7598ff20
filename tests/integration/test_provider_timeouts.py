"""The two limits of a model call (issue 39 item 4), against real loopback servers.

`timeout_ms` bounds the whole call, from sending the request to the end of the stream; it ends
a server that keeps the connection alive without ever answering, and is not retried.
`idle_timeout_ms` bounds a silence of the server (before the answer or inside it); a stall is
retried. The contract suite runs the trickle and the stall for every provider; these cases
add a server that never even sends its headers, and what the whole-call limit must not do to
the consumer of the stream.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import httpx
import pytest

from soong_agent.adapters.providers.openai_chat import OpenAIChatProvider
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.messages import user_text
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import RetryScheduled, StreamEvent, TextDelta
from tests.support.fake_openai import FakeOpenAIServer, ScriptedResponse, text_response

REQUEST = ModelRequest(system=[], messages=[user_text("hi")])


@contextmanager
def silent_server() -> Iterator[tuple[str, list[socket.socket]]]:
    """A loopback server that accepts connections and never answers (not even headers)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.05)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1", accepted
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        listener.close()


class Sleeps:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:
        yield c


def make(
    client: httpx.AsyncClient,
    base_url: str,
    *,
    timeout_s: float,
    idle_timeout_s: float | None,
    sleep: Sleeps,
    retry: RetryPolicy | None = None,
) -> OpenAIChatProvider:
    return OpenAIChatProvider(
        client=client,
        base_url=base_url,
        model="m",
        api_key=lambda: None,
        retry=retry or RetryPolicy(max_attempts=2, initial_backoff_s=0.1),
        timeout_s=timeout_s,
        idle_timeout_s=idle_timeout_s,
        sleep=sleep,
        rand=lambda: 0.5,
    )


async def failure(provider: OpenAIChatProvider) -> tuple[ProviderError, list[StreamEvent]]:
    seen: list[StreamEvent] = []
    with pytest.raises(ProviderError) as info:
        async with asyncio.timeout(30):
            async for event in provider.stream(REQUEST):
                seen.append(event)
    return info.value, seen


async def test_a_server_that_never_answers_is_an_idle_timeout_retried_once(
    client: httpx.AsyncClient,
) -> None:
    sleeps = Sleeps()
    with silent_server() as (base_url, accepted):
        provider = make(client, base_url, timeout_s=60, idle_timeout_s=0.3, sleep=sleeps)
        err, seen = await failure(provider)
    assert err.kind == "timeout"
    assert "sent nothing for 0.3 s (model.idle_timeout_ms = 300)" in err.detail
    assert err.retryable
    assert [e.kind for e in seen if isinstance(e, RetryScheduled)] == ["timeout"]
    assert len(sleeps.delays) == 1
    assert len(accepted) == 2  # the retry came on a new connection


async def test_a_server_that_never_answers_meets_the_whole_call_limit_first(
    client: httpx.AsyncClient,
) -> None:
    sleeps = Sleeps()
    with silent_server() as (base_url, accepted):
        provider = make(client, base_url, timeout_s=0.4, idle_timeout_s=60, sleep=sleeps)
        err, seen = await failure(provider)
    assert err.kind == "timeout"
    assert "did not finish within 0.4 s (model.timeout_ms = 400)" in err.detail
    assert not err.retryable
    assert seen == [] and sleeps.delays == []
    assert len(accepted) == 1


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


async def test_a_slow_consumer_is_not_cancelled_and_the_late_call_ends_at_the_next_read(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("one two three", pieces=3).with_delay(0.05), text_response("next"))
    provider = make(client, server.base_url, timeout_s=0.3, idle_timeout_s=5, sleep=Sleeps())
    stream = provider.stream(REQUEST)
    first = await anext(stream)
    assert isinstance(first, TextDelta)
    # the consumer's own wait outlasts the call's limit: it is not cut (a CancelledError here
    # would fail the test); the call ends at its next read instead
    await asyncio.sleep(0.6)
    with pytest.raises(ProviderError) as info:
        async for _ in stream:
            pass
    assert info.value.kind == "timeout"
    assert "model.timeout_ms = 300" in info.value.detail
    # the provider and its client are fine for the next call
    events = [e async for e in provider.stream(REQUEST)]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "next"


async def test_the_users_cancellation_stays_a_cancellation(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    trickle = ScriptedResponse(
        headers=[("Content-Type", "text/event-stream")], chunks=[b": ping\n\n"] * 300, delay_s=0.1
    )
    server.enqueue(trickle)
    provider = make(client, server.base_url, timeout_s=0.5, idle_timeout_s=5, sleep=Sleeps())

    async def consume() -> None:
        async for _ in provider.stream(REQUEST):
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(server.wait_for_disconnect, 5.0)
