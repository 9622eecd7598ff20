"""OpenAIChatProvider against a real loopback server speaking the Chat Completions stream."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from soong_agent.adapters.providers.base import UNREACHABLE_RETRY_S
from soong_agent.adapters.providers.http_errors import parse_retry_after, parse_should_retry
from soong_agent.adapters.providers.openai_chat import OpenAIChatProvider
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.ports.errors import MissingSecretError, ProviderError
from soong_agent.ports.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    user_text,
)
from soong_agent.ports.model import ModelProvider, ModelRequest, SystemPart, ToolSpec
from soong_agent.ports.streaming import (
    RetryScheduled,
    StreamEvent,
    StreamFinished,
    TextDelta,
    ThinkingDelta,
    ToolCallReady,
    Usage,
    UsageReported,
)
from tests.support.fake_openai import (
    FakeOpenAIServer,
    ScriptedResponse,
    cut_stream_response,
    error_response,
    malformed_chunk_response,
    raw_bytes_response,
    raw_sse_response,
    text_response,
    tool_call_response,
)

KEY = "sk-test-0123456789abcdef"


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:
        yield c


class Sleeps:
    """An injected sleep that records the delays and does not wait."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


POLICY = RetryPolicy(max_attempts=3, initial_backoff_s=0.2, max_backoff_s=5, max_retry_after_s=30)
NO_STREAM_RETRY = RetryPolicy(stream_max_retries=0)
"""A cut answer is not sent again: the error itself is what the test looks at."""


def make_provider(
    client: httpx.AsyncClient,
    base_url: str,
    *,
    key: str | None = KEY,
    retry: RetryPolicy = POLICY,
    sleep: Sleeps | None = None,
    timeout_s: float = 10.0,
) -> OpenAIChatProvider:
    return OpenAIChatProvider(
        client=client,
        base_url=base_url,
        model="gpt-test",
        api_key=lambda: key,
        retry=retry,
        timeout_s=timeout_s,
        sleep=sleep or Sleeps(),
        rand=lambda: 0.5,
    )


def simple_request(**kwargs: object) -> ModelRequest:
    return ModelRequest(
        system=[SystemPart("core", "You are a test.")],
        messages=[user_text("hello")],
        **kwargs,  # type: ignore[arg-type]
    )


async def collect(provider: OpenAIChatProvider, request: ModelRequest | None = None) -> list[Any]:
    return [e async for e in provider.stream(request or simple_request())]


async def failure(
    provider: OpenAIChatProvider, request: ModelRequest | None = None
) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await collect(provider, request)
    return info.value


def texts(events: list[StreamEvent]) -> list[str]:
    return [e.text for e in events if isinstance(e, TextDelta)]


def calls(events: list[StreamEvent]) -> list[ToolCallBlock]:
    return [e.call for e in events if isinstance(e, ToolCallReady)]


# --- streaming -------------------------------------------------------------------------------


async def test_is_a_model_provider_with_a_label(client: httpx.AsyncClient) -> None:
    provider = make_provider(client, "http://127.0.0.1:8000/v1/")
    assert isinstance(provider, ModelProvider)
    assert provider.label == "openai gpt-test at http://127.0.0.1:8000/v1"


async def test_text_streams_in_pieces_then_usage_then_finish(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("Hello, streaming world!", pieces=4))
    events = await collect(make_provider(client, server.base_url))
    assert texts(events) == ["Hello,", " strea", "ming w", "orld!"]
    assert events[-2:] == [
        UsageReported(Usage(input_tokens=11, output_tokens=7)),
        StreamFinished("end_turn"),
    ]
    assert len(server.requests) == 1


async def test_usage_with_cached_tokens(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        text_response("hi", prompt_tokens=1200, completion_tokens=30, cached_tokens=1024)
    )
    events = await collect(make_provider(client, server.base_url))
    [usage] = [e.usage for e in events if isinstance(e, UsageReported)]
    # input_tokens are the prompt tokens not read from the cache
    assert usage == Usage(input_tokens=176, output_tokens=30, cache_read_tokens=1024)


async def test_missing_usage_reports_none(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("no usage here", usage=False))
    events = await collect(make_provider(client, server.base_url))
    assert not [e for e in events if isinstance(e, UsageReported)]
    assert "".join(texts(events)) == "no usage here"
    assert events[-1] == StreamFinished("end_turn")


