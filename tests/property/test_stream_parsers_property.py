"""Property: whatever a server streams, each provider's parser hands on well-formed events or
raises one clear `ProviderError`; nothing else escapes (issue 39 items 3 and 5).

The three stream parsers (OpenAI chunks, Anthropic events, Ollama lines) are fed valid streams
built from generated text and tool calls, and the same streams with one payload mutated: a
field given a value of another type (lone surrogates, NUL and control characters, BOMs, huge
and negative numbers, booleans, lists, objects), a field removed, a value nested 100,000 deep,
the text cut short or a character put inside it. The SSE and NDJSON framing is fed the bytes
of such streams cut at any point, inside UTF-8 sequences and a leading BOM included; fewer
cases go through the real provider classes over an in-memory transport. A valid stream must
parse to exactly what was sent.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from soong_agent.adapters.providers.anthropic_messages import (
    AnthropicMessagesProvider,
    EventParser,
)
from soong_agent.adapters.providers.http_errors import ErrorContext
from soong_agent.adapters.providers.ollama_chat import LineParser, OllamaChatProvider, _line_batches
from soong_agent.adapters.providers.openai_chat import ChunkParser, OpenAIChatProvider
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.adapters.providers.sse import SSEDecoder
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.messages import ToolCallBlock, user_text
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import (
    StreamEvent,
    StreamFinished,
    TextDelta,
    ThinkingDelta,
    ToolCallReady,
    Usage,
    UsageReported,
)
from tests.property.bad_input import ODD_CHARACTERS, bad_text, json_values

EXAMPLES = 250
"""Per parser property (the three parsers each get this many)."""
PROVIDER_EXAMPLES = 40
"""Per provider, through the real class over an in-memory transport."""
SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CTX = ErrorContext(provider="prop", base_url="http://prop.invalid", secret="sk-prop-secret-0123")

# --- what a stream says ------------------------------------------------------------------------

Call = tuple[str, str, str]
"""(id, name, arguments JSON text)"""

texts = st.lists(st.text(min_size=1, max_size=12), max_size=5)
calls: st.SearchStrategy[list[Call]] = st.lists(
    st.tuples(
        st.from_regex(r"call_[a-z0-9]{1,6}", fullmatch=True),
        st.from_regex(r"[a-z_]{1,10}", fullmatch=True),
        st.dictionaries(st.text(max_size=6), st.integers() | st.text(max_size=6), max_size=3).map(
            lambda d: json.dumps(d, ensure_ascii=False)
        ),
    ),
    max_size=3,
    unique_by=lambda c: c[0],
)
counts = st.tuples(st.integers(0, 10**6), st.integers(0, 10**6))


def pieces_of(text: str, n: int) -> list[str]:
    """`text` in about `n` pieces (none empty)."""
    step = max(1, len(text) // max(1, n))
    return [text[i : i + step] for i in range(0, len(text), step)]


def openai_stream(words: list[str], tools: list[Call], usage: tuple[int, int]) -> list[Any]:
    out: list[Any] = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    out += [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in words]
    for i, (call_id, name, args) in enumerate(tools):
        head = {"index": i, "id": call_id, "type": "function", "function": {"name": name}}
        out.append({"choices": [{"index": 0, "delta": {"tool_calls": [head]}}]})
        for piece in pieces_of(args, 3):
            fragment = {"index": i, "function": {"arguments": piece}}
            out.append({"choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]})
    finish = "tool_calls" if tools else "stop"
    out.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    prompt, completion = usage
    out.append({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})
    out.append("[DONE]")
    return out


def anthropic_stream(words: list[str], tools: list[Call], usage: tuple[int, int]) -> list[Any]:
    prompt, completion = usage
    out: list[Any] = [
        {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": prompt}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ]
    out += [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}}
        for w in words
    ]
    out.append({"type": "content_block_stop", "index": 0})
    for i, (call_id, name, args) in enumerate(tools, start=1):
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        out.append({"type": "content_block_start", "index": i, "content_block": block})
        out += [
            {
                "type": "content_block_delta",
                "index": i,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
            for piece in pieces_of(args, 3)
        ]
        out.append({"type": "content_block_stop", "index": i})
    stop = "tool_use" if tools else "end_turn"
    out.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop},
            "usage": {"output_tokens": completion},
        }
    )
    out.append({"type": "message_stop"})
    return out


def ollama_stream(words: list[str], tools: list[Call], usage: tuple[int, int]) -> list[Any]:
    base = {"model": "m", "created_at": "2025-01-01T00:00:00Z"}
    out: list[Any] = [
        {**base, "message": {"role": "assistant", "content": w}, "done": False} for w in words
    ]
    if tools:
        wire = [
            {"id": call_id, "function": {"name": name, "arguments": json.loads(args)}}
            for call_id, name, args in tools
        ]
        out.append({**base, "message": {"role": "assistant", "content": "", "tool_calls": wire}})
    prompt, completion = usage
    out.append(
        {
            **base,
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": prompt,
            "eval_count": completion,
        }
    )
    return out


STREAMS: dict[str, Callable[[list[str], list[Call], tuple[int, int]], list[Any]]] = {
    "openai": openai_stream,
    "anthropic": anthropic_stream,
    "ollama": ollama_stream,
}
PARSERS: dict[str, Callable[[ErrorContext, list[StreamEvent]], Any]] = {
    "openai": ChunkParser,
    "anthropic": EventParser,
    "ollama": LineParser,
}

# --- mutations -------------------------------------------------------------------------------

DELETE = object()
DEEP_MARK = "\x00deep\x00"
DEEP_TEXTS = [
    "[" * 100_000 + "]" * 100_000,
    '{"a":' * 100_000 + "1" + "}" * 100_000,
    "[" * 600 + "]" * 600,
    "[" * 100_000,
]
odd_values = st.one_of(
    json_values,
    st.sampled_from(
        [
            5,
            -1,
            0,
            2**64,
            10**30,
            -(10**30),
            1.5,
            float("inf"),
            float("nan"),
            True,
            False,
            None,
            "",
            [],
            {},
            [1],
            {"a": 1},
            "\ud800",
            "a\x00b",
            "\ufeff",
            "x" * 200_000,
            DEEP_MARK,
            DELETE,
        ]
    ),
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*prefix, index))


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return None if new is DELETE else new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        copy = dict(value)
        if not rest and new is DELETE:
            del copy[head]
        else:
            copy[head] = replaced(value[head], rest, new)
        return copy
    items = list(value)
    items[head] = replaced(items[head], rest, new)
    return items


def dumped(value: Any, ascii_only: bool) -> str:
    """A payload's text: a string as it is (the raw text of a payload), anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=ascii_only)


