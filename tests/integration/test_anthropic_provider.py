"""AnthropicMessagesProvider against a real loopback server speaking the Messages stream."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from soong_agent.adapters.providers.anthropic_messages import AnthropicMessagesProvider
from soong_agent.adapters.providers.calls import arguments_object as tool_input
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.ports.errors import MissingSecretError, ProviderError
from soong_agent.ports.messages import (
    ContentBlock,
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
from tests.support.fake_anthropic import (
    FakeAnthropicServer,
    ScriptedResponse,
    cut_stream_response,
    error_response,
    events_response,
    malformed_chunk_response,
    raw_bytes_response,
    raw_sse_response,
    redacted_thinking_response,
    stream_error_response,
    text_response,
    thinking_response,
    tool_call_response,
)

KEY = "sk-ant-test-0123456789abcdef"


@pytest.fixture
def server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as srv:
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


CACHE, EPHEMERAL = "cache_control", {"type": "ephemeral"}
"""A cache breakpoint (a key and its value) on a block of the expected bodies."""
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
    **kwargs: Any,
) -> AnthropicMessagesProvider:
    return AnthropicMessagesProvider(
        client=client,
        base_url=base_url,
        model="claude-test",
        api_key=lambda: key,
        retry=retry,
        timeout_s=timeout_s,
        sleep=sleep or Sleeps(),
        rand=lambda: 0.5,
        **kwargs,
    )


def simple_request(**kwargs: Any) -> ModelRequest:
    return ModelRequest(
        system=[SystemPart("core", "You are a test.")], messages=[user_text("hello")], **kwargs
    )


async def collect(
    provider: AnthropicMessagesProvider, request: ModelRequest | None = None
) -> list[StreamEvent]:
    return [e async for e in provider.stream(request or simple_request())]


async def failure(
    provider: AnthropicMessagesProvider, request: ModelRequest | None = None
) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await collect(provider, request)
    return info.value


def texts(events: list[StreamEvent]) -> list[str]:
    return [e.text for e in events if isinstance(e, TextDelta)]


def calls(events: list[StreamEvent]) -> list[ToolCallBlock]:
    return [e.call for e in events if isinstance(e, ToolCallReady)]


def assistant_message(events: list[StreamEvent]) -> Message:
    """The assistant message the run loop would keep from these events (thinking, text, calls)."""
    closed: list[ContentBlock] = []
    thinking: list[str] = []
    for e in events:
        if isinstance(e, ThinkingDelta):
            if e.redacted is not None:
                closed.append(ThinkingBlock(text="", redacted=e.redacted))
                continue
            thinking.append(e.text)
            if e.signature is not None:
                closed.append(ThinkingBlock(text="".join(thinking), signature=e.signature))
                thinking = []
    text = "".join(texts(events))
    content: list[ContentBlock] = [*closed, TextBlock(text=text), *calls(events)]
    return Message(role="assistant", content=content)


# --- the fixture speaks the real event order -------------------------------------------------


def event_names(response: ScriptedResponse) -> list[str]:
    body = b"".join(response.chunks).decode()
    return re.findall(r"^event: (\w+)$", body, flags=re.MULTILINE)


def test_fake_streams_in_the_api_event_order() -> None:
    assert event_names(text_response("abc", pieces=2)) == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    names = event_names(tool_call_response([("toolu_1", "ls", "{}")], fragments=1, text="hi"))
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names.count("content_block_start") == names.count("content_block_stop") == 2
    assert names[-2:] == ["message_delta", "message_stop"]


# --- streaming -------------------------------------------------------------------------------


async def test_is_a_model_provider_with_a_label(client: httpx.AsyncClient) -> None:
    provider = make_provider(client, "http://127.0.0.1:8000/")
    assert isinstance(provider, ModelProvider)
    assert provider.label == "anthropic claude-test at http://127.0.0.1:8000"


async def test_text_streams_in_pieces_then_usage_then_finish(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("Hello, streaming world!", pieces=4))
    events = await collect(make_provider(client, server.base_url))
    assert events == [
        TextDelta("Hello,"),
        TextDelta(" strea"),
        TextDelta("ming w"),
        TextDelta("orld!"),
        UsageReported(Usage(input_tokens=11, output_tokens=7)),
        StreamFinished("end_turn"),
    ]
    assert server.requests[0].path == "/v1/messages"


async def test_base_url_that_names_v1_is_not_doubled(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("ok"))
    await collect(make_provider(client, server.base_url + "/v1"))
    assert server.requests[0].path == "/v1/messages"


async def test_usage_with_cache_read_and_write(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        text_response("hi", input_tokens=12, output_tokens=30, cache_read=4096, cache_write=900)
    )
    events = await collect(make_provider(client, server.base_url))
    [usage] = [e.usage for e in events if isinstance(e, UsageReported)]
    assert usage == Usage(
        input_tokens=12, output_tokens=30, cache_read_tokens=4096, cache_write_tokens=900
    )
    assert isinstance(events[-2], UsageReported)


async def test_cumulative_usage_in_message_delta_wins(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        events_response(
            [
                {
                    "type": "message_start",
                    "message": {"id": "msg_1", "usage": {"input_tokens": 5, "output_tokens": 1}},
                },
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}},
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": "x"},
                },
                {"type": "content_block_stop", "index": 0},
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {
                        "input_tokens": 9,
                        "cache_read_input_tokens": 100,
                        "cache_creation_input_tokens": None,
                        "output_tokens": 3,
                    },
                },
                {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 4}},
                {"type": "message_stop"},
            ]
        )
    )
    events = await collect(make_provider(client, server.base_url))
    assert events == [
        TextDelta("x"),
        UsageReported(Usage(input_tokens=9, output_tokens=4, cache_read_tokens=100)),
        StreamFinished("end_turn"),
    ]


async def test_missing_usage_reports_none(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("no usage here", usage=False))
    events = await collect(make_provider(client, server.base_url))
    assert not [e for e in events if isinstance(e, UsageReported)]
    assert "".join(texts(events)) == "no usage here"
    assert events[-1] == StreamFinished("end_turn")


@pytest.mark.parametrize(
    ("stop_reason", "expected"),
    [
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "end_turn"),
        ("refusal", "content_filter"),
        ("pause_turn", "other"),
    ],
)
async def test_stop_reasons(
    server: FakeAnthropicServer, client: httpx.AsyncClient, stop_reason: str, expected: str
) -> None:
    server.enqueue(text_response("cut short", stop_reason=stop_reason))
    events = await collect(make_provider(client, server.base_url))
    assert events[-1] == StreamFinished(expected)  # type: ignore[arg-type]


async def test_tool_call_with_fragmented_input(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    arguments = '{"path": "src/main.py", "start": 1, "end": 40, "note": "caf\u00e9 \\"q\\""}'
    server.enqueue(tool_call_response([("toolu_01A", "read_file", arguments)], fragments=7))
    events = await collect(make_provider(client, server.base_url))
    assert events[0] == ToolCallReady(
        ToolCallBlock(id="toolu_01A", name="read_file", arguments=arguments)
    )
    assert isinstance(events[1], UsageReported)
    assert events[2] == StreamFinished("tool_use")


async def test_two_parallel_tool_use_blocks_after_text(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    first = ("toolu_a", "read_file", '{"path": "a.txt"}')
    second = ("toolu_b", "grep", '{"pattern": "def \\\\w+", "glob": "**/*.py"}')
    server.enqueue(tool_call_response([first, second], fragments=5, text="Let me look."))
    events = await collect(make_provider(client, server.base_url))
    assert "".join(texts(events)) == "Let me look."
    assert calls(events) == [
        ToolCallBlock(id=first[0], name=first[1], arguments=first[2]),
        ToolCallBlock(id=second[0], name=second[1], arguments=second[2]),
    ]
    assert events[-1] == StreamFinished("tool_use")


async def test_tool_use_without_input_deltas(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        events_response(
            [
                {"type": "message_start", "message": {"id": "msg_1"}},
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "tool_use", "id": "t1", "name": "ls", "input": {}},
                },
                {"type": "content_block_stop", "index": 0},
                {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {
                        "type": "tool_use",
                        "id": "t2",
                        "name": "glob",
                        "input": {"p": "*.md"},
                    },
                },
                {"type": "content_block_stop", "index": 1},
                {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
                {"type": "message_stop"},
            ]
        )
    )
    events = await collect(make_provider(client, server.base_url))
    assert calls(events) == [
        ToolCallBlock(id="t1", name="ls", arguments="{}"),
        ToolCallBlock(id="t2", name="glob", arguments='{"p": "*.md"}'),
    ]


async def test_server_tool_blocks_are_skipped(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        events_response(
            [
                {"type": "message_start", "message": {"id": "msg_1"}},
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "x"},
                },
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": '{"q": 1}'},
                },
                {"type": "content_block_stop", "index": 0},
                {"type": "content_block_start", "index": 1, "content_block": {"type": "text"}},
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "text_delta", "text": "found"},
                },
                {"type": "content_block_stop", "index": 1},
                {"type": "message_delta", "delta": {"stop_reason": "end_turn"}},
                {"type": "message_stop"},
            ]
        )
    )
    events = await collect(make_provider(client, server.base_url))
    assert events == [TextDelta("found"), StreamFinished("end_turn")]


async def test_thinking_and_signature_round_trip(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    signature = "EqQBCkgIARAB/sig+==" * 3
    server.enqueue(
        thinking_response(
            "The user wants a listing.",
            "Listing now.",
            signature=signature,
            calls=[("toolu_1", "list_dir", '{"path": "."}')],
        ),
        text_response("Two files."),
    )
    provider = make_provider(client, server.base_url, thinking_budget_tokens=2048)
    request = simple_request(max_output_tokens=1500, temperature=0.7)
    events = await collect(provider, request)
    thinking = [e for e in events if isinstance(e, ThinkingDelta)]
    assert "".join(e.text for e in thinking) == "The user wants a listing."
    assert thinking[-1] == ThinkingDelta("", signature=signature)
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert events.index(thinking[-1]) < first_text

    first = server.requests[0].json
    assert first["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert first["max_tokens"] == 2048 + 1024  # raised above the budget
    assert "temperature" not in first

    history = [
        user_text("hello"),
        assistant_message(events),
        Message(
            role="tool",
            content=[ToolResultBlock(call_id="toolu_1", name="list_dir", content="a\nb")],
        ),
    ]
    await collect(provider, ModelRequest(system=[], messages=history))
    assistant = server.requests[1].json["messages"][1]
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "The user wants a listing.", "signature": signature},
            {"type": "text", "text": "Listing now."},
            {"type": "tool_use", "id": "toolu_1", "name": "list_dir", "input": {"path": "."}},
        ],
    }


async def test_redacted_thinking_round_trip(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    data = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP+/=="
    server.enqueue(redacted_thinking_response(data, "Answer."), text_response("again"))
    provider = make_provider(client, server.base_url, thinking_budget_tokens=1024)
    events = await collect(provider)
    assert events[0] == ThinkingDelta("", redacted=data)
    assert "".join(texts(events)) == "Answer."

    history = [user_text("q"), assistant_message(events), user_text("and?")]
    await collect(provider, ModelRequest(system=[], messages=history))
    assert server.requests[1].json["messages"][1]["content"] == [
        {"type": "redacted_thinking", "data": data},
        {"type": "text", "text": "Answer."},
    ]


async def test_ping_unknown_events_and_bytes_split_anywhere(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    stream = (
        b": comment\r\n\r\n"
        b'event: message_start\r\ndata: {"type":"message_start","message":{"id":"m"}}\r\n\r\n'
        b'event: ping\r\ndata: {"type": "ping"}\r\n\r\n'
        b'event: content_block_start\r\ndata: {"type":"content_block_start","index":0,'
        b'"content_block":{"type":"text","text":""}}\r\n\r\n'
        b'event: content_block_delta\r\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"caf\xc3\xa9 "}}\r\n\r\n'
        b'event: content_block_delta\r\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"citations_delta","citation":{}}}\r\n\r\n'
        b'event: brand_new\r\ndata: {"type":"brand_new","x":1}\r\n\r\n'
        b'event: content_block_delta\r\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"text_delta","text":"ok"}}\r\n\r\n'
        b'event: content_block_stop\r\ndata: {"type":"content_block_stop","index":0}\r\n\r\n'
        b'event: message_stop\r\ndata: {"type":"message_stop"}\r\n\r\n'
    )
    # cut at awkward places: inside a line, between CR and LF, inside a UTF-8 character
    cuts = [5, 40, stream.index(b"\r\n\r\nevent: ping") + 1, stream.index(b"\xa9")]
    cuts.append(len(stream) - 3)
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    server.enqueue(raw_bytes_response(pieces).with_delay(0.01))
    events = await collect(make_provider(client, server.base_url))
    assert events == [TextDelta("café "), TextDelta("ok"), StreamFinished("end_turn")]


async def test_connection_is_reused_between_calls(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("one"), text_response("two"))
    provider = make_provider(client, server.base_url)
    await collect(provider)
    await collect(provider)
    first, second = server.requests
    assert first.client_port == second.client_port


# --- the request -----------------------------------------------------------------------------


async def test_request_headers_and_body(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("done"))
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    request = ModelRequest(
        system=[
            SystemPart("core", "You are soong."),
            SystemPart("env", "cwd: /p", stable=False),
            SystemPart("tools", "Use tools."),
            SystemPart("date", "today", stable=False),
            SystemPart("empty", ""),
        ],
        messages=[
            user_text("read a.txt and list the dir"),
            Message(
                role="assistant",
                content=[
                    ThinkingBlock(text="from another provider"),
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
                    TextBlock(text=""),
                    ToolCallBlock(id="c2", name="list_dir", arguments="not json"),
                    ToolCallBlock(id="c3", name="read_file", arguments="[1, 2]"),
                ],
            ),
            Message(
                role="tool",
                content=[
                    ToolResultBlock(call_id="c2", name="list_dir", content="a.txt\nb"),
                    ToolResultBlock(call_id="c3", name="read_file", content="no", is_error=True),
                ],
            ),
            user_text("also check b"),
            user_text("please"),
            Message(role="assistant", content=[TextBlock(text="  ")]),  # nothing to send
            user_text("thanks"),
        ],
        tools=[
            ToolSpec("read_file", "Read a file.", schema),
            ToolSpec("list_dir", "List a folder.", {}),
        ],
        max_output_tokens=256,
        temperature=0.2,
    )
    await collect(make_provider(client, server.base_url), request)
    [sent] = server.requests
    assert sent.method == "POST"
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["accept"] == "text/event-stream"
    assert "authorization" not in sent.headers
    body = sent.json
    assert list(body) == [
        "model",
        "max_tokens",
        "stream",
        "system",
        "messages",
        "tools",
        "temperature",
    ]
    assert body["model"] == "claude-test"
    assert body["stream"] is True
    assert body["max_tokens"] == 256
    assert body["temperature"] == 0.2
    assert body["system"] == [
        {
            "type": "text",
            "text": "You are soong.\n\nUse tools.",
            "cache_control": {"type": "ephemeral"},
        },
        {"type": "text", "text": "cwd: /p\n\ntoday"},
    ]
    assert body["tools"] == [
        {"name": "read_file", "description": "Read a file.", "input_schema": schema},
        {
            "name": "list_dir",
            "description": "List a folder.",
            "input_schema": {"type": "object", "properties": {}},
            "cache_control": {"type": "ephemeral"},
        },
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "read a.txt and list the dir"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Sure."},
                {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a.txt"}},
            ],
        },
        {
            "role": "user",
            "content": [
                # the breakpoint the previous request wrote its prefix at (the last but one)
                {"type": "tool_result", "tool_use_id": "c1", "content": "A!", CACHE: EPHEMERAL}
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "c2", "name": "list_dir", "input": {}},
                {"type": "tool_use", "id": "c3", "name": "read_file", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c2", "content": "a.txt\nb"},
                {"type": "tool_result", "tool_use_id": "c3", "content": "no", "is_error": True},
                {"type": "text", "text": "also check b"},
                {"type": "text", "text": "please"},
                {"type": "text", "text": "thanks", CACHE: EPHEMERAL},  # the newest: written
            ],
        },
    ]


async def test_minimal_body_and_default_max_tokens(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("ok"))
    provider = make_provider(client, server.base_url, max_output_tokens=4000)
    await collect(provider, ModelRequest(system=[], messages=[user_text("hi")]))
    body = server.requests[0].json
    assert body == {
        "model": "claude-test",
        "max_tokens": 4000,
        "stream": True,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi", CACHE: EPHEMERAL}]}
        ],
    }


async def test_thinking_budget_below_max_tokens_keeps_max_tokens(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("ok"))
    await collect(make_provider(client, server.base_url, thinking_budget_tokens=1024))
    body = server.requests[0].json
    assert body["max_tokens"] == 8192
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}


async def test_tool_results_are_put_before_text_in_a_merged_user_turn(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("ok"))
    request = ModelRequest(
        system=[],
        messages=[
            user_text("go"),
            Message(role="assistant", content=[ToolCallBlock(id="t", name="ls", arguments="")]),
            user_text("(interrupted)"),
            Message(role="tool", content=[ToolResultBlock(call_id="t", name="ls", content="")]),
        ],
    )
    await collect(make_provider(client, server.base_url), request)
    assert server.requests[0].json["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t"},
            {"type": "text", "text": "(interrupted)", CACHE: EPHEMERAL},
        ],
    }


@pytest.mark.parametrize("key", [None, ""])
async def test_no_api_key_header_without_a_key(
    server: FakeAnthropicServer, client: httpx.AsyncClient, key: str | None
) -> None:
    server.enqueue(text_response("ok"))
    await collect(make_provider(client, server.base_url, key=key))
    assert "x-api-key" not in server.requests[0].headers


async def test_missing_secret_propagates_and_sends_nothing(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    def no_key() -> str | None:
        raise MissingSecretError(
            var="ANTHROPIC_API_KEY", user="model", source="config.toml: [model]"
        )

    provider = AnthropicMessagesProvider(
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


def test_tool_input_never_crashes() -> None:
    assert tool_input('{"a": 1}') == {"a": 1}
    assert tool_input("") == {}
    assert tool_input("{") == {}
    assert tool_input('"text"') == {}
    assert tool_input("null") == {}


# --- errors and retries ----------------------------------------------------------------------


async def test_stream_error_before_any_event_is_retried(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(stream_error_response("overloaded_error", "Overloaded"), text_response("ok"))
    sleeps = Sleeps()
    events = await collect(make_provider(client, server.base_url, sleep=sleeps))
    assert "".join(texts(events)) == "ok"
    assert sleeps.delays == [POLICY.delay(1, None, 0.5)]
    assert len(server.requests) == 2


async def test_a_transient_stream_error_after_text_restarts_the_answer(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        stream_error_response("overloaded_error", "Overloaded", text="partial answer"),
        text_response("second answer"),
    )
    sleeps = Sleeps()
    seen = await collect(make_provider(client, server.base_url, sleep=sleeps))
    (notice,) = [e for e in seen if isinstance(e, RetryScheduled)]
    assert notice.restart and notice.kind == "overloaded" and "Overloaded" in notice.reason
    at = seen.index(notice)
    assert "".join(texts(seen[:at])) == "partial answer"
    assert "".join(texts(seen[at:])) == "second answer"
    assert len(sleeps.delays) == 1
    assert len(server.requests) == 2


async def test_a_stream_error_after_text_is_raised_when_stream_retries_are_off(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(stream_error_response("overloaded_error", "Overloaded", text="partial answer"))
    seen: list[StreamEvent] = []
    with pytest.raises(ProviderError) as info:
        async for event in make_provider(client, server.base_url, retry=NO_STREAM_RETRY).stream(
            simple_request()
        ):
            seen.append(event)
    assert info.value.kind == "overloaded"
    assert server.base_url in str(info.value)
    assert "".join(texts(seen)) == "partial answer"
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("type_", "message", "kind"),
    [
        ("overloaded_error", "Overloaded", "overloaded"),
        ("rate_limit_error", "Number of request tokens has exceeded your limit", "rate_limit"),
        ("api_error", "Internal server error", "server"),
        ("authentication_error", "invalid x-api-key", "auth"),
        ("permission_error", "not allowed", "auth"),
        (
            "invalid_request_error",
            "prompt is too long: 208310 tokens > 200000 maximum",
            "context_too_long",
        ),
        ("invalid_request_error", "messages.1: unexpected tool_use_id", "bad_request"),
        ("something_new", "who knows", "server"),
    ],
)
async def test_stream_error_kinds(
    server: FakeAnthropicServer, client: httpx.AsyncClient, type_: str, message: str, kind: str
) -> None:
    server.enqueue(stream_error_response(type_, message))
    err = await failure(make_provider(client, server.base_url, retry=RetryPolicy(max_attempts=1)))
    assert err.kind == kind
    assert message in err.detail


@pytest.mark.parametrize(
    ("headers", "expected"), [({"retry-after": "2"}, 2.0), ({"retry-after-ms": "1500"}, 1.5)]
)
async def test_rate_limit_honours_retry_after_then_succeeds(
    server: FakeAnthropicServer,
    client: httpx.AsyncClient,
    headers: dict[str, str],
    expected: float,
) -> None:
    server.enqueue(
        error_response(429, message="Rate limited", headers=headers),
        text_response("after the wait"),
    )
    sleeps = Sleeps()
    events = await collect(make_provider(client, server.base_url, sleep=sleeps))
    assert "".join(texts(events)) == "after the wait"
    assert sleeps.delays == [expected]
    assert len(server.requests) == 2


async def test_overloaded_529_then_success(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(error_response(529, message="Overloaded"), text_response("second try"))
    sleeps = Sleeps()
    events = await collect(make_provider(client, server.base_url, sleep=sleeps))
    assert "".join(texts(events)) == "second try"
    assert sleeps.delays == [POLICY.delay(1, None, 0.5)]


async def test_retries_stop_at_max_attempts(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(error_response(500), error_response(529), error_response(503))
    sleeps = Sleeps()
    err = await failure(make_provider(client, server.base_url, sleep=sleeps))
    assert err.kind == "server"
    assert err.status == 503
    assert len(server.requests) == 3
    assert sleeps.delays == [POLICY.delay(1, None, 0.5), POLICY.delay(2, None, 0.5)]


async def test_auth_error_is_not_retried_and_never_shows_the_key(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        error_response(401, message=f"invalid x-api-key {KEY}"), text_response("never served")
    )
    err = await failure(make_provider(client, server.base_url))
    assert err.kind == "auth"
    assert err.status == 401
    assert not err.retryable
    assert KEY not in str(err)
    assert "invalid x-api-key" in str(err)
    assert "\n" not in str(err)
    assert server.base_url in str(err)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "message",
    [
        "prompt is too long: 208310 tokens > 200000 maximum",
        "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000, "
        "decrease input length or `max_tokens` and try again",
    ],
)
async def test_prompt_too_long_is_context_too_long(
    server: FakeAnthropicServer, client: httpx.AsyncClient, message: str
) -> None:
    server.enqueue(error_response(400, message=message), text_response("never served"))
    err = await failure(make_provider(client, server.base_url))
    assert err.kind == "context_too_long"
    assert err.status == 400
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (400, "max_tokens: 100000 > 64000, which is the maximum allowed", "bad_request"),
        (404, "model: claude-nope", "not_found"),
        (413, "Request exceeds the maximum allowed number of bytes.", "bad_request"),
        (403, "Your API key does not have permission", "auth"),
    ],
)
async def test_other_client_errors_are_not_retried(
    server: FakeAnthropicServer, client: httpx.AsyncClient, status: int, message: str, kind: str
) -> None:
    server.enqueue(error_response(status, message=message), text_response("never served"))
    err = await failure(make_provider(client, server.base_url))
    assert err.kind == kind
    assert message in err.detail
    assert len(server.requests) == 1


async def test_cut_stream_after_text_is_transport_without_retry_when_stream_retries_are_off(
    server: FakeAnthropicServer, client: httpx.AsyncClient
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


async def test_clean_close_without_message_stop_is_transport(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(cut_stream_response("partial", framing="close"))
    err = await failure(make_provider(client, server.base_url, retry=NO_STREAM_RETRY))
    assert err.kind == "transport"
    assert "message_stop" in err.detail


async def test_cut_before_any_event_is_retried(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(cut_stream_response(""), text_response("second try"))
    sleeps = Sleeps()
    events = await collect(make_provider(client, server.base_url, sleep=sleeps))
    assert "".join(texts(events)) == "second try"
    assert len(sleeps.delays) == 1


async def test_malformed_data_is_a_protocol_error(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(malformed_chunk_response(), text_response("never served"))
    err = await failure(make_provider(client, server.base_url))
    assert err.kind == "protocol"
    assert "content_block_start" in err.detail
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "line",
    [
        'data: {"type":"content_block_delta","index":3,'
        '"delta":{"type":"input_json_delta","partial_json":"{}"}}',
        'data: {"type":"content_block_delta","index":0,"delta":"text"}',
        'data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use"}}',
        "data: [1, 2]",
    ],
)
async def test_events_of_the_wrong_shape_are_protocol_errors(
    server: FakeAnthropicServer, client: httpx.AsyncClient, line: str
) -> None:
    server.enqueue(
        raw_sse_response(
            ["event: message_start", 'data: {"type":"message_start","message":{}}', "", line, ""]
        )
    )
    err = await failure(make_provider(client, server.base_url))
    assert err.kind == "protocol"


async def test_a_non_streaming_answer_is_a_protocol_error(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(
        ScriptedResponse(
            headers=[("Content-Type", "application/json")],
            chunks=[b'{"id":"msg_1","type":"message","content":[]}'],
            framing="length",
        )
    )
    err = await failure(make_provider(client, server.base_url))
    assert err.kind == "protocol"
    assert "msg_1" in err.detail
    assert len(server.requests) == 1


async def test_connection_refused_is_transport_and_names_the_url(
    client: httpx.AsyncClient,
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}"
    sleeps = Sleeps()
    err = await failure(make_provider(client, base_url, sleep=sleeps))
    assert err.kind == "transport"
    assert base_url in str(err)
    assert str(err).startswith("anthropic at ")
    assert err.unreachable
    assert len(sleeps.delays) == 1  # nothing listens there: retried once, quickly


async def test_read_timeout(server: FakeAnthropicServer, client: httpx.AsyncClient) -> None:
    server.enqueue(text_response("slow " * 4, pieces=4).with_delay(1.0))
    retry = RetryPolicy(max_attempts=1)
    err = await failure(make_provider(client, server.base_url, retry=retry, timeout_s=0.2))
    assert err.kind == "timeout"


async def test_unknown_routes_answer_404(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    err = await failure(make_provider(client, server.base_url, retry=RetryPolicy(max_attempts=1)))
    assert err.kind == "server"
    assert "no scripted response left" in err.detail
    response = await client.get(server.base_url + "/v1/models")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"


# --- cancellation ----------------------------------------------------------------------------


async def test_closing_early_closes_the_connection(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("x" * 400, pieces=200).with_delay(0.01))
    stream = make_provider(client, server.base_url).stream(simple_request())
    first = await anext(stream)
    assert isinstance(first, TextDelta)
    await asyncio.wait_for(stream.aclose(), 5)  # type: ignore[attr-defined]
    assert await asyncio.to_thread(server.wait_for_disconnect, 5.0)


async def test_cancelling_the_consumer_closes_the_connection(
    server: FakeAnthropicServer, client: httpx.AsyncClient
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


# --- tool_choice -----------------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}
TOOLS = [ToolSpec("read_file", "Read a file.", SCHEMA), ToolSpec("list_dir", "List.", SCHEMA)]
SIGNATURE = "EqQBCkgIARAB/sig+=="


@pytest.mark.parametrize(
    ("text", "wire"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        ("read_file", {"type": "tool", "name": "read_file"}),
    ],
)
async def test_tool_choice_in_the_messages_shape(
    server: FakeAnthropicServer, client: httpx.AsyncClient, text: str, wire: dict[str, str]
) -> None:
    server.enqueue(text_response("ok"))
    request = simple_request(tools=TOOLS, tool_choice=ToolChoice.parse(text))
    await collect(make_provider(client, server.base_url), request)
    body = server.requests[0].json
    assert body["tool_choice"] == wire
    assert list(body).index("tool_choice") == list(body).index("tools") + 1
    assert server.rejections == []


async def test_no_tool_choice_without_tools_or_without_a_choice(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("a"), text_response("b"))
    provider = make_provider(client, server.base_url)
    await collect(provider, simple_request(tool_choice=ToolChoice("required")))
    await collect(provider, simple_request(tools=TOOLS))
    assert all("tool_choice" not in r.json for r in server.requests)


@pytest.mark.parametrize("text", ["required", "read_file"])
async def test_forced_tool_use_leaves_thinking_out_of_that_request(
    server: FakeAnthropicServer, client: httpx.AsyncClient, text: str
) -> None:
    server.enqueue(tool_call_response([("toolu_1", "read_file", '{"path": "a"}')]))
    server.enqueue(text_response("A says hi."))
    provider = make_provider(client, server.base_url, thinking_budget_tokens=2048)
    request = simple_request(
        tools=TOOLS, tool_choice=ToolChoice.parse(text), temperature=0.3, max_output_tokens=500
    )
    events = await collect(provider, request)
    forced = server.requests[0].json
    assert "thinking" not in forced
    assert forced["temperature"] == 0.3
    assert forced["max_tokens"] == 500  # not raised for a budget that is not sent
    assert forced["tool_choice"]["type"] in ("any", "tool")

    # the tool loop that follows: its assistant turn has no thinking block to send back, so
    # thinking stays off until the loop ends (the API requires that block otherwise)
    history = [
        user_text("hello"),
        assistant_message(events),
        Message(
            role="tool",
            content=[ToolResultBlock(call_id="toolu_1", name="read_file", content="hi")],
        ),
    ]
    await collect(provider, ModelRequest(system=[], messages=history, tools=TOOLS))
    assert "thinking" not in server.requests[1].json
    assert server.rejections == []


@pytest.mark.parametrize("text", ["auto", "none"])
async def test_auto_and_none_keep_thinking(
    server: FakeAnthropicServer, client: httpx.AsyncClient, text: str
) -> None:
    server.enqueue(text_response("ok"))
    provider = make_provider(client, server.base_url, thinking_budget_tokens=2048)
    await collect(provider, simple_request(tools=TOOLS, tool_choice=ToolChoice.parse(text)))
    body = server.requests[0].json
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["tool_choice"] == {"type": text}
    assert server.rejections == []


# --- bodies a strict server accepts ----------------------------------------------------------


async def sent_messages(
    server: FakeAnthropicServer,
    client: httpx.AsyncClient,
    messages: list[Message],
    **kwargs: Any,
) -> dict[str, Any]:
    """The body sent for `messages`, after checking the strict fake accepted it."""
    server.enqueue(text_response("ok"))
    request = ModelRequest(system=[], messages=messages, tools=TOOLS)
    await collect(make_provider(client, server.base_url, **kwargs), request)
    assert server.rejections == [], server.rejections
    body: dict[str, Any] = server.requests[-1].json
    return body


def call(call_id: str, name: str = "read_file", arguments: str = "{}") -> Message:
    return Message(
        role="assistant", content=[ToolCallBlock(id=call_id, name=name, arguments=arguments)]
    )


def result(call_id: str, content: str, *, is_error: bool = False) -> Message:
    block = ToolResultBlock(call_id=call_id, name="read_file", content=content, is_error=is_error)
    return Message(role="tool", content=[block])


async def test_an_empty_error_result_gets_content_and_blank_content_is_left_out(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    history = [user_text("go"), call("t1"), result("t1", "", is_error=True)]
    history += [call("t2"), result("t2", " \n ")]
    body = await sent_messages(server, client, history)
    assert body["messages"][2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "t1",
            "content": "the tool failed without a message",
            "is_error": True,
            CACHE: EPHEMERAL,
        }
    ]
    assert body["messages"][4]["content"] == [
        {"type": "tool_result", "tool_use_id": "t2", CACHE: EPHEMERAL}
    ]


async def test_foreign_call_ids_are_rewritten_on_the_call_and_its_result(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    history = [user_text("go"), call("functions.read_file:0"), result("functions.read_file:0", "x")]
    body = await sent_messages(server, client, history)
    assert body["messages"][1]["content"][0]["id"] == "functions_read_file_0"
    assert body["messages"][2]["content"][0]["tool_use_id"] == "functions_read_file_0"


async def test_a_call_without_result_gets_one_and_a_result_without_call_becomes_text(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    history = [
        user_text("go"),
        result("lost", "old output"),
        call("t1"),
        user_text("never mind"),
    ]
    body = await sent_messages(server, client, history)
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                # results open a user turn when turns merge; this one then became text
                {"type": "text", "text": "[result of the earlier tool call lost]\nold output"},
                {"type": "text", "text": "go", CACHE: EPHEMERAL},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": "no result was recorded for this tool call",
                    "is_error": True,
                },
                {"type": "text", "text": "never mind", CACHE: EPHEMERAL},
            ],
        },
    ]


async def test_a_turn_cancelled_after_its_thinking_is_left_out(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    cancelled = Message(
        role="assistant",
        content=[ThinkingBlock(text="Let me", signature=SIGNATURE), ThinkingBlock(text="partial")],
    )
    history = [user_text("go"), cancelled, user_text("go on")]
    for budget in (None, 2048):
        body = await sent_messages(server, client, history, thinking_budget_tokens=budget)
        assert body["messages"] == [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "go"},
                    {"type": "text", "text": "go on", CACHE: EPHEMERAL},
                ],
            }
        ]


async def test_thinking_blocks_go_back_only_with_thinking_enabled(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    answered = Message(
        role="assistant",
        content=[ThinkingBlock(text="hm", signature=SIGNATURE), TextBlock(text="Done.")],
    )
    history = [user_text("go"), answered, user_text("thanks")]
    body = await sent_messages(server, client, history, thinking_budget_tokens=2048)
    assert body["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "hm",
        "signature": SIGNATURE,
    }
    body = await sent_messages(server, client, history)
    assert body["messages"][1]["content"] == [{"type": "text", "text": "Done."}]


async def test_a_history_that_starts_with_the_assistant_gets_a_user_turn_first(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    history = [Message(role="assistant", content=[TextBlock(text="Earlier.")]), user_text("go")]
    body = await sent_messages(server, client, history)
    assert body["messages"][0] == {
        "role": "user",
        "content": [{"type": "text", "text": "(the conversation continues)", CACHE: EPHEMERAL}],
    }
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]


async def test_a_final_assistant_turn_is_trimmed_and_sent_without_thinking(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    prefill = Message(
        role="assistant",
        content=[ThinkingBlock(text="hm", signature=SIGNATURE), TextBlock(text="The answer: \n")],
    )
    body = await sent_messages(
        server, client, [user_text("go"), prefill], thinking_budget_tokens=2048
    )
    assert "thinking" not in body
    assert body["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "The answer:"}],
    }


async def test_merged_assistant_turns_keep_thinking_first(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    first = Message(role="assistant", content=[TextBlock(text="One.")])
    second = Message(
        role="assistant",
        content=[ThinkingBlock(text="hm", signature=SIGNATURE), TextBlock(text="Two.")],
    )
    body = await sent_messages(
        server,
        client,
        [user_text("go"), first, second, user_text("ok")],
        thinking_budget_tokens=2048,
    )
    assert [b["type"] for b in body["messages"][1]["content"]] == ["thinking", "text", "text"]


async def test_an_input_schema_without_a_type_is_made_an_object_schema(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("ok"))
    tools = [ToolSpec("grep", "Search.", {"properties": {"q": {"type": "string"}}})]
    await collect(make_provider(client, server.base_url), simple_request(tools=tools))
    assert server.requests[0].json["tools"][0]["input_schema"] == {
        "type": "object",
        "properties": {"q": {"type": "string"}},
    }
    assert server.rejections == []


async def test_a_request_the_strict_fake_refuses_is_a_bad_request_error(
    server: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    server.enqueue(text_response("never served"))
    # over the API's temperature range (0 to 1): nothing in the adapter clamps it
    err = await failure(make_provider(client, server.base_url), simple_request(temperature=1.5))
    assert err.kind == "bad_request"
    assert err.status == 400
    assert "temperature" in str(err)
    [rejection] = server.rejections
    assert rejection.request_index == 0
    assert server.pending == 1