async def test_usage_on_the_last_choice_chunk(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        raw_sse_response(
            [
                'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"ok"}}]}',
                "",
                'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
                '"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}',
                "",
                "data: [DONE]",
                "",
            ]
        )
    )
    events = await collect(make_provider(client, server.base_url))
    assert events == [
        TextDelta("ok"),
        UsageReported(Usage(input_tokens=3, output_tokens=1)),
        StreamFinished("end_turn"),
    ]


async def test_max_tokens_finish(server: FakeOpenAIServer, client: httpx.AsyncClient) -> None:
    server.enqueue(text_response("cut short", finish_reason="length"))
    events = await collect(make_provider(client, server.base_url))
    assert events[-1] == StreamFinished("max_tokens")


@pytest.mark.parametrize("interleave", [False, True])
async def test_two_parallel_tool_calls_in_fragments(
    server: FakeOpenAIServer, client: httpx.AsyncClient, interleave: bool
) -> None:
    first = ("call_a", "read_file", '{"path": "src/main.py", "start": 1, "end": 40}')
    second = ("call_b", "grep", '{"pattern": "def \\\\w+", "glob": "**/*.py"}')
    server.enqueue(tool_call_response([first, second], fragments=6, interleave=interleave))
    events = await collect(make_provider(client, server.base_url))
    assert calls(events) == [
        ToolCallBlock(id=first[0], name=first[1], arguments=first[2]),
        ToolCallBlock(id=second[0], name=second[1], arguments=second[2]),
    ]
    assert not texts(events)
    assert isinstance(events[-2], UsageReported)
    assert events[-1] == StreamFinished("tool_use")


async def test_repeated_id_and_name_in_every_delta(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        tool_call_response(
            [("c1", "write_file", '{"path": "a.txt", "content": "abc"}'), ("c2", "list_dir", "")],
            fragments=4,
            repeat_id_and_name=True,
            text="Let me write it.",
        )
    )
    events = await collect(make_provider(client, server.base_url))
    assert "".join(texts(events)) == "Let me write it."
    assert calls(events) == [
        ToolCallBlock(id="c1", name="write_file", arguments='{"path": "a.txt", "content": "abc"}'),
        ToolCallBlock(id="c2", name="list_dir", arguments="{}"),
    ]
    assert events[-1] == StreamFinished("tool_use")


