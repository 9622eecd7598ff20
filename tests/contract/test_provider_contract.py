"""The ModelProvider contract, run against every provider adapter over its loopback fake.

Each test is written once and parametrised over the kits of `provider_matrix` (OpenAI Chat
Completions, Anthropic Messages, Ollama /api/chat). The assertions are about behaviour: the
events a caller sees, the error kind it gets, whether a failed call was sent again, what the
next request carries on the wire. The only assertions on wording are that an error message
names the base_url and never holds the API key.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from typing import cast
from urllib.parse import urlsplit

import httpx
import pytest

from soong_agent.adapters.providers.base import UNREACHABLE_RETRY_S
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.ports.errors import ProviderError, ProviderErrorKind
from soong_agent.ports.messages import Message, ToolCallBlock, ToolResultBlock, user_text
from soong_agent.ports.model import ModelProvider, ModelRequest, SystemPart, ToolSpec
from soong_agent.ports.streaming import (
    RetryScheduled,
    StreamEvent,
    StreamFinished,
    TextDelta,
    ToolCallReady,
    Usage,
    UsageReported,
)
from tests.contract.provider_matrix import (
    CANARY_KEY,
    JITTER,
    KITS,
    POLICY,
    FakeServer,
    ProviderKit,
    Sleeps,
    stalled,
)
from tests.support.fake_openai import Framing, ScriptedResponse

# The kind each failure case must be reported as, unless the kit declares that its provider
# cannot tell that case apart (Failure.kind).
CONTRACT_KINDS: dict[str, ProviderErrorKind] = {
    "auth": "auth",
    "context_too_long": "context_too_long",
    "bad_request": "bad_request",
    "protocol": "protocol",
    "rate_limit": "rate_limit",
    "overloaded": "overloaded",
    "server": "server",
    "stream_error": "server",
    "cut_before_events": "transport",
}
NOT_RETRIED = ("auth", "context_too_long", "bad_request", "protocol")
RETRIED = ("rate_limit", "overloaded", "server", "stream_error", "cut_before_events")

READ_FILE = ToolSpec(
    "read_file",
    "Read a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
GREP = ToolSpec("grep", "Search files.", {"type": "object", "properties": {}})


# --- fixtures and helpers --------------------------------------------------------------------


@pytest.fixture(params=sorted(KITS))
def kit(request: pytest.FixtureRequest) -> ProviderKit:
    return KITS[request.param]


@pytest.fixture
def server(kit: ProviderKit) -> Iterator[FakeServer]:
    with kit.server() as srv:
        yield srv


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:
        yield c


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def request(*messages: Message, tools: tuple[ToolSpec, ...] = (READ_FILE, GREP)) -> ModelRequest:
    return ModelRequest(
        system=[SystemPart("core", "You are a contract test.")],
        messages=list(messages) or [user_text("hello")],
        tools=tools,
    )


async def collect(provider: ModelProvider, req: ModelRequest | None = None) -> list[StreamEvent]:
    async with asyncio.timeout(15):
        return [e async for e in provider.stream(req or request())]


async def failure_of(provider: ModelProvider, req: ModelRequest | None = None) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await collect(provider, req)
    return info.value


def texts(events: list[StreamEvent]) -> list[str]:
    return [e.text for e in events if isinstance(e, TextDelta)]


def calls(events: list[StreamEvent]) -> list[ToolCallBlock]:
    return [e.call for e in events if isinstance(e, ToolCallReady)]


def assert_well_formed(events: list[StreamEvent], stop: str) -> None:
    """The stream ends with one StreamFinished(stop), after at most one UsageReported."""
    assert events, "no events"
    assert events[-1] == StreamFinished(stop)  # type: ignore[arg-type]
    assert sum(isinstance(e, StreamFinished) for e in events) == 1
    assert sum(isinstance(e, UsageReported) for e in events) <= 1


def expected_kind(kit: ProviderKit, case: str) -> ProviderErrorKind:
    return kit.failures[case].kind or CONTRACT_KINDS[case]


def assert_safe_message(err: ProviderError, base_url: str) -> None:
    """The error says where the provider is, and never shows the key."""
    message = str(err)
    assert base_url in message
    assert err.base_url == base_url
    assert CANARY_KEY not in message
    assert CANARY_KEY not in err.detail


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_every_kit_scripts_every_failure_case() -> None:
    for kit in KITS.values():
        assert set(kit.failures) == set(CONTRACT_KINDS), kit.name


# --- identity --------------------------------------------------------------------------------


async def test_is_a_model_provider_whose_label_names_the_base_url(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    provider = kit.provider(client, server.base_url + "/", sleep=sleeps)
    assert isinstance(provider, ModelProvider)
    assert server.base_url in provider.label
    assert not provider.label.endswith("/")


# --- streaming -------------------------------------------------------------------------------


async def test_text_streams_as_deltas_in_order_then_end_turn(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    text = "Hello, streaming contract world! café ☕"
    server.enqueue(kit.text(text, 5))
    events = await collect(kit.provider(client, server.base_url, sleep=sleeps))

    deltas = texts(events)
    assert len(deltas) >= 2, "the text was not streamed in pieces"
    assert all(deltas)
    assert "".join(deltas) == text
    # the text first, then nothing but an optional usage report and the finish
    assert all(isinstance(e, TextDelta) for e in events[: len(deltas)])
    tail = events[len(deltas) :]
    assert all(isinstance(e, UsageReported) for e in tail[:-1])
    assert_well_formed(events, "end_turn")

    [sent] = server.requests
    assert (sent.method, urlsplit(sent.path).path) == ("POST", kit.chat_path)
    assert json.loads(sent.body)["stream"] is True
    assert sleeps.delays == []


async def test_one_tool_call_with_fragmented_arguments(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    arguments = json.dumps(
        {"path": "src/café.py", "start": 1, "end": 40, "pattern": 'def \\w+\\("x"\\)'},
        ensure_ascii=False,
    )
    server.enqueue(kit.tool_calls([("call_contract_1", "read_file", arguments)], 7))
    events = await collect(kit.provider(client, server.base_url, sleep=sleeps))

    [call] = calls(events)
    assert call.name == "read_file"
    assert json.loads(call.arguments) == json.loads(arguments)
    if kit.keeps_call_ids:
        assert call.id == "call_contract_1"
    else:
        assert call.id
    assert not texts(events)
    assert all(isinstance(e, ToolCallReady | UsageReported | StreamFinished) for e in events)
    assert_well_formed(events, "tool_use")


async def test_two_tool_calls_in_one_turn(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    first = ("call_a", "read_file", '{"path": "a.txt"}')
    second = ("call_b", "grep", '{"pattern": "TODO", "glob": "**/*.py"}')
    server.enqueue(kit.tool_calls([first, second], 4))
    events = await collect(kit.provider(client, server.base_url, sleep=sleeps))

    made = calls(events)
    assert [c.name for c in made] == ["read_file", "grep"]
    assert [json.loads(c.arguments) for c in made] == [
        json.loads(first[2]),
        json.loads(second[2]),
    ]
    assert all(c.id for c in made)
    assert made[0].id != made[1].id
    if kit.keeps_call_ids:
        assert [c.id for c in made] == ["call_a", "call_b"]
    assert_well_formed(events, "tool_use")


async def test_tool_result_round_trip(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    server.enqueue(
        kit.tool_calls([("call_rt_1", "read_file", '{"path": "notes.txt"}')], 3),
        kit.text("The notes say hello.", 2),
    )
    provider = kit.provider(client, server.base_url, sleep=sleeps)
    question = user_text("What is in notes.txt?")
    [call] = calls(await collect(provider, request(question)))

    # the run loop keeps the call as the assistant's turn and answers it with a tool message
    history = [
        question,
        Message(role="assistant", content=[call]),
        Message(
            role="tool",
            content=[ToolResultBlock(call_id=call.id, name=call.name, content="hello from notes")],
        ),
    ]
    answer = await collect(provider, request(*history))
    assert "".join(texts(answer)) == "The notes say hello."
    assert_well_formed(answer, "end_turn")

    assert len(server.requests) == 2
    wire = kit.round_trip(server.requests[1].json)
    assert wire is not None, "the call and its result are not both on the wire"
    link = call.id if kit.links_results_by == "id" else call.name
    assert wire.call_link == link
    assert wire.result_link == link
    assert wire.call_index < wire.result_index
    assert wire.call_arguments == {"path": "notes.txt"}
    assert wire.result_content == "hello from notes"


async def test_usage_carries_the_scripted_counts(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    scripted = Usage(
        input_tokens=1200, output_tokens=30, cache_read_tokens=1024, cache_write_tokens=900
    )
    server.enqueue(kit.with_usage("counted", scripted))
    events = await collect(kit.provider(client, server.base_url, sleep=sleeps))

    reported = [e.usage for e in events if isinstance(e, UsageReported)]
    assert reported == [kit.expected_usage(scripted)]
    assert "".join(texts(events)) == "counted"
    assert_well_formed(events, "end_turn")


async def test_max_tokens_stop(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    server.enqueue(kit.max_tokens("cut short because the limit was"))
    events = await collect(kit.provider(client, server.base_url, sleep=sleeps))
    assert "".join(texts(events)) == "cut short because the limit was"
    assert_well_formed(events, "max_tokens")


# --- errors and retries ----------------------------------------------------------------------


@pytest.mark.parametrize("case", NOT_RETRIED)
async def test_permanent_failure_is_raised_at_once(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps, case: str
) -> None:
    server.enqueue(kit.failures[case].response(), kit.text("never served", 2))
    err = await failure_of(kit.provider(client, server.base_url, sleep=sleeps))

    assert err.kind == expected_kind(kit, case)
    assert not err.retryable
    assert len(server.requests) == 1
    assert sleeps.delays == []
    assert_safe_message(err, server.base_url)
    # the key was really sent, so its absence from the message means it was kept out
    assert any(CANARY_KEY in value for value in server.requests[0].headers.values())


@pytest.mark.parametrize("case", RETRIED)
async def test_transient_failure_then_success_is_retried(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps, case: str
) -> None:
    failure = kit.failures[case]
    server.enqueue(failure.response(), kit.text("second try", 2))
    events = await collect(kit.provider(client, server.base_url, sleep=sleeps))

    assert "".join(texts(events)) == "second try"
    assert_well_formed(events, "end_turn")
    assert len(server.requests) == 2
    if failure.retry_after is not None:
        assert sleeps.delays == [failure.retry_after]
    else:
        assert sleeps.delays == [POLICY.delay(1, None, JITTER)]


@pytest.mark.parametrize("case", RETRIED)
async def test_transient_failure_that_persists_gives_up_with_its_kind(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps, case: str
) -> None:
    failure = kit.failures[case]
    server.enqueue(
        *(failure.response() for _ in range(POLICY.max_attempts)), kit.text("never served", 2)
    )
    err = await failure_of(kit.provider(client, server.base_url, sleep=sleeps))

    assert err.kind == expected_kind(kit, case)
    assert err.retryable
    assert len(server.requests) == POLICY.max_attempts
    assert len(sleeps.delays) == POLICY.max_attempts - 1
    if failure.retry_after is not None:
        assert sleeps.delays == [failure.retry_after] * (POLICY.max_attempts - 1)
    assert_safe_message(err, server.base_url)


# x-should-retry: the server's verdict overrides the status, exactly as the official OpenAI and
# Anthropic SDKs read it (`_should_retry` in their `_base_client.py`): "true" retries any
# status, "false" retries none, any other value leaves the decision to the status.


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_x_should_retry_false_stops_the_retry_of_a_transient_status(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps, status: int
) -> None:
    server.enqueue(kit.error(status, {"x-should-retry": "false"}), kit.text("never served", 2))
    err = await failure_of(kit.provider(client, server.base_url, sleep=sleeps))

    assert err.status == status and err.should_retry is False
    assert not err.retryable
    assert len(server.requests) == 1
    assert sleeps.delays == []


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_x_should_retry_true_retries_a_permanent_status(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps, status: int
) -> None:
    server.enqueue(kit.error(status, {"x-should-retry": "true"}), kit.text("second try", 2))
    events = await collect(kit.provider(client, server.base_url, sleep=sleeps))

    assert "".join(texts(events)) == "second try"
    assert len(server.requests) == 2
    assert sleeps.delays == [POLICY.delay(1, None, JITTER)]


async def test_x_should_retry_true_still_stops_at_max_attempts_and_honours_retry_after(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    headers = {"x-should-retry": "true", "retry-after": "1.5"}
    server.enqueue(
        *(kit.error(400, headers) for _ in range(POLICY.max_attempts)), kit.text("never", 2)
    )
    err = await failure_of(kit.provider(client, server.base_url, sleep=sleeps))

    assert err.status == 400 and err.retryable
    assert len(server.requests) == POLICY.max_attempts
    assert sleeps.delays == [1.5] * (POLICY.max_attempts - 1)


@pytest.mark.parametrize("value", ["TRUE", "1", "yes", ""])
async def test_x_should_retry_other_values_leave_it_to_the_status(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps, value: str
) -> None:
    server.enqueue(kit.error(400, {"x-should-retry": value}))
    err = await failure_of(kit.provider(client, server.base_url, sleep=sleeps))
    assert err.should_retry is None and not err.retryable
    assert len(server.requests) == 1

    server.enqueue(kit.error(503, {"x-should-retry": value}), kit.text("second try", 2))
    events = await collect(kit.provider(client, server.base_url, sleep=sleeps))
    assert "".join(texts(events)) == "second try"


async def test_connection_refused_is_a_retried_transport_error(
    kit: ProviderKit, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    base_url = f"http://127.0.0.1:{closed_port()}"
    err = await failure_of(kit.provider(client, base_url, sleep=sleeps))

    assert err.kind == "transport"
    assert err.retryable and err.unreachable
    # nothing listens there: retried once, quickly, not through the whole backoff
    assert sleeps.delays == [UNREACHABLE_RETRY_S]
    assert_safe_message(err, base_url)


@pytest.mark.parametrize("framing", ["chunked", "close"])
async def test_a_stream_cut_after_events_is_retried_from_the_start(
    kit: ProviderKit,
    server: FakeServer,
    client: httpx.AsyncClient,
    sleeps: Sleeps,
    framing: Framing,
) -> None:
    # chunked: the body breaks off; close: it ends cleanly, but before the end marker
    server.enqueue(kit.cut_stream("partial answer", framing), kit.text("the whole answer", 2))
    seen: list[StreamEvent] = []
    async with asyncio.timeout(15):
        async for event in kit.provider(client, server.base_url, sleep=sleeps).stream(request()):
            seen.append(event)

    (notice,) = [e for e in seen if isinstance(e, RetryScheduled)]
    assert notice.restart and notice.kind == "transport"
    before, after = seen[: seen.index(notice)], seen[seen.index(notice) + 1 :]
    partial = "".join(texts(before))
    assert partial and "partial answer".startswith(partial)
    assert "".join(texts(after)) == "the whole answer"  # the answer again from its start
    assert isinstance(seen[-1], StreamFinished)
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body
    assert len(sleeps.delays) == 1
    assert CANARY_KEY not in notice.reason


async def test_cut_streams_are_retried_at_most_stream_max_retries_times(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    retry = RetryPolicy(max_attempts=10, initial_backoff_s=0.0, stream_max_retries=2)
    server.enqueue(*(kit.cut_stream("partial answer", "chunked") for _ in range(4)))
    seen: list[StreamEvent] = []
    provider = kit.provider(client, server.base_url, sleep=sleeps, retry=retry)
    with pytest.raises(ProviderError) as info:
        async with asyncio.timeout(15):
            async for event in provider.stream(request()):
                seen.append(event)

    assert info.value.kind == "transport"
    assert [e.restart for e in seen if isinstance(e, RetryScheduled)] == [True, True]
    assert len(server.requests) == 3
    assert not any(isinstance(e, StreamFinished) for e in seen)
    assert_safe_message(info.value, server.base_url)


def timed_provider(
    kit: ProviderKit,
    client: httpx.AsyncClient,
    base_url: str,
    *,
    sleep: Sleeps,
    timeout_s: float,
    idle_timeout_s: float,
    retry: RetryPolicy = POLICY,
) -> ModelProvider:
    """The kit's adapter with both limits of a call set (`kit.provider` sets the first only)."""
    return kit.adapter(
        client=client,
        base_url=base_url,
        model=kit.model,
        api_key=lambda: CANARY_KEY,
        retry=retry,
        timeout_s=timeout_s,
        idle_timeout_s=idle_timeout_s,
        sleep=sleep,
        rand=lambda: JITTER,
    )