DEEP_JSON = json.dumps(DEEP_MARK)


@st.composite
def mutated_streams(draw: st.DrawFn, name: str) -> list[str]:
    """A valid stream of provider `name` with one payload changed, as payload texts."""
    stream = STREAMS[name](draw(texts), draw(calls), draw(counts))
    ascii_only = draw(st.booleans())
    at = draw(st.integers(0, len(stream) - 1))
    payload = stream[at]
    how = draw(st.sampled_from(["field", "field", "field", "text", "whole"]))
    if how == "field" and not isinstance(payload, str):
        path = draw(st.sampled_from(list(paths(payload))[1:] or [()]))
        payload = replaced(payload, path, draw(odd_values))
    elif how == "whole":
        payload = draw(odd_values)
        payload = None if payload is DELETE else payload
    texts_out = [dumped(item, ascii_only) for item in stream]
    text = dumped(payload, ascii_only)
    if DEEP_JSON in text:  # a value nested far deeper than any parser may recurse
        text = text.replace(DEEP_JSON, draw(st.sampled_from(DEEP_TEXTS)), 1)
    if how == "text":
        at_char = draw(st.integers(0, len(text)))
        extra = draw(st.sampled_from(["", *ODD_CHARACTERS]) | bad_text)
        text = text[:at_char] + extra + text[at_char + draw(st.integers(0, 3)) :]
    texts_out[at] = text
    return texts_out


# --- what must hold --------------------------------------------------------------------------


def check_events(events: list[StreamEvent]) -> None:
    """Each event is a well-formed neutral event (what the loop relies on)."""
    for event in events:
        if isinstance(event, TextDelta | ThinkingDelta):
            assert isinstance(event.text, str)
        elif isinstance(event, ToolCallReady):
            call = event.call
            assert isinstance(call, ToolCallBlock)
            assert all(isinstance(v, str) for v in (call.id, call.name, call.arguments))
        elif isinstance(event, UsageReported):
            assert isinstance(event.usage, Usage)
        else:
            assert isinstance(event, StreamFinished), event