async def test_tool_calls_without_index_or_id_and_reasoning(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    def data(delta: str, finish: str = "null") -> str:
        return f'data: {{"choices":[{{"delta":{delta},"finish_reason":{finish}}}]}}\n'

    server.enqueue(
        raw_sse_response(
            [
                data('{"role":"assistant","reasoning_content":"thinking..."}'),
                data('{"tool_calls":[{"id":"x1","function":{"name":"glob","arguments":"{\\"p"}}]}'),
                data('{"tool_calls":[{"function":{"arguments":"\\":1}"}}]}'),
                data('{"tool_calls":[{"index":0,"function":{"name":"todo_write"}}]}'),
                data("{}", '"tool_calls"'),
                "data: [DONE]\n",
            ]
        )
    )
    events = await collect(make_provider(client, server.base_url))
    assert events[0] == ThinkingDelta("thinking...")
    assert calls(events) == [
        ToolCallBlock(id="call_0", name="todo_write", arguments="{}"),
        ToolCallBlock(id="x1", name="glob", arguments='{"p":1}'),
    ]
    assert events[-1] == StreamFinished("tool_use")


async def test_crlf_lines_comments_and_pieces_split_anywhere(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    stream = (
        b": keep-alive\r\n\r\n"
        b"event: message\r\n"
        b'data: {"choices":[{"index":0,"delta":{"content":"caf\xc3\xa9 "}}]}\r\n\r\n'
        b'data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}\r\n\r\n'
        b"data: [DONE]\r\n\r\n"
    )
    # Cut the bytes at awkward places: inside a line, between CR and LF, inside a UTF-8 char.
    cuts = [5, 40, stream.index(b"\xa9"), stream.index(b"\r\n\r\ndata: {") + 1, len(stream) - 3]
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    server.enqueue(raw_bytes_response(pieces).with_delay(0.01))
    events = await collect(make_provider(client, server.base_url))
    assert events == [TextDelta("café "), TextDelta("ok"), StreamFinished("end_turn")]


async def test_connection_is_reused_between_calls(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("one"), text_response("two"))
    provider = make_provider(client, server.base_url)
    await collect(provider)
    await collect(provider)
    first, second = server.requests
    assert first.client_port == second.client_port


# --- the request -----------------------------------------------------------------------------


async def test_request_body_and_headers(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("done"))
    request = ModelRequest(
        system=[SystemPart("core", "You are soong."), SystemPart("env", "cwd: /p", stable=False)],
        messages=[
            user_text("read a.txt and list the dir"),
            Message(
                role="assistant",
                content=[
                    ThinkingBlock(text="hmm", signature="sig"),
                    TextBlock(text="Sure."),
                    ToolCallBlock(id="c1", name="read_file", arguments='{"path":"a.txt"}'),
                ],
            ),
            Message(
                role="tool",
                content=[ToolResultBlock(call_id="c1", name="read_file", content="A!")],
            ),
            Message(
                role="assistant",
                content=[
                    ToolCallBlock(id="c2", name="list_dir", arguments="{}"),
                    ToolCallBlock(id="c3", name="read_file", arguments='{"path":"b"}'),
                ],
            ),
            Message(
                role="tool",
                content=[
                    ToolResultBlock(call_id="c2", name="list_dir", content="a.txt\nb"),
                    ToolResultBlock(call_id="c3", name="read_file", content="no", is_error=True),
                ],
            ),
        ],
        tools=[ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {}})],
        max_output_tokens=256,
        temperature=0.2,
    )
    await collect(make_provider(client, server.base_url), request)
    [sent] = server.requests
    assert sent.method == "POST"
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["content-type"].startswith("application/json")
    body = sent.json
    assert body["model"] == "gpt-test"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 256
    assert body["temperature"] == 0.2
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file.",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "You are soong.\n\ncwd: /p"},
        {"role": "user", "content": "read a.txt and list the dir"},
        {
            "role": "assistant",
            "content": "Sure.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path":"a.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "A!"},
        {
            "role": "assistant",
            "content": "",  # never null: llama.cpp and other strict servers refuse it
            "tool_calls": [
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "list_dir", "arguments": "{}"},
                },
                {
                    "id": "c3",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path":"b"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "a.txt\nb"},
        {"role": "tool", "tool_call_id": "c3", "content": "no"},
    ]


async def test_minimal_body_has_no_optional_fields(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("ok"))
    await collect(
        make_provider(client, server.base_url), ModelRequest(system=[], messages=[user_text("hi")])
    )
    body = server.requests[0].json
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert not {"tools", "max_tokens", "temperature"} & body.keys()


@pytest.mark.parametrize("key", [None, ""])
async def test_no_authorization_header_without_a_key(
    server: FakeOpenAIServer, client: httpx.AsyncClient, key: str | None
) -> None:
    server.enqueue(text_response("ok"))
    await collect(make_provider(client, server.base_url, key=key))
    assert "authorization" not in server.requests[0].headers


async def test_missing_secret_propagates_and_sends_nothing(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    def no_key() -> str | None:
        raise MissingSecretError(var="OPENAI_API_KEY", user="model", source="config.toml: [model]")

    provider = OpenAIChatProvider(
        client=client,
        base_url=server.base_url,
        model="m",
        api_key=no_key,
        retry=POLICY,
        timeout_s=5,
    )
    with pytest.raises(MissingSecretError):
        await collect(provider)
    assert server.requests == []


# --- errors and retries ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"), [({"retry-after": "2"}, 2.0), ({"retry-after-ms": "1500"}, 1.5)]
)
async def test_rate_limit_honours_retry_after_then_succeeds(
    server: FakeOpenAIServer,
    client: httpx.AsyncClient,
    headers: dict[str, str],
    expected: float,
) -> None:
    server.enqueue(
        error_response(429, message="Rate limit reached", type_="requests", headers=headers),
        text_response("after the wait"),
    )
    sleeps = Sleeps()
    events = await collect(make_provider(client, server.base_url, sleep=sleeps))
    assert "".join(texts(events)) == "after the wait"
    assert sleeps.delays == [expected]
    assert len(server.requests) == 2


async def test_retry_after_is_capped(server: FakeOpenAIServer, client: httpx.AsyncClient) -> None:
    server.enqueue(error_response(429, headers={"retry-after": "3600"}), text_response("ok"))
    sleeps = Sleeps()
    await collect(make_provider(client, server.base_url, sleep=sleeps))
    assert sleeps.delays == [POLICY.max_retry_after_s]


async def test_server_error_is_retried_with_backoff(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(error_response(500), error_response(503), text_response("third time"))
    sleeps = Sleeps()
    events = await collect(make_provider(client, server.base_url, sleep=sleeps))
    assert "".join(texts(events)) == "third time"
    assert sleeps.delays == [POLICY.delay(1, None, 0.5), POLICY.delay(2, None, 0.5)]
    assert sleeps.delays[0] < sleeps.delays[1]


async def test_retries_stop_at_max_attempts(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(*(error_response(529, message="Overloaded") for _ in range(3)))
    sleeps = Sleeps()
    err = await failure(make_provider(client, server.base_url, sleep=sleeps))
    assert err.kind == "overloaded"
    assert err.status == 529
    assert len(server.requests) == 3
    assert len(sleeps.delays) == 2


async def test_x_should_retry_true_retries_a_bad_request_with_a_retry_notice(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        error_response(400, message="try me again", headers={"x-should-retry": "true"}),
        text_response("second try"),
    )
    sleeps = Sleeps()
    events = await collect(make_provider(client, server.base_url, sleep=sleeps))
    notices = [e for e in events if isinstance(e, RetryScheduled)]
    assert [(n.kind, n.attempt, n.max_attempts) for n in notices] == [("bad_request", 1, 3)]
    assert "try me again" in notices[0].reason
    assert events.index(notices[0]) == 0  # the notice comes before anything of the answer
    assert "".join(texts(events)) == "second try"
    assert sleeps.delays == [notices[0].delay_s] == [POLICY.delay(1, None, 0.5)]
    assert len(server.requests) == 2


async def test_x_should_retry_false_stops_a_rate_limit_despite_retry_after(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        error_response(429, headers={"x-should-retry": "false", "retry-after": "1"}),
        text_response("never served"),
    )
    sleeps = Sleeps()
    err = await failure(make_provider(client, server.base_url, sleep=sleeps))
    assert err.kind == "rate_limit" and err.retry_after == 1.0
    assert err.should_retry is False and not err.retryable
    assert sleeps.delays == [] and len(server.requests) == 1


def test_x_should_retry_parsing_follows_the_official_sdks() -> None:
    assert parse_should_retry(httpx.Headers({"X-Should-Retry": "true"})) is True
    assert parse_should_retry(httpx.Headers({"x-should-retry": "false"})) is False
    for other in ("True", "FALSE", "1", "0", " true", ""):
        assert parse_should_retry(httpx.Headers({"x-should-retry": other})) is None
    assert parse_should_retry(httpx.Headers({})) is None


async def test_auth_error_is_not_retried_and_never_shows_the_key(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        error_response(401, message=f"Incorrect API key provided: {KEY}.", code="invalid_api_key"),
        text_response("never served"),
    )
    err = await failure(make_provider(client, server.base_url))
    assert err.kind == "auth"
    assert err.status == 401
    assert not err.retryable
    assert KEY not in str(err)
    assert "Incorrect API key" in str(err)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("This model's maximum context length is 128000 tokens.", "context_length_exceeded"),
        ("Your input exceeds the context length of this model", None),
    ],
)
async def test_context_too_long(
    server: FakeOpenAIServer, client: httpx.AsyncClient, message: str, code: str | None
) -> None:
    server.enqueue(error_response(400, message=message, code=code))
    err = await failure(make_provider(client, server.base_url))
    assert err.kind == "context_too_long"
    assert len(server.requests) == 1


async def test_other_bad_request(server: FakeOpenAIServer, client: httpx.AsyncClient) -> None:
    server.enqueue(error_response(400, message="Invalid value for 'temperature'."))
    err = await failure(make_provider(client, server.base_url))
    assert err.kind == "bad_request"
    assert "temperature" in err.detail
    assert len(server.requests) == 1


async def test_cut_stream_after_events_raises_transport_without_retry_when_stream_retries_are_off(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(cut_stream_response("partial answer"), text_response("never served"))
    seen: list[StreamEvent] = []
    provider = make_provider(client, server.base_url, retry=NO_STREAM_RETRY)
    with pytest.raises(ProviderError) as info:
        async for event in provider.stream(simple_request()):
            seen.append(event)
    assert info.value.kind == "transport"
    assert texts(seen)
    assert len(server.requests) == 1


async def test_clean_close_without_done_is_a_transport_error(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(cut_stream_response("partial", framing="close"))
    err = await failure(make_provider(client, server.base_url, retry=NO_STREAM_RETRY))
    assert err.kind == "transport"
    assert "[DONE]" in err.detail


async def test_clean_close_after_finish_reason_without_done_is_complete(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    # some gateways end the body after the finish_reason chunk and never send [DONE]
    server.enqueue(
        raw_sse_response(
            [
                'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"all"}}]}',
                "",
                'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
                "",
            ],
            framing="close",
        )
    )
    events = await collect(make_provider(client, server.base_url))
    assert events == [TextDelta("all"), StreamFinished("end_turn")]


async def test_cut_before_any_event_is_retried(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(cut_stream_response(""), text_response("second try"))
    sleeps = Sleeps()
    events = await collect(make_provider(client, server.base_url, sleep=sleeps))
    assert "".join(texts(events)) == "second try"
    assert len(sleeps.delays) == 1


async def test_malformed_chunk_is_a_protocol_error(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(malformed_chunk_response(), text_response("never served"))
    err = await failure(make_provider(client, server.base_url))
    assert err.kind == "protocol"
    assert "chatcmpl-broken" in err.detail
    assert len(server.requests) == 1


async def test_error_object_in_the_stream(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        raw_sse_response(
            ['data: {"error":{"message":"Overloaded","type":"overloaded_error"}}', ""]
        ),
        raw_sse_response(
            ['data: {"error":{"message":"bad things","type":"invalid_request_error"}}', ""]
        ),
    )
    sleeps = Sleeps()
    err = await failure(make_provider(client, server.base_url, sleep=sleeps))
    assert err.kind == "bad_request"
    assert "bad things" in err.detail
    assert len(sleeps.delays) == 1  # the overloaded one was retried


async def test_connection_refused_is_transport_and_names_the_url(
    client: httpx.AsyncClient,
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    sleeps = Sleeps()
    err = await failure(make_provider(client, base_url, sleep=sleeps))
    assert err.kind == "transport"
    assert base_url in str(err)
    assert sleeps.delays == [UNREACHABLE_RETRY_S]  # one quick retry, not the whole backoff


async def test_read_timeout(server: FakeOpenAIServer, client: httpx.AsyncClient) -> None:
    server.enqueue(text_response("slow " * 4, pieces=4).with_delay(1.0))
    retry = RetryPolicy(max_attempts=1)
    err = await failure(make_provider(client, server.base_url, retry=retry, timeout_s=0.2))
    assert err.kind == "timeout"


async def test_empty_script_answers_500(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    err = await failure(make_provider(client, server.base_url, retry=RetryPolicy(max_attempts=1)))
    assert err.kind == "server"
    assert "no scripted response left" in err.detail
    response = await client.get(server.base_url + "/models")
    assert response.status_code == 404


# --- cancellation ----------------------------------------------------------------------------


async def test_closing_early_closes_the_connection(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("x" * 400, pieces=200).with_delay(0.01))
    stream = make_provider(client, server.base_url).stream(simple_request())
    first = await anext(stream)
    assert isinstance(first, TextDelta)
    await stream.aclose()  # type: ignore[attr-defined]
    assert await asyncio.to_thread(server.wait_for_disconnect, 5.0)


async def test_cancelling_the_consumer_closes_the_connection(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("y" * 400, pieces=200).with_delay(0.01))
    got_one = asyncio.Event()

    async def consume() -> None:
        async for _ in make_provider(client, server.base_url).stream(simple_request()):
            got_one.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got_one.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(server.wait_for_disconnect, 5.0)


# --- pure helpers ----------------------------------------------------------------------------


def test_retry_after_parsing() -> None:
    now = 1_700_000_000.0
    date = format_datetime(datetime.fromtimestamp(now, UTC) + timedelta(seconds=7), usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=now) == pytest.approx(7.0)
    assert parse_retry_after({"retry-after": "0.5"}) == 0.5
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_backoff_grows_with_jitter_and_caps() -> None:
    policy = RetryPolicy.from_ms(
        max_attempts=5, initial_backoff_ms=100, max_backoff_ms=1000, max_retry_after_ms=2000
    )
    assert policy.initial_backoff_s == 0.1
    assert policy.delay(1, None, 0.0) == pytest.approx(0.05)
    assert policy.delay(1, None, 1.0) == pytest.approx(0.1)
    assert policy.delay(3, None, 1.0) == pytest.approx(0.4)
    assert policy.delay(30, None, 1.0) == pytest.approx(1.0)
    assert policy.delay(1, 5.0, 0.3) == 2.0
    assert policy.delay(1, 0.25, 0.3) == 0.25


async def test_multi_line_data_and_no_space_after_colon(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        raw_sse_response(
            [
                'data:{"choices":[{"index":0,',
                'data: "delta":{"content":"joined"}}]}',
                "id: 1",
                "",
                'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
                "",
                "data: [DONE]",
            ]
        )
    )
    events = await collect(make_provider(client, server.base_url))
    assert events == [TextDelta("joined"), StreamFinished("end_turn")]


async def test_a_non_streaming_answer_is_a_protocol_error(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        ScriptedResponse(
            headers=[("Content-Type", "text/html")],
            chunks=[b"<html>proxy login</html>"],
            framing="length",
        )
    )
    err = await failure(make_provider(client, server.base_url))
    assert err.kind == "protocol"
    assert "proxy login" in err.detail
    assert len(server.requests) == 1


# --- tool_choice -----------------------------------------------------------------------------

CHOICE_TOOLS = [
    ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {}}),
    ToolSpec("list_dir", "List a folder.", {"type": "object", "properties": {}}),
]


@pytest.mark.parametrize(
    ("text", "wire"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ("list_dir", {"type": "function", "function": {"name": "list_dir"}}),
    ],
)
async def test_tool_choice_in_the_chat_completions_shape(
    server: FakeOpenAIServer, client: httpx.AsyncClient, text: str, wire: object
) -> None:
    from soong_agent.ports.model import ToolChoice

    server.enqueue(text_response("ok"))
    request = simple_request(tools=CHOICE_TOOLS, tool_choice=ToolChoice.parse(text))
    await collect(make_provider(client, server.base_url), request)
    body = server.requests[0].json
    assert body["tool_choice"] == wire
    assert list(body).index("tool_choice") == list(body).index("tools") + 1


async def test_no_tool_choice_without_tools_or_without_a_choice(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    from soong_agent.ports.model import ToolChoice

    server.enqueue(text_response("a"), text_response("b"))
    provider = make_provider(client, server.base_url)
    # strict servers refuse tool_choice without tools ("only allowed when 'tools' are specified")
    await collect(provider, simple_request(tool_choice=ToolChoice("required")))
    await collect(provider, simple_request(tools=CHOICE_TOOLS))
    assert all("tool_choice" not in r.json for r in server.requests)


async def test_an_empty_event_stream_explains_the_likely_context_overflow(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    # llama.cpp's answer to a streamed prompt longer than n_ctx: 200, no event at all
    server.enqueue(raw_bytes_response([]))
    err = await failure(make_provider(client, server.base_url, retry=RetryPolicy(max_attempts=1)))
    assert err.kind == "transport"
    assert "without sending anything" in err.detail and "context_window" in err.detail


async def test_a_stream_cut_after_a_role_chunk_is_not_called_empty(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        raw_sse_response(['data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}', ""])
    )
    err = await failure(make_provider(client, server.base_url, retry=RetryPolicy(max_attempts=1)))
    assert err.detail == "stream ended before [DONE]"


async def test_a_lone_surrogate_in_a_request_is_written_out_not_a_crash(
    server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    """A lone surrogate that came past the run's boundaries (a hook's output, a mail) is sent
    written out by the one text rule: a byte of a file name as its \\xNN escape, any other as
    U+FFFD; the request is valid UTF-8 JSON the strict server takes."""
    server.enqueue(text_response("ok"))
    request = ModelRequest(
        system=[SystemPart("core", "file caf\udce9.txt")],
        messages=[user_text("odd \ud800 text")],
    )
    events = await collect(make_provider(client, server.base_url), request)
    assert isinstance(events[-1], StreamFinished)
    (sent,) = server.requests
    body = sent.body.decode("utf-8")  # valid UTF-8
    messages = sent.json["messages"]
    assert messages[0]["content"] == "file caf\\xe9.txt"
    assert messages[1]["content"] == "odd \ufffd text"
    assert "\\ud800" not in body