async def test_a_silent_server_is_an_idle_timeout_that_is_retried(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    retry = RetryPolicy(max_attempts=2, initial_backoff_s=0.2)
    server.enqueue(*(stalled(kit.text("too slow", 2).with_delay(5.0)) for _ in range(2)))
    provider = timed_provider(
        kit, client, server.base_url, sleep=sleeps, retry=retry, timeout_s=30, idle_timeout_s=0.3
    )
    err = await failure_of(provider)

    assert err.kind == "timeout"
    assert err.retryable
    assert "model.idle_timeout_ms = 300" in err.detail
    assert len(server.requests) == 2
    assert len(sleeps.delays) == 1
    assert_safe_message(err, server.base_url)


def trickle(kit: ProviderKit) -> ScriptedResponse:
    """Headers, then a keep-alive (an SSE comment, or a blank NDJSON line) every 0.1 s for a
    minute, and never an answer."""
    keep_alive = b"\n" if kit.name == "ollama" else b": keep-alive\n\n"
    head = kit.text("never sent", 1)
    return ScriptedResponse(headers=list(head.headers), chunks=[keep_alive] * 600, delay_s=0.1)


async def test_a_trickling_server_is_stopped_by_the_whole_call_limit_and_not_retried(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps
) -> None:
    server.enqueue(trickle(kit), kit.text("next call", 2))
    provider = timed_provider(
        kit, client, server.base_url, sleep=sleeps, timeout_s=1.0, idle_timeout_s=0.5
    )
    err = await failure_of(provider)

    assert err.kind == "timeout"
    assert not err.retryable
    assert "model.timeout_ms = 1000" in err.detail
    assert len(server.requests) == 1
    assert sleeps.delays == []
    assert_safe_message(err, server.base_url)
    assert await asyncio.to_thread(server.wait_for_disconnect, 5.0)  # the connection was dropped

    events = await collect(provider)  # the client is still usable
    assert "".join(texts(events)) == "next call"
    assert_well_formed(events, "end_turn")


# --- cancellation ----------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["aclose", "cancel"])
async def test_cancellation_mid_stream_closes_the_connection(
    kit: ProviderKit, server: FakeServer, client: httpx.AsyncClient, sleeps: Sleeps, how: str
) -> None:
    # 200 pieces 20 ms apart: about four seconds of stream if nobody hangs up
    server.enqueue(kit.text("x" * 400, 200).with_delay(0.02), kit.text("next call", 2))
    provider = kit.provider(client, server.base_url, sleep=sleeps)
    seen: list[StreamEvent] = []

    async with asyncio.timeout(10):
        if how == "aclose":
            stream = cast(AsyncGenerator[StreamEvent, None], provider.stream(request()))
            seen.append(await anext(stream))
            seen.append(await anext(stream))
            await stream.aclose()
        else:
            two_seen = asyncio.Event()

            async def consume() -> None:
                async for event in provider.stream(request()):
                    seen.append(event)
                    if len(seen) == 2:
                        two_seen.set()

            task = asyncio.create_task(consume())
            await two_seen.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    assert all(isinstance(e, TextDelta) for e in seen[:2])
    assert not any(isinstance(e, StreamFinished) for e in seen)
    assert await asyncio.to_thread(server.wait_for_disconnect, 5.0)

    # the client is still usable: the next call on it goes through
    events = await collect(provider)
    assert "".join(texts(events)) == "next call"
    assert_well_formed(events, "end_turn")
    assert len(server.requests) == 2
