"""OllamaChatProvider against a real loopback server speaking Ollama's /api/chat NDJSON."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from soong_agent.adapters.providers.ollama_chat import OllamaChatProvider
from soong_agent.adapters.providers.ollama_wire import classify_stream_error
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
from soong_agent.ports.model import ModelProvider, ModelRequest, SystemPart, ToolChoice, ToolSpec
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
from tests.support.fake_ollama import (
    FakeOllamaServer,
    ScriptedResponse,
    cut_stream_response,
    error_response,
    malformed_chunk_response,
    raw_bytes_response,
    raw_ndjson_response,
    stream_error_response,
    text_response,
    tool_call_response,
)

MODEL = "llama3.2"


@pytest.fixture
def server() -> Iterator[FakeOllamaServer]:
    with FakeOllamaServer() as srv:
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
    key: str | None = None,
    retry: RetryPolicy = POLICY,
    sleep: Sleeps | None = None,
    timeout_s: float = 10.0,
) -> OllamaChatProvider:
    return OllamaChatProvider(
        client=client,
        base_url=base_url,
        model=MODEL,
        api_key=lambda: key,
        retry=retry,
        timeout_s=timeout_s,
        sleep=sleep or Sleeps(),
        rand=lambda: 0.5,
    )


def simple_request(**kwargs: Any) -> ModelRequest:
    return ModelRequest(
        system=[SystemPart("core", "You are a test.")], messages=[user_text("hello")], **kwargs
    )


async def collect(provider: OllamaChatProvider, request: ModelRequest | None = None) -> list[Any]:
    return [e async for e in provider.stream(request or simple_request())]


async def failure(
    provider: OllamaChatProvider, request: ModelRequest | None = None
) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await collect(provider, request)
    return info.value


def texts(events: list[StreamEvent]) -> list[str]:
    return [e.text for e in events if isinstance(e, TextDelta)]


def calls(events: list[StreamEvent]) -> list[ToolCallBlock]:
    return [e.call for e in events if isinstance(e, ToolCallReady)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- streaming -------------------------------------------------------------------------------


async def test_is_a_model_provider_with_a_label(client: httpx.AsyncClient) -> None:
    provider = make_provider(client, "http://127.0.0.1:11434/")
    assert isinstance(provider, ModelProvider)
    assert provider.label == "ollama llama3.2 at http://127.0.0.1:11434"


async def test_text_streams_in_pieces_then_usage_then_finish(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("Hello, streaming world!", pieces=4))
    events = await collect(make_provider(client, server.base_url))
    assert texts(events) == ["Hello,", " strea", "ming w", "orld!"]
    assert events[-2:] == [
        UsageReported(Usage(input_tokens=11, output_tokens=7)),
        StreamFinished("end_turn"),
    ]
    [sent] = server.requests
    assert (sent.method, sent.path) == ("POST", "/api/chat")


async def test_usage_comes_from_the_eval_counts(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("hi", prompt_eval_count=1234, eval_count=56))
    events = await collect(make_provider(client, server.base_url))
    [usage] = [e.usage for e in events if isinstance(e, UsageReported)]
    assert usage == Usage(input_tokens=1234, output_tokens=56)


async def test_no_counts_means_no_usage_and_no_done_reason_means_end_turn(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("old server", usage=False, done_reason=None))
    events = await collect(make_provider(client, server.base_url))
    assert not [e for e in events if isinstance(e, UsageReported)]
    assert "".join(texts(events)) == "old server"
    assert events[-1] == StreamFinished("end_turn")


@pytest.mark.parametrize(
    ("done_reason", "stop"), [("length", "max_tokens"), ("load", "other"), ("stop", "end_turn")]
)
async def test_done_reason_maps_to_the_stop_reason(
    server: FakeOllamaServer, client: httpx.AsyncClient, done_reason: str, stop: str
) -> None:
    server.enqueue(text_response("cut short", done_reason=done_reason))
    events = await collect(make_provider(client, server.base_url))
    assert events[-1] == StreamFinished(stop)  # type: ignore[arg-type]


async def test_thinking_lines_become_thinking_deltas(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("42", thinking="Let me count.", pieces=2))
    events = await collect(make_provider(client, server.base_url))
    assert [e for e in events if isinstance(e, ThinkingDelta)] == [
        ThinkingDelta("Let me "),
        ThinkingDelta("count."),
    ]
    assert isinstance(events[0], ThinkingDelta)
    assert "".join(texts(events)) == "42"


async def test_a_whole_tool_call_becomes_json_text(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        tool_call_response(
            [("call_x1", "read_file", '{"path": "src/é.py", "start": 1, "opts": {"a": [1, 2]}}')],
            text="Let me look.",
        )
    )
    events = await collect(make_provider(client, server.base_url))
    assert "".join(texts(events)) == "Let me look."
    [call] = calls(events)
    assert call == ToolCallBlock(
        id="call_x1",
        name="read_file",
        arguments='{"path":"src/é.py","start":1,"opts":{"a":[1,2]}}',
    )
    assert isinstance(events[-2], UsageReported)
    assert events[-1] == StreamFinished("tool_use")


@pytest.mark.parametrize("one_line", [False, True])
async def test_two_tool_calls_in_one_turn_without_ids_get_unique_ids(
    server: FakeOllamaServer, client: httpx.AsyncClient, one_line: bool
) -> None:
    server.enqueue(
        tool_call_response(
            [("", "list_dir", ""), ("", "grep", '{"pattern": "def \\\\w+"}')], one_line=one_line
        )
    )
    events = await collect(make_provider(client, server.base_url))
    assert calls(events) == [
        ToolCallBlock(id="call_0", name="list_dir", arguments="{}"),
        ToolCallBlock(id="call_1", name="grep", arguments='{"pattern":"def \\\\w+"}'),
    ]
    assert events[-1] == StreamFinished("tool_use")


async def test_tool_call_ids_stay_unique_and_string_arguments_are_kept(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    def line(call: dict[str, Any]) -> str:
        message = {"role": "assistant", "content": "", "tool_calls": [call]}
        return json.dumps({"model": "m", "message": message, "done": False})

    server.enqueue(
        raw_ndjson_response(
            [
                line({"function": {"name": "a", "arguments": '{"x": 1}'}}),
                line({"id": "call_0", "function": {"name": "b", "arguments": {}}}),
                line({"id": "call_0", "function": {"name": "c"}}),
                '{"model":"m","message":{"role":"assistant","content":""},"done":true,'
                '"done_reason":"stop"}',
            ]
        )
    )
    events = await collect(make_provider(client, server.base_url))
    assert calls(events) == [
        ToolCallBlock(id="call_0", name="a", arguments='{"x": 1}'),
        ToolCallBlock(id="call_1", name="b", arguments="{}"),
        ToolCallBlock(id="call_2", name="c", arguments="{}"),
    ]


async def test_lines_split_anywhere_crlf_and_blank_lines(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    stream = (
        b'{"model":"m","message":{"role":"assistant","content":"caf\xc3\xa9 "},"done":false}\r\n'
        b"\r\n"
        b'{"model":"m","message":{"role":"assistant","content":"ok"},"done":false}\n'
        b'{"model":"m","message":{"role":"assistant","content":""},"done":true,'
        b'"done_reason":"stop","prompt_eval_count":3,"eval_count":2}\n'
    )
    # Cut the bytes at awkward places: inside a line, between CR and LF, inside a UTF-8 char.
    cuts = [5, stream.index(b"\xa9"), stream.index(b"\r\n") + 1, len(stream) - 3]
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    server.enqueue(raw_bytes_response(pieces).with_delay(0.01))
    events = await collect(make_provider(client, server.base_url))
    assert events == [
        TextDelta("café "),
        TextDelta("ok"),
        UsageReported(Usage(input_tokens=3, output_tokens=2)),
        StreamFinished("end_turn"),
    ]


async def test_a_plain_json_answer_is_read_as_one_line(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    body = json.dumps(
        {
            "model": MODEL,
            "message": {"role": "assistant", "content": "all at once\nwith a newline"},
            "done_reason": "stop",
            "done": True,
            "eval_count": 5,
        },
        indent=2,
    ).encode()
    server.enqueue(
        ScriptedResponse(
            headers=[("Content-Type", "application/json; charset=utf-8")],
            chunks=[body],
            framing="length",
        )
    )
    events = await collect(make_provider(client, server.base_url))
    assert events == [
        TextDelta("all at once\nwith a newline"),
        UsageReported(Usage(output_tokens=5)),
        StreamFinished("end_turn"),
    ]


async def test_connection_is_reused_between_calls(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("one"), text_response("two"))
    provider = make_provider(client, server.base_url)
    await collect(provider)
    await collect(provider)
    first, second = server.requests
    assert first.client_port == second.client_port


# --- the request -----------------------------------------------------------------------------


async def test_request_body_with_a_tool_result_round_trip(
    server: FakeOllamaServer, client: httpx.AsyncClient
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
                    ToolCallBlock(id="c2", name="list_dir", arguments=""),
                    ToolCallBlock(id="c3", name="read_file", arguments="{not json"),
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
    assert sent.headers["content-type"].startswith("application/json")
    assert "authorization" not in sent.headers
    body = sent.json
    assert body["model"] == MODEL
    assert body["stream"] is True
    assert body["options"] == {"num_predict": 256, "temperature": 0.2}
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
            "thinking": "hmm",  # api.Message's field: the model's template decides its use
            "tool_calls": [{"function": {"name": "read_file", "arguments": {"path": "a.txt"}}}],
        },
        {"role": "tool", "content": "A!", "tool_name": "read_file"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"function": {"name": "list_dir", "arguments": {}}},
                {"function": {"name": "read_file", "arguments": {}}},
            ],
        },
        {"role": "tool", "content": "a.txt\nb", "tool_name": "list_dir"},
        {"role": "tool", "content": "no", "tool_name": "read_file"},
    ]


async def test_minimal_body_has_no_optional_fields(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("ok"))
    await collect(
        make_provider(client, server.base_url), ModelRequest(system=[], messages=[user_text("hi")])
    )
    body = server.requests[0].json
    assert body == {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}


async def test_a_gateway_key_is_sent_as_bearer(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("ok"))
    await collect(make_provider(client, server.base_url, key="gw-secret-123"))
    assert server.requests[0].headers["authorization"] == "Bearer gw-secret-123"


async def test_the_key_is_read_lazily_and_a_missing_one_sends_nothing(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    reads: list[str] = []

    def no_key() -> str | None:
        reads.append("read")
        raise MissingSecretError(var="OLLAMA_KEY", user="model", source="config.toml: [model]")

    provider = OllamaChatProvider(
        client=client,
        base_url=server.base_url,
        model=MODEL,
        api_key=no_key,
        retry=POLICY,
        timeout_s=5,
    )
    stream = provider.stream(simple_request())
    assert reads == []
    with pytest.raises(MissingSecretError):
        await anext(stream)
    assert reads == ["read"]
    assert server.requests == []


# --- errors and retries ----------------------------------------------------------------------


async def test_an_error_line_mid_stream_restarts_the_answer(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        stream_error_response("llama runner process has terminated: signal: killed"),
        text_response("never served"),
    )
    seen = await collect(make_provider(client, server.base_url, sleep=Sleeps()))
    (notice,) = [e for e in seen if isinstance(e, RetryScheduled)]
    assert notice.restart and notice.kind == "server"
    assert "llama runner process has terminated" in notice.reason
    at = seen.index(notice)
    assert texts(seen[:at]) == ["Working", " on it"]
    assert "".join(texts(seen[at:])) == "never served"
    assert len(server.requests) == 2  # sent again; the caller discards the first part


async def test_error_line_before_any_event_is_classified_and_retried_when_transient(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        stream_error_response("unexpected EOF", text=""),
        stream_error_response("the input length exceeds the context length", text=""),
    )
    sleeps = Sleeps()
    err = await failure(make_provider(client, server.base_url, sleep=sleeps))
    assert err.kind == "context_too_long"
    assert len(sleeps.delays) == 1
    assert len(server.requests) == 2


async def test_server_error_then_success_is_retried_with_backoff(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        error_response(500, message="llama runner process has terminated"),
        error_response(503, message="server busy, please try again"),
        text_response("third time"),
    )
    sleeps = Sleeps()
    events = await collect(make_provider(client, server.base_url, sleep=sleeps))
    assert "".join(texts(events)) == "third time"
    assert sleeps.delays == [POLICY.delay(1, None, 0.5), POLICY.delay(2, None, 0.5)]
    assert len(server.requests) == 3


async def test_rate_limit_honours_retry_after(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        error_response(429, message="too many requests", headers={"retry-after": "2"}),
        text_response("after the wait"),
    )
    sleeps = Sleeps()
    events = await collect(make_provider(client, server.base_url, sleep=sleeps))
    assert "".join(texts(events)) == "after the wait"
    assert sleeps.delays == [2.0]


async def test_model_not_found_is_not_found_and_not_retried(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        error_response(404, message=f"model '{MODEL}' not found, try pulling it first"),
        text_response("never served"),
    )
    err = await failure(make_provider(client, server.base_url))
    assert err.kind == "not_found"
    assert err.status == 404
    assert not err.retryable
    assert err.detail == (
        f"model '{MODEL}' not found, try pulling it first (pull it first: `ollama pull {MODEL}`)"
    )
    assert len(server.requests) == 1


async def test_a_base_url_that_is_not_the_server_root_gets_a_hint(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    err = await failure(make_provider(client, server.base_url + "/v1"))
    assert err.kind == "not_found"
    assert "404 page not found" in err.detail
    assert "/v1/api/chat" in err.detail  # the URL really posted to
    assert "server root" in err.detail


async def test_unsupported_tools_is_bad_request(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        error_response(400, message="registry.ollama.ai/library/gemma:2b does not support tools")
    )
    err = await failure(make_provider(client, server.base_url))
    assert err.kind == "bad_request"
    assert "does not support tools" in err.detail


async def test_key_never_shows_in_errors(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    key = "gw-secret-0123456789"
    server.enqueue(error_response(401, message=f"bad token {key}"))
    err = await failure(make_provider(client, server.base_url, key=key))
    assert err.kind == "auth"
    assert key not in str(err)


async def test_connection_refused_says_ollama_is_not_running(
    client: httpx.AsyncClient,
) -> None:
    base_url = f"http://127.0.0.1:{free_port()}"
    sleeps = Sleeps()
    err = await failure(make_provider(client, base_url, sleep=sleeps))
    assert err.kind == "transport"
    assert err.detail == (
        f"Ollama is not running at {base_url} (connection refused); start it with `ollama serve`"
    )
    assert "\n" not in str(err)
    assert err.unreachable
    assert len(sleeps.delays) == 1  # nothing listens there: retried once, quickly


async def test_cut_stream_is_a_transport_error_when_stream_retries_are_off(
    server: FakeOllamaServer, client: httpx.AsyncClient
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


async def test_clean_close_without_the_final_line_is_a_transport_error(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(cut_stream_response("partial", framing="close"))
    err = await failure(make_provider(client, server.base_url, retry=NO_STREAM_RETRY))
    assert err.kind == "transport"
    assert "done" in err.detail


async def test_cut_before_any_event_is_retried(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(cut_stream_response(""), text_response("second try"))
    sleeps = Sleeps()
    events = await collect(make_provider(client, server.base_url, sleep=sleeps))
    assert "".join(texts(events)) == "second try"
    assert len(sleeps.delays) == 1


async def test_malformed_line_is_a_protocol_error(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(malformed_chunk_response(), text_response("never served"))
    err = await failure(make_provider(client, server.base_url))
    assert err.kind == "protocol"
    assert "malformed line" in err.detail
    assert '"content":"bro' in err.detail
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "line",
    [
        '["not", "an", "object"]',
        '{"model":"m","message":"text","done":false}',
        '{"model":"m","message":{"role":"assistant","tool_calls":[{"function":{}}]},"done":false}',
    ],
)
async def test_lines_of_the_wrong_shape_are_protocol_errors(
    server: FakeOllamaServer, client: httpx.AsyncClient, line: str
) -> None:
    server.enqueue(raw_ndjson_response([line]))
    err = await failure(make_provider(client, server.base_url))
    assert err.kind == "protocol"


async def test_read_timeout(server: FakeOllamaServer, client: httpx.AsyncClient) -> None:
    server.enqueue(text_response("slow " * 4, pieces=4).with_delay(1.0))
    retry = RetryPolicy(max_attempts=1)
    err = await failure(make_provider(client, server.base_url, retry=retry, timeout_s=0.2))
    assert err.kind == "timeout"


async def test_html_answer_is_a_protocol_error(
    server: FakeOllamaServer, client: httpx.AsyncClient
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


def test_stream_error_classification() -> None:
    assert classify_stream_error("model 'x' not found") == "bad_request"
    assert classify_stream_error("input exceeds the context length of 4096") == "context_too_long"
    assert classify_stream_error("prompt is too long") == "context_too_long"
    assert classify_stream_error("context canceled") == "server"
    assert classify_stream_error("llama runner process has terminated") == "server"


# --- health ----------------------------------------------------------------------------------


async def test_health_is_true_against_the_fake(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    assert await make_provider(client, server.base_url).health() is True
    [probe] = server.requests
    assert (probe.method, probe.path) == ("GET", "/")
    response = await client.get(server.base_url + "/")
    assert response.text == "Ollama is running"


async def test_health_is_false_against_a_closed_port(client: httpx.AsyncClient) -> None:
    assert await make_provider(client, f"http://127.0.0.1:{free_port()}").health() is False


async def test_health_is_false_when_root_is_not_ollama(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    assert await make_provider(client, server.base_url + "/elsewhere").health() is False


# --- cancellation ----------------------------------------------------------------------------


async def test_closing_early_does_not_hang_and_closes_the_connection(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("x" * 400, pieces=200).with_delay(0.01))
    stream = make_provider(client, server.base_url).stream(simple_request())
    first = await asyncio.wait_for(anext(stream), 5)
    assert isinstance(first, TextDelta)
    await asyncio.wait_for(stream.aclose(), 5)  # type: ignore[attr-defined]
    assert await asyncio.to_thread(server.wait_for_disconnect, 5.0)


async def test_breaking_out_of_the_loop_does_not_hang(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("z" * 400, pieces=200).with_delay(0.01), text_response("next"))
    provider = make_provider(client, server.base_url)

    async def first_only() -> StreamEvent:
        async with asyncio.timeout(5):
            stream = provider.stream(simple_request())
            try:
                async for event in stream:
                    return event
            finally:
                await stream.aclose()  # type: ignore[attr-defined]
        raise AssertionError("no event")

    assert isinstance(await first_only(), TextDelta)
    events = await asyncio.wait_for(collect(provider), 5)
    assert "".join(texts(events)) == "next"


async def test_cancelling_the_consumer_closes_the_connection(
    server: FakeOllamaServer, client: httpx.AsyncClient
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


# --- tool_choice (approximated: /api/chat has none) ------------------------------------------

CHOICE_TOOLS = [
    ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {}}),
    ToolSpec("list_dir", "List a folder.", {"type": "object", "properties": {}}),
]


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("auto", ["read_file", "list_dir"]),
        ("required", ["read_file", "list_dir"]),  # nothing can force a call
        ("none", None),  # no tools shown, none can be called
        ("list_dir", ["list_dir"]),  # only the named tool is shown
        ("grep", ["read_file", "list_dir"]),  # a name no tool has: the tools as usual
    ],
)
async def test_tool_choice_is_approximated_with_the_tools_sent(
    server: FakeOllamaServer, client: httpx.AsyncClient, text: str, names: list[str] | None
) -> None:
    server.enqueue(text_response("ok"))
    request = simple_request(tools=CHOICE_TOOLS, tool_choice=ToolChoice.parse(text))
    await collect(make_provider(client, server.base_url), request)
    body = server.chat_requests[0].json
    assert "tool_choice" not in body
    if names is None:
        assert "tools" not in body
    else:
        assert [t["function"]["name"] for t in body["tools"]] == names
    assert server.rejections == []


async def test_an_assistant_turn_with_only_thinking_is_left_out(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("ok"))
    history = [
        user_text("go"),
        Message(role="assistant", content=[ThinkingBlock(text="cut"), TextBlock(text="")]),
        user_text("go on"),
    ]
    await collect(make_provider(client, server.base_url), ModelRequest(system=[], messages=history))
    assert server.chat_requests[0].json["messages"] == [
        {"role": "user", "content": "go"},
        {"role": "user", "content": "go on"},
    ]
    assert server.rejections == []


async def test_a_request_the_strict_fake_refuses_is_a_bad_request_error(
    server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("never served"))
    request = simple_request(tools=[ToolSpec("bad", "Broken schema.", {"properties": []})])
    err = await failure(make_provider(client, server.base_url), request)
    assert err.kind == "bad_request"
    assert err.status == 400
    assert "cannot unmarshal array" in str(err)
    [rejection] = server.rejections
    assert rejection.request_index == 0
    assert server.pending == 1
