"""Streams and error bodies that do not fit their format end as clear protocol errors (issue 39).

Each provider runs over its loopback fake, which sends the exact bytes a broken or hostile
server could: a field of the wrong type, JSON nested 100,000 deep, an event past the size
limit, a byte order mark, a lone surrogate escape. What does not fit is a `protocol` error that
names the provider, the field and the start of the chunk; no TypeError, RecursionError or
pydantic ValidationError gets out, and a protocol error is not sent again.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from soong_agent.adapters.providers.anthropic_messages import AnthropicMessagesProvider
from soong_agent.adapters.providers.ollama_chat import OllamaChatProvider
from soong_agent.adapters.providers.openai_chat import OpenAIChatProvider
from soong_agent.adapters.providers.payloads import MAX_JSON_DEPTH, MAX_PAYLOAD_CHARS
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.messages import user_text
from soong_agent.ports.model import ModelProvider, ModelRequest
from soong_agent.ports.streaming import StreamEvent, TextDelta, ToolCallReady
from tests.support import fake_anthropic, fake_ollama, fake_openai
from tests.support.fake_anthropic import FakeAnthropicServer
from tests.support.fake_ollama import FakeOllamaServer
from tests.support.fake_openai import FakeOpenAIServer, ScriptedResponse

KEY = "sk-test-bad-streams-0123456789"
DEEP = "[" * 100_000 + "]" * 100_000
RETRY = RetryPolicy(max_attempts=3, initial_backoff_s=0, max_backoff_s=0)


async def _no_sleep(_: float) -> None:
    return None


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:
        yield c


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
def anthropic_server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as srv:
        yield srv


@pytest.fixture
def ollama_server() -> Iterator[FakeOllamaServer]:
    with FakeOllamaServer() as srv:
        yield srv


def provider(
    cls: type[OpenAIChatProvider | AnthropicMessagesProvider | OllamaChatProvider],
    client: httpx.AsyncClient,
    base_url: str,
) -> ModelProvider:
    return cls(
        client=client,
        base_url=base_url,
        model="m",
        api_key=lambda: KEY,
        retry=RETRY,
        timeout_s=30,
        sleep=_no_sleep,
    )


async def collect(p: ModelProvider) -> list[StreamEvent]:
    request = ModelRequest(system=[], messages=[user_text("hi")])
    return [e async for e in p.stream(request)]


async def protocol_error(p: ModelProvider, server: Any) -> ProviderError:
    """The error of the one call, which must be a protocol error sent once (not retried)."""
    with pytest.raises(ProviderError) as info:
        await collect(p)
    err = info.value
    assert err.kind == "protocol", str(err)
    assert len(server.requests) == 1
    assert KEY not in str(err)
    assert len(err.detail) <= 300
    return err


# --- OpenAI Chat Completions -------------------------------------------------------------------


def openai_sse(*chunks: Any) -> ScriptedResponse:
    lines: list[str] = []
    for chunk in chunks:
        lines += ["data: " + (chunk if isinstance(chunk, str) else json.dumps(chunk)), ""]
    return fake_openai.raw_sse_response([*lines, "data: [DONE]"])


def call(**fields: Any) -> dict[str, Any]:
    fragment: dict[str, Any] = {"index": 0, "id": "call_1", "type": "function"}
    fragment["function"] = {"name": "read_file", "arguments": "{}"}
    for key, value in fields.items():
        if key in ("name", "arguments"):
            fragment["function"][key] = value
        else:
            fragment[key] = value
    return {"choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]}


def delta(**fields: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": fields}]}


OPENAI_CASES = [
    # (the chunk, the field the error must name, what it must say was found)
    (delta(tool_calls=5), "choices[0].delta.tool_calls", "an integer (5)"),
    (call(name=5), "choices[0].delta.tool_calls[0].function.name", "an integer (5)"),
    (call(name=["read_file"]), "choices[0].delta.tool_calls[0].function.name", "a list"),
    (call(arguments=5), "choices[0].delta.tool_calls[0].function.arguments", "an integer"),
    (call(index="0"), "choices[0].delta.tool_calls[0].index", 'a string ("0")'),
    (call(index=True), "choices[0].delta.tool_calls[0].index", "a boolean (true)"),
    (call(id=7), "choices[0].delta.tool_calls[0].id", "an integer (7)"),
    (call(function=[1]), "choices[0].delta.tool_calls[0].function", "a list"),
    (delta(tool_calls=["x"]), "choices[0].delta.tool_calls[0]", 'a string ("x")'),
    ({"choices": 5}, "choices", "an integer (5)"),
    ({"choices": ["x"]}, "choices[0]", 'a string ("x")'),
    ({"choices": [{"delta": "oops"}]}, "choices[0].delta", 'a string ("oops")'),
    (delta(content=5), "choices[0].delta.content", "an integer (5)"),
    (delta(content=[5]), "choices[0].delta.content[0]", "an integer (5)"),
    (delta(reasoning_content=[1]), "choices[0].delta.reasoning_content", "a list"),
    (delta(reasoning={"a": 1}), "choices[0].delta.reasoning", "an object"),
    ({"choices": [{"delta": {}, "finish_reason": 1}]}, "choices[0].finish_reason", "integer"),
    ({"choices": [], "usage": "many"}, "usage", 'a string ("many")'),
    ({"choices": [], "usage": {"prompt_tokens": "12"}}, "usage.prompt_tokens", '"12"'),
    ({"choices": [], "usage": {"completion_tokens": 10**30}}, "usage.completion_tokens", "1000"),
    ({"choices": [], "usage": {"prompt_tokens": -3}}, "usage.prompt_tokens", "-3"),
    (
        {"choices": [], "usage": {"prompt_tokens_details": {"cached_tokens": 1.5}}},
        "usage.prompt_tokens_details.cached_tokens",
        "a number (1.5)",
    ),
    ([1, 2], "expected an object", "a list"),
]


@pytest.mark.parametrize(("chunk", "field", "found"), OPENAI_CASES)
async def test_openai_a_field_of_the_wrong_type_is_a_protocol_error_naming_it(
    openai_server: FakeOpenAIServer,
    client: httpx.AsyncClient,
    chunk: Any,
    field: str,
    found: str,
) -> None:
    openai_server.enqueue(openai_sse(delta(content="fine "), chunk))
    err = await protocol_error(
        provider(OpenAIChatProvider, client, openai_server.base_url), openai_server
    )
    assert str(err).startswith(f"openai at {openai_server.base_url}: protocol: malformed chunk")
    assert field in err.detail
    assert found in err.detail
    assert json.dumps(chunk)[:40] in err.detail  # the start of the chunk, as an excerpt


async def test_openai_a_text_delta_before_the_bad_chunk_still_reaches_the_caller(
    openai_server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    openai_server.enqueue(openai_sse(delta(content="kept"), delta(tool_calls=5)))
    p = provider(OpenAIChatProvider, client, openai_server.base_url)
    seen: list[StreamEvent] = []
    with pytest.raises(ProviderError):
        async for event in p.stream(ModelRequest(system=[], messages=[user_text("hi")])):
            seen.append(event)
    assert seen == [TextDelta("kept")]


async def test_openai_content_as_a_list_of_text_parts_is_read(
    openai_server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    parts = [{"type": "text", "text": "one "}, {"type": "thinking", "thinking": []}]
    openai_server.enqueue(
        openai_sse(delta(content=parts), delta(content=[{"type": "text", "text": "two"}]))
    )
    events = await collect(provider(OpenAIChatProvider, client, openai_server.base_url))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["one ", "two"]


async def test_openai_arguments_sent_as_an_object_are_kept_as_json_text(
    openai_server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    finish = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    openai_server.enqueue(openai_sse(call(arguments={"path": "é.txt"}), finish))
    events = await collect(provider(OpenAIChatProvider, client, openai_server.base_url))
    [ready] = [e for e in events if isinstance(e, ToolCallReady)]
    assert json.loads(ready.call.arguments) == {"path": "é.txt"}


# --- Anthropic Messages ------------------------------------------------------------------------

MESSAGE_START = {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}}
TEXT_START = {
    "type": "content_block_start",
    "index": 0,
    "content_block": {"type": "text", "text": ""},
}
TOOL_START = {
    "type": "content_block_start",
    "index": 1,
    "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}},
}


def block_delta(index: Any, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": fields}


def tool_start(**fields: Any) -> dict[str, Any]:
    return {**TOOL_START, "content_block": {**TOOL_START["content_block"], **fields}}


ANTHROPIC_CASES = [
    ({**TEXT_START, "index": [1]}, "index", "a list"),
    ({**TEXT_START, "index": {"i": 0}}, "index", "an object"),
    (block_delta([1], type="input_json_delta", partial_json="{}"), "index", "a list"),
    (block_delta({}, type="input_json_delta", partial_json="{}"), "index", "an empty object"),
    (block_delta([0], type="signature_delta", signature="sig"), "index", "a list"),
    ({"type": "content_block_stop", "index": {"i": 0}}, "index", "an object"),
    (block_delta(7, type="input_json_delta", partial_json="{}"), "index", "an integer (7)"),
    (tool_start(name=5), "content_block.name", "an integer (5)"),
    (tool_start(id=None), "content_block.id", "nothing"),
    (tool_start(input=[1]), "content_block.input", "a list"),
    (block_delta(0, type="text_delta", text=5), "delta.text", "an integer (5)"),
    (block_delta(0, type="thinking_delta", thinking=[]), "delta.thinking", "an empty list"),
    (block_delta(0, type="signature_delta", signature=5), "delta.signature", "an integer"),
    (block_delta(1, type="input_json_delta", partial_json=5), "delta.partial_json", "integer"),
    (block_delta(0, type=5), "delta.type", "an integer (5)"),
    ({"type": "content_block_delta", "index": 0, "delta": "text"}, "delta", 'a string ("text")'),
    ({"type": 5}, "type", "an integer (5)"),
    ({"type": "message_delta", "delta": {"stop_reason": 5}}, "delta.stop_reason", "integer"),
    ({"type": "message_delta", "usage": {"output_tokens": "9"}}, "usage.output_tokens", '"9"'),
    (
        {"type": "message_start", "message": {"usage": {"input_tokens": 2**64}}},
        "message.usage.input_tokens",
        "an integer",
    ),
]


@pytest.mark.parametrize(("event", "field", "found"), ANTHROPIC_CASES)
async def test_anthropic_a_field_of_the_wrong_type_is_a_protocol_error_naming_it(
    anthropic_server: FakeAnthropicServer,
    client: httpx.AsyncClient,
    event: dict[str, Any],
    field: str,
    found: str,
) -> None:
    anthropic_server.enqueue(
        fake_anthropic.events_response(
            [MESSAGE_START, TEXT_START, TOOL_START, event, {"type": "message_stop"}]
        )
    )
    p = provider(AnthropicMessagesProvider, client, anthropic_server.base_url)
    err = await protocol_error(p, anthropic_server)
    assert str(err).startswith("anthropic at ")
    assert f"malformed event: {field}: expected" in err.detail
    assert found in err.detail
    assert json.dumps(event, separators=(",", ":"))[:30] in err.detail


# --- Ollama /api/chat --------------------------------------------------------------------------


def ollama_line(**fields: Any) -> str:
    return json.dumps({"model": "m", "created_at": "2025-01-01T00:00:00Z", **fields})


def ollama_call(**function: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [{"function": function}]}


OLLAMA_CASES = [
    (ollama_line(message={"tool_calls": 5}, done=False), "message.tool_calls", "an integer (5)"),
    (
        ollama_line(message=ollama_call(name=5, arguments={}), done=False),
        "message.tool_calls[0].function.name",
        "an integer (5)",
    ),
    (
        ollama_line(message=ollama_call(name="read_file", arguments=5), done=False),
        "message.tool_calls[0].function.arguments",
        "an integer (5)",
    ),
    (
        ollama_line(message={"tool_calls": [{"id": 3, "function": {"name": "x"}}]}, done=False),
        "message.tool_calls[0].id",
        "an integer (3)",
    ),
    (ollama_line(message={"tool_calls": ["x"]}, done=False), "message.tool_calls[0]", '"x"'),
    (ollama_line(message={"content": 5}, done=False), "message.content", "an integer (5)"),
    (ollama_line(message={"thinking": [1]}, done=False), "message.thinking", "a list"),
    (ollama_line(message="text", done=False), "message", 'a string ("text")'),
    (ollama_line(message={}, done="yes"), "done", 'a string ("yes")'),
    (ollama_line(done=True, eval_count="3"), "eval_count", 'a string ("3")'),
    (ollama_line(done=True, prompt_eval_count=-1), "prompt_eval_count", "-1"),
    (ollama_line(done=True, done_reason=5), "done_reason", "an integer (5)"),
    ("[1, 2]", "expected an object", "a list"),
]


@pytest.mark.parametrize(("line", "field", "found"), OLLAMA_CASES)
async def test_ollama_a_field_of_the_wrong_type_is_a_protocol_error_naming_it(
    ollama_server: FakeOllamaServer,
    client: httpx.AsyncClient,
    line: str,
    field: str,
    found: str,
) -> None:
    first = ollama_line(message={"role": "assistant", "content": "fine"}, done=False)
    ollama_server.enqueue(fake_ollama.raw_ndjson_response([first, line]))
    err = await protocol_error(
        provider(OllamaChatProvider, client, ollama_server.base_url), ollama_server
    )
    assert str(err).startswith("ollama at ")
    assert "malformed line" in err.detail
    assert field in err.detail
    assert found in err.detail
    assert line[:30] in err.detail


# --- nesting and size bounds, for every provider -----------------------------------------------


def framed(name: str, payload: str) -> ScriptedResponse:
    """`payload` as the first event (SSE) or line (NDJSON) of a 200 stream."""
    if name == "ollama":
        return fake_ollama.raw_bytes_response([payload.encode() + b"\n"])
    module = fake_openai if name == "openai" else fake_anthropic
    return module.raw_bytes_response([b"data: " + payload.encode() + b"\n\n"])


KINDS = {
    "openai": (OpenAIChatProvider, "openai_server", "chunk"),
    "anthropic": (AnthropicMessagesProvider, "anthropic_server", "event"),
    "ollama": (OllamaChatProvider, "ollama_server", "line"),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest) -> tuple[str, ModelProvider, Any, str]:
    name = request.param
    cls, server_fixture, what = KINDS[name]
    server = request.getfixturevalue(server_fixture)
    client = request.getfixturevalue("client")
    return name, provider(cls, client, server.base_url), server, what


@pytest.mark.parametrize(
    "payload",
    [
        DEEP,
        '{"a":' * 100_000 + "1" + "}" * 100_000,
        "[" * 100_000,  # opened and never closed
        '{"error": ' + DEEP + "}",
        '{"type": "content_block_delta", "delta": ' + DEEP + "}",
        '{"choices": [{"delta": {"content": ' + DEEP + "}}]}",
        '{"message": {"tool_calls": ' + DEEP + "}}",
    ],
    ids=["list", "object", "unclosed", "error", "anthropic-delta", "openai-delta", "ollama"],
)
async def test_a_payload_nested_100000_deep_is_a_protocol_error(
    kind: tuple[str, ModelProvider, Any, str], payload: str
) -> None:
    name, p, server, what = kind
    server.enqueue(framed(name, payload))
    err = await protocol_error(p, server)
    assert f"malformed {what}: nested deeper than {MAX_JSON_DEPTH} levels" in err.detail


async def test_nesting_up_to_the_limit_is_read(
    openai_server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    inner = "[" * (MAX_JSON_DEPTH - 4) + "]" * (MAX_JSON_DEPTH - 4)
    # a chunk at the limit, "[" inside strings not counted: the unknown field is not read
    chunk = (
        '{"x": "' + "[" * 2000 + '", "y": ' + inner + ', "choices": [{"delta": {"content": "ok"}}]}'
    )
    openai_server.enqueue(openai_sse(chunk))
    events = await collect(provider(OpenAIChatProvider, client, openai_server.base_url))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["ok"]


@pytest.mark.parametrize("status", [400, 429, 500, 529])
async def test_an_error_body_nested_100000_deep_is_classified_by_its_status(
    kind: tuple[str, ModelProvider, Any, str], status: int
) -> None:
    _, p, server, _ = kind
    body = ('{"error": ' + DEEP + "}").encode()
    headers = [("Content-Type", "application/json")]
    server.enqueue(
        *[ScriptedResponse(status=status, headers=headers, chunks=[body], framing="length")] * 3
    )
    with pytest.raises(ProviderError) as info:
        await collect(p)
    err = info.value
    assert err.status == status
    assert err.kind in ("bad_request", "rate_limit", "server", "overloaded")
    assert '{"error": [[[' in err.detail  # the body's start stands for its message
    assert len(err.detail) <= 300


async def test_a_non_stream_answer_nested_100000_deep_is_a_protocol_error(
    kind: tuple[str, ModelProvider, Any, str],
) -> None:
    name, p, server, _ = kind
    content_type = "text/html" if name == "ollama" else "application/json"
    body = ('{"error": ' + DEEP + "}").encode()
    server.enqueue(ScriptedResponse(headers=[("Content-Type", content_type)], chunks=[body]))
    err = await protocol_error(p, server)
    assert "expected an" in err.detail


async def test_an_event_longer_than_the_limit_is_a_protocol_error(
    kind: tuple[str, ModelProvider, Any, str],
) -> None:
    name, p, server, _ = kind
    huge = '{"content": "' + "x" * (MAX_PAYLOAD_CHARS + 10) + '"}'
    server.enqueue(framed(name, huge))
    err = await protocol_error(p, server)
    assert "longer than 16 MiB" in err.detail


async def test_a_line_that_never_ends_is_cut_off_at_the_limit(
    ollama_server: FakeOllamaServer, client: httpx.AsyncClient
) -> None:
    piece = b"x" * (1024 * 1024)
    ollama_server.enqueue(fake_ollama.raw_bytes_response([piece] * 17))
    err = await protocol_error(
        provider(OllamaChatProvider, client, ollama_server.base_url), ollama_server
    )
    assert "longer than 16 MiB" in err.detail


async def test_many_data_lines_of_one_event_count_together(
    openai_server: FakeOpenAIServer, client: httpx.AsyncClient
) -> None:
    line = b"data: " + b"x" * 1000 + b"\n"
    openai_server.enqueue(fake_openai.raw_bytes_response([line * 1024] * 17))
    p = provider(OpenAIChatProvider, client, openai_server.base_url)
    err = await protocol_error(p, openai_server)
    assert "longer than 16 MiB" in err.detail


# --- what a stream may hold and is read ------------------------------------------------------


def first_event(name: str, text: str) -> bytes:
    """A whole answer whose first event (or line) carries `text`."""
    if name == "openai":
        chunks = [delta(content=text), {"choices": [{"delta": {}, "finish_reason": "stop"}]}]
        return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + (
            b"data: [DONE]\n\n"
        )
    if name == "anthropic":
        events = [
            {**TEXT_START, "content_block": {"type": "text", "text": text}},
            {"type": "content_block_stop", "index": 0},
            {"type": "message_stop"},
        ]
        return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
    lines = [
        ollama_line(message={"role": "assistant", "content": text}, done=False),
        ollama_line(message={"role": "assistant", "content": ""}, done=True, done_reason="stop"),
    ]
    return "".join(line + "\n" for line in lines).encode()


def respond(name: str, pieces: list[bytes]) -> ScriptedResponse:
    module = {"openai": fake_openai, "anthropic": fake_anthropic, "ollama": fake_ollama}[name]
    response: ScriptedResponse = module.raw_bytes_response(pieces)
    return response


@pytest.mark.parametrize("split_at", [None, 1, 2, 3, 4])
async def test_a_byte_order_mark_at_the_start_is_skipped_and_the_first_event_kept(
    kind: tuple[str, ModelProvider, Any, str], split_at: int | None
) -> None:
    name, p, server, _ = kind
    body = b"\xef\xbb\xbf" + first_event(name, "first words")
    pieces = [body] if split_at is None else [body[:split_at], body[split_at:]]
    server.enqueue(respond(name, pieces))
    events = await collect(p)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["first words"]


async def test_text_split_inside_utf8_characters_and_escapes_arrives_whole(
    kind: tuple[str, ModelProvider, Any, str],
) -> None:
    name, p, server, _ = kind
    text = "é😀 \x00 \x1b[31m a\\ud800b"  # the backslash is sent escaped: these are characters
    body = first_event(name, text)
    server.enqueue(respond(name, [body[i : i + 1] for i in range(len(body))]))
    events = await collect(p)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == text


async def test_a_lone_surrogate_escape_is_handed_on_for_the_run_to_write_out(
    kind: tuple[str, ModelProvider, Any, str],
) -> None:
    name, p, server, _ = kind
    body = first_event(name, "a\ud800b").replace(b"\\ud800", b"\\uD800")
    assert b"\\uD800" in body  # json.dumps escaped it: the wire holds the escape, not a character
    server.enqueue(respond(name, [body]))
    events = await collect(p)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["a\ud800b"]