def check_error(err: ProviderError) -> None:
    assert err.provider == "prop"
    assert err.detail and len(err.detail) <= 300
    assert "sk-prop-secret-0123" not in str(err)
    str(err).encode("utf-8")  # storable and printable as it is


def run_parser(
    name: str, batches: list[list[str]]
) -> tuple[list[StreamEvent], ProviderError | None]:
    """Feed `batches` as the provider's template does; the events and the error, if any."""
    events: list[StreamEvent] = []
    parser = PARSERS[name](CTX, events)
    try:
        ended = False
        for batch in batches:
            if parser.feed(batch):
                ended = True
                break
        parser.finish(ended)
    except ProviderError as err:
        check_events(events)
        check_error(err)
        return events, err
    check_events(events)
    return events, None


def batched(items: list[str], cuts: list[int]) -> list[list[str]]:
    bounds = sorted({c % (len(items) + 1) for c in cuts} | {0, len(items)})
    return [items[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def got(events: list[StreamEvent]) -> tuple[str, list[Call]]:
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    made = [
        (e.call.id, e.call.name, e.call.arguments) for e in events if isinstance(e, ToolCallReady)
    ]
    return text, made


def normalised(tools: list[Call], name: str) -> list[Call]:
    if name != "ollama":
        return [(i, n, a) for i, n, a in tools]
    # Ollama sends arguments as an object: they come back as compact JSON of it
    return [
        (i, n, json.dumps(json.loads(a), separators=(",", ":"), ensure_ascii=False))
        for i, n, a in tools
    ]


# --- parser-level properties -----------------------------------------------------------------


@SETTINGS
@given(
    name=st.sampled_from(sorted(PARSERS)),
    words=texts,
    tools=calls,
    usage=counts,
    cuts=st.lists(st.integers(0, 100), max_size=4),
)
def test_a_valid_stream_parses_to_what_was_sent(
    name: str, words: list[str], tools: list[Call], usage: tuple[int, int], cuts: list[int]
) -> None:
    stream = [
        p if isinstance(p, str) else json.dumps(p) for p in STREAMS[name](words, tools, usage)
    ]
    events, err = run_parser(name, batched(stream, cuts))
    assert err is None, err
    assert got(events) == ("".join(words), normalised(tools, name))
    usages = [e.usage for e in events if isinstance(e, UsageReported)]
    assert [(u.input_tokens, u.output_tokens) for u in usages] == [usage]
    assert isinstance(events[-1], StreamFinished)
    assert events[-1].stop_reason == ("tool_use" if tools else "end_turn")


@SETTINGS
@given(data=st.data(), name=st.sampled_from(sorted(PARSERS)), cuts=st.lists(st.integers(0, 50)))
def test_a_mutated_stream_ends_in_events_or_one_provider_error(
    data: st.DataObject, name: str, cuts: list[int]
) -> None:
    stream = data.draw(mutated_streams(name))
    run_parser(name, batched(stream, cuts))  # only ProviderError may come out, checked inside


@SETTINGS
@given(
    name=st.sampled_from(sorted(PARSERS)),
    payloads=st.lists(st.one_of(bad_text, json_values.map(json.dumps)), min_size=1, max_size=6),
)
def test_arbitrary_payloads_end_in_events_or_one_provider_error(
    name: str, payloads: list[str]
) -> None:
    run_parser(name, [payloads])


# --- framing: bytes cut anywhere -------------------------------------------------------------

line_endings = st.sampled_from(["\n", "\r\n", "\r"])


@SETTINGS
@given(
    name=st.sampled_from(["openai", "anthropic"]),
    words=texts,
    tools=calls,
    ending=line_endings,
    bom=st.booleans(),
    other_fields=st.booleans(),
    ascii_only=st.booleans(),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_sse_bytes_cut_anywhere_give_back_every_payload(
    name: str,
    words: list[str],
    tools: list[Call],
    ending: str,
    bom: bool,
    other_fields: bool,
    ascii_only: bool,
    cuts: list[int],
) -> None:
    stream = STREAMS[name](words, tools, (1, 2))
    payloads = [p if isinstance(p, str) else json.dumps(p, ensure_ascii=ascii_only) for p in stream]
    before = f": keep-alive{ending}event: x{ending}" if other_fields else ""
    after = f"id: 1{ending}" if other_fields else ""
    body = "".join(f"{before}data: {p}{ending}{after}{ending}" for p in payloads).encode()
    body = (b"\xef\xbb\xbf" if bom else b"") + body
    decoder = SSEDecoder()
    out: list[str] = []
    for piece in cut(body, cuts):
        out += decoder.feed(piece)
    out += decoder.flush()
    assert out == payloads


@SETTINGS
@given(raw=st.binary(max_size=300), cuts=st.lists(st.integers(0, 300), max_size=8))
def test_sse_decoder_takes_any_bytes(raw: bytes, cuts: list[int]) -> None:
    decoder = SSEDecoder()
    out: list[str] = []
    for piece in cut(raw, cuts):
        out += decoder.feed(piece)
    out += decoder.flush()
    assert all(isinstance(p, str) and "\r" not in p for p in out)


def cut(body: bytes, cuts: list[int]) -> list[bytes]:
    bounds = sorted({c % (len(body) + 1) for c in cuts} | {0, len(body)})
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


class Pieces(httpx.AsyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield piece


@SETTINGS
@given(
    words=texts,
    tools=calls,
    crlf=st.booleans(),
    blank=st.booleans(),
    bom=st.booleans(),
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
)
def test_ndjson_bytes_cut_anywhere_give_back_every_line(
    words: list[str], tools: list[Call], crlf: bool, blank: bool, bom: bool, cuts: list[int]
) -> None:
    lines = [json.dumps(p, ensure_ascii=False) for p in ollama_stream(words, tools, (1, 2))]
    end = "\r\n" if crlf else "\n"
    body = (b"\xef\xbb\xbf" if bom else b"") + "".join(
        line + end + (end if blank else "") for line in lines
    ).encode()
    response = httpx.Response(
        200, headers={"content-type": "application/x-ndjson"}, stream=Pieces(cut(body, cuts))
    )

    async def read() -> list[str]:
        return [line async for batch in _line_batches(response) for line in batch]

    assert asyncio.run(read()) == lines


# --- through the real provider classes -------------------------------------------------------

PROVIDERS = {
    "openai": (OpenAIChatProvider, "text/event-stream"),
    "anthropic": (AnthropicMessagesProvider, "text/event-stream"),
    "ollama": (OllamaChatProvider, "application/x-ndjson"),
}


def body_of(name: str, payloads: list[str]) -> bytes:
    if name == "ollama":
        return "".join(p + "\n" for p in payloads).encode("utf-8", "surrogatepass")
    return "".join(f"data: {p}\n\n" for p in payloads).encode("utf-8", "surrogatepass")


async def stream_through(name: str, pieces: list[bytes]) -> list[StreamEvent]:
    cls, content_type = PROVIDERS[name]

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": content_type}, stream=Pieces(pieces))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        provider = cls(
            client=client,
            base_url="http://prop.invalid",
            model="m",
            api_key=lambda: "sk-prop-secret-0123",
            retry=RetryPolicy(max_attempts=1, stream_max_retries=0),
            timeout_s=30,
            idle_timeout_s=30,
            provider="prop",
        )
        request = ModelRequest(system=[], messages=[user_text("hi")])
        return [e async for e in provider.stream(request)]


@settings(SETTINGS, max_examples=PROVIDER_EXAMPLES)
@given(
    data=st.data(),
    name=st.sampled_from(sorted(PROVIDERS)),
    valid=st.booleans(),
    bom=st.booleans(),
    cuts=st.lists(st.integers(0, 10_000), max_size=10),
)
def test_the_providers_end_every_stream_in_events_or_one_provider_error(
    data: st.DataObject, name: str, valid: bool, bom: bool, cuts: list[int]
) -> None:
    if valid:
        words, tools = data.draw(texts), data.draw(calls)
        stream = STREAMS[name](words, tools, (3, 4))
        payloads = [p if isinstance(p, str) else json.dumps(p) for p in stream]
    else:
        payloads = data.draw(mutated_streams(name))
    body = (b"\xef\xbb\xbf" if bom else b"") + body_of(name, payloads)
    try:
        events = asyncio.run(stream_through(name, cut(body, cuts)))
    except ProviderError as err:
        assert not valid, err
        check_error(err)
        return
    check_events(events)
    assert isinstance(events[-1], StreamFinished)
    if valid:
        assert got(events) == ("".join(words), normalised(tools, name))
