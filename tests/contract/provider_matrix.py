"""One "kit" per model provider adapter, for the provider contract suite.

A kit knows how to start the provider's loopback fake server, build the adapter on a real
`httpx.AsyncClient`, script each situation of the contract with the fake's own builders and
keyword names, and read the provider's wire format back out of a recorded request. The test
bodies in `test_provider_contract.py` only talk to kits, so they are shared by every provider.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import httpx

from soong_agent.adapters.providers.anthropic_messages import AnthropicMessagesProvider
from soong_agent.adapters.providers.ollama_chat import OllamaChatProvider
from soong_agent.adapters.providers.openai_chat import OpenAIChatProvider
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.ports.errors import ProviderErrorKind
from soong_agent.ports.model import ModelProvider
from soong_agent.ports.streaming import Usage
from tests.support import fake_anthropic, fake_ollama, fake_openai
from tests.support.fake_openai import Framing, RecordedRequest, ScriptedResponse

CANARY_KEY = "sk-canary-5f1e0c9a7b3d4e26"
"""The API key every adapter is given; it must never show in an error message."""

POLICY = RetryPolicy(max_attempts=3, initial_backoff_s=0.2, max_backoff_s=5, max_retry_after_s=30)
JITTER = 0.5
"""What the injected `rand` returns, so that backoff delays are predictable."""

ToolCallSpec = tuple[str, str, str]
"""(id, name, arguments_json) of a scripted tool call."""


class FakeServer(Protocol):
    """What the contract uses of the three fake servers."""

    base_url: str

    def __enter__(self) -> FakeServer: ...

    def __exit__(self, *exc: object) -> None: ...

    def enqueue(self, *responses: ScriptedResponse) -> None: ...

    @property
    def requests(self) -> list[RecordedRequest]: ...

    def wait_for_disconnect(self, timeout: float = 5.0) -> bool: ...


class Sleeps:
    """An injected sleep that records the delays and does not wait, so retries are instant."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


@dataclass(frozen=True, slots=True)
class Failure:
    """One scripted failing response, and the error kind the kit's adapter gives it.

    `kind=None` means the kind the contract names for that case. A kit sets it where its
    provider cannot tell the case apart (Ollama has no "overloaded" signal: it says what it
    reports instead), and for its in-stream error, whose type is the provider's usual one.
    `retry_after` is the delay the response asks for, which the adapter must honour.
    """

    response: Callable[[], ScriptedResponse]
    kind: ProviderErrorKind | None = None
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class WireRoundTrip:
    """What a request body says about one tool call and its result, in the provider's terms.

    `call_link` is what ties the call to its result on the assistant side (the call id, or the
    tool name where the wire has no ids), `result_link` the same on the result side; the
    indexes are the positions of the two messages in the body's message list.
    """

    call_index: int
    call_link: str
    call_arguments: Any
    result_index: int
    result_link: str
    result_content: str


def stalled(response: ScriptedResponse) -> ScriptedResponse:
    """`response` sent with its headers first and then nothing for `delay_s` (the fake sleeps
    before every chunk but the first, and writes nothing for an empty chunk)."""
    return ScriptedResponse(
        status=response.status,
        headers=list(response.headers),
        chunks=[b"", *response.chunks],
        framing=response.framing,
        delay_s=response.delay_s,
    )


@dataclass(frozen=True, kw_only=True)
class ProviderKit:
    """Everything the contract suite needs to drive one provider adapter."""

    name: str
    adapter: Callable[..., ModelProvider]
    model: str
    server: Callable[[], FakeServer]
    chat_path: str
    """The path the adapter posts to (relative to the fake's base_url host)."""

    text: Callable[[str, int], ScriptedResponse]
    """A streamed answer of the text in that many pieces, ending normally."""
    tool_calls: Callable[[list[ToolCallSpec], int], ScriptedResponse]
    """A streamed answer making these calls, their arguments in that many fragments (where the
    wire fragments them at all)."""
    max_tokens: Callable[[str], ScriptedResponse]
    """A streamed answer of the text that stops because it hit the output token limit."""
    with_usage: Callable[[str, Usage], ScriptedResponse]
    """A streamed answer of the text whose wire reports these token counts."""
    usage_fields: frozenset[str]
    """The `Usage` fields the provider's wire can carry (the others are reported as 0)."""
    cut_stream: Callable[[str, Framing], ScriptedResponse]
    """Some text, then the body ends before the stream's end marker: abruptly (chunked framing)
    or as a clean close of the connection ("close" framing)."""
    failures: Mapping[str, Failure]
    """The scripted response of each failure case of the contract."""
    error: Callable[[int, dict[str, str]], ScriptedResponse]
    """An HTTP error answer in the provider's shape, with this status and these headers."""
    round_trip: Callable[[Any], WireRoundTrip | None]
    """Reads the first tool call and the first tool result out of a recorded request body."""
    keeps_call_ids: bool = True
    """Whether the scripted call ids come back unchanged (False: the kit's wire carries none,
    and the adapter must make unique ones up)."""
    links_results_by: Literal["id", "name"] = "id"

    def provider(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        *,
        sleep: Sleeps,
        retry: RetryPolicy = POLICY,
        timeout_s: float = 10.0,
        key: str | None = CANARY_KEY,
    ) -> ModelProvider:
        return self.adapter(
            client=client,
            base_url=base_url,
            model=self.model,
            api_key=lambda: key,
            retry=retry,
            timeout_s=timeout_s,
            sleep=sleep,
            rand=lambda: JITTER,
        )

    def expected_usage(self, usage: Usage) -> Usage:
        """`usage` as this provider can report it (fields its wire lacks are 0)."""
        return Usage(
            **{
                name: getattr(usage, name) if name in self.usage_fields else 0
                for name in Usage.model_fields
            }
        )


def _echo(message: str) -> str:
    """An error message that echoes the key, as some servers do; the adapter must scrub it."""
    return f"{message} (key {CANARY_KEY})"


# --- OpenAI Chat Completions -----------------------------------------------------------------


def _openai_round_trip(body: Any) -> WireRoundTrip | None:
    call: tuple[int, str, Any] | None = None
    for index, message in enumerate(body["messages"]):
        if call is None and message.get("role") == "assistant" and message.get("tool_calls"):
            first = message["tool_calls"][0]
            call = (index, first["id"], json.loads(first["function"]["arguments"]))
        elif call is not None and message.get("role") == "tool":
            return WireRoundTrip(
                call_index=call[0],
                call_link=call[1],
                call_arguments=call[2],
                result_index=index,
                result_link=message["tool_call_id"],
                result_content=message["content"],
            )
    return None


def _openai_in_stream_error() -> ScriptedResponse:
    # an error object in place of the first chunk, as gateways send when the upstream fails
    return fake_openai.raw_sse_response(
        ['data: {"error":{"message":"The server had an error","type":"server_error"}}', ""]
    )


OPENAI = ProviderKit(
    name="openai",
    adapter=OpenAIChatProvider,
    model="gpt-contract",
    server=fake_openai.FakeOpenAIServer,
    chat_path="/v1/chat/completions",
    text=lambda text, pieces: fake_openai.text_response(text, pieces=pieces),
    tool_calls=lambda calls, fragments: fake_openai.tool_call_response(calls, fragments=fragments),
    max_tokens=lambda text: fake_openai.text_response(text, finish_reason="length"),
    # OpenAI's prompt_tokens include the cached ones; it has no count of cache writes
    with_usage=lambda text, u: fake_openai.text_response(
        text,
        prompt_tokens=u.input_tokens + u.cache_read_tokens,
        completion_tokens=u.output_tokens,
        cached_tokens=u.cache_read_tokens,
    ),
    usage_fields=frozenset({"input_tokens", "output_tokens", "cache_read_tokens"}),
    cut_stream=lambda text, framing: fake_openai.cut_stream_response(text, framing=framing),
    error=lambda status, headers: fake_openai.error_response(status, headers=headers),
    failures={
        "auth": Failure(
            lambda: fake_openai.error_response(
                401, message=_echo("Incorrect API key provided"), code="invalid_api_key"
            )
        ),
        "rate_limit": Failure(
            lambda: fake_openai.error_response(
                429,
                message=_echo("Rate limit reached for requests"),
                type_="requests",
                code="rate_limit_exceeded",
                headers={"retry-after": "2"},
            ),
            retry_after=2.0,
        ),
        "overloaded": Failure(
            lambda: fake_openai.error_response(
                503, message=_echo("The engine is currently overloaded, please try again later")
            )
        ),
        "server": Failure(
            lambda: fake_openai.error_response(500, message=_echo("The server had an error"))
        ),
        "context_too_long": Failure(
            lambda: fake_openai.error_response(
                400,
                message=_echo(
                    "This model's maximum context length is 128000 tokens. However, your "
                    "messages resulted in 130412 tokens."
                ),
                code="context_length_exceeded",
            )
        ),
        "bad_request": Failure(
            lambda: fake_openai.error_response(
                400, message=_echo("Invalid value for 'temperature': must be at most 2.")
            )
        ),
        "stream_error": Failure(_openai_in_stream_error, kind="server"),
        "cut_before_events": Failure(lambda: fake_openai.cut_stream_response("")),
        "protocol": Failure(fake_openai.malformed_chunk_response),
    },
    round_trip=_openai_round_trip,
)


# --- Anthropic Messages ----------------------------------------------------------------------


def _anthropic_round_trip(body: Any) -> WireRoundTrip | None:
    call: tuple[int, str, Any] | None = None
    for index, message in enumerate(body["messages"]):
        blocks = message.get("content")
        if not isinstance(blocks, list):
            continue
        if call is None and message.get("role") == "assistant":
            uses = [b for b in blocks if b.get("type") == "tool_use"]
            if uses:
                call = (index, uses[0]["id"], uses[0]["input"])
        elif call is not None and message.get("role") == "user":
            results = [b for b in blocks if b.get("type") == "tool_result"]
            if results:
                return WireRoundTrip(
                    call_index=call[0],
                    call_link=call[1],
                    call_arguments=call[2],
                    result_index=index,
                    result_link=results[0]["tool_use_id"],
                    result_content=results[0].get("content", ""),
                )
    return None


ANTHROPIC = ProviderKit(
    name="anthropic",
    adapter=AnthropicMessagesProvider,
    model="claude-contract",
    server=fake_anthropic.FakeAnthropicServer,
    chat_path="/v1/messages",
    text=lambda text, pieces: fake_anthropic.text_response(text, pieces=pieces),
    tool_calls=lambda calls, fragments: fake_anthropic.tool_call_response(
        calls, fragments=fragments
    ),
    max_tokens=lambda text: fake_anthropic.text_response(text, stop_reason="max_tokens"),
    with_usage=lambda text, u: fake_anthropic.text_response(
        text,
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        cache_read=u.cache_read_tokens,
        cache_write=u.cache_write_tokens,
    ),
    usage_fields=frozenset(Usage.model_fields),
    cut_stream=lambda text, framing: fake_anthropic.cut_stream_response(text, framing=framing),
    error=lambda status, headers: fake_anthropic.error_response(status, headers=headers),
    failures={
        "auth": Failure(
            lambda: fake_anthropic.error_response(401, message=_echo("invalid x-api-key"))
        ),
        "rate_limit": Failure(
            lambda: fake_anthropic.error_response(
                429,
                message=_echo("Number of request tokens has exceeded your rate limit"),
                headers={"retry-after": "2"},
            ),
            retry_after=2.0,
        ),
        "overloaded": Failure(
            lambda: fake_anthropic.error_response(529, message=_echo("Overloaded"))
        ),
        "server": Failure(
            lambda: fake_anthropic.error_response(500, message=_echo("Internal server error"))
        ),
        "context_too_long": Failure(
            lambda: fake_anthropic.error_response(
                400, message=_echo("prompt is too long: 208310 tokens > 200000 maximum")
            )
        ),
        "bad_request": Failure(
            lambda: fake_anthropic.error_response(
                400,
                message=_echo("max_tokens: 100000 > 64000, which is the maximum allowed"),
            )
        ),
        # the API's usual error after a 200: overloaded_error in place of the first block
        "stream_error": Failure(
            lambda: fake_anthropic.stream_error_response("overloaded_error", "Overloaded"),
            kind="overloaded",
        ),
        "cut_before_events": Failure(lambda: fake_anthropic.cut_stream_response("")),
        "protocol": Failure(fake_anthropic.malformed_chunk_response),
    },
    round_trip=_anthropic_round_trip,
)


# --- Ollama /api/chat ------------------------------------------------------------------------


def _ollama_round_trip(body: Any) -> WireRoundTrip | None:
    call: tuple[int, str, Any] | None = None
    for index, message in enumerate(body["messages"]):
        if call is None and message.get("role") == "assistant" and message.get("tool_calls"):
            function = message["tool_calls"][0]["function"]
            call = (index, function["name"], function["arguments"])
        elif call is not None and message.get("role") == "tool":
            return WireRoundTrip(
                call_index=call[0],
                call_link=call[1],
                call_arguments=call[2],
                result_index=index,
                result_link=message["tool_name"],
                result_content=message["content"],
            )
    return None


def _ollama_tool_calls(calls: list[ToolCallSpec], fragments: int) -> ScriptedResponse:
    # Ollama sends every call whole (no fragments to reassemble); older versions send no ids,
    # which is the harder case for the adapter: it must make unique ids up.
    return fake_ollama.tool_call_response(
        [("", name, arguments) for _, name, arguments in calls], fragments=fragments
    )


OLLAMA = ProviderKit(
    name="ollama",
    adapter=OllamaChatProvider,
    model="llama-contract",
    server=fake_ollama.FakeOllamaServer,
    chat_path="/api/chat",
    text=lambda text, pieces: fake_ollama.text_response(text, pieces=pieces),
    tool_calls=_ollama_tool_calls,
    max_tokens=lambda text: fake_ollama.text_response(text, done_reason="length"),
    with_usage=lambda text, u: fake_ollama.text_response(
        text, prompt_eval_count=u.input_tokens, eval_count=u.output_tokens
    ),
    usage_fields=frozenset({"input_tokens", "output_tokens"}),
    cut_stream=lambda text, framing: fake_ollama.cut_stream_response(text, framing=framing),
    error=lambda status, headers: fake_ollama.error_response(status, headers=headers),
    failures={
        "auth": Failure(lambda: fake_ollama.error_response(401, message=_echo("unauthorized"))),
        "rate_limit": Failure(
            lambda: fake_ollama.error_response(
                429, message=_echo("too many requests"), headers={"retry-after": "2"}
            ),
            retry_after=2.0,
        ),
        # Ollama's answer when its queue is full; it has no distinct "overloaded" signal
        "overloaded": Failure(
            lambda: fake_ollama.error_response(
                503,
                message=_echo("server busy, please try again.  maximum pending requests exceeded"),
            ),
            kind="server",
        ),
        "server": Failure(
            lambda: fake_ollama.error_response(
                500, message=_echo("llama runner process has terminated: signal: killed")
            )
        ),
        "context_too_long": Failure(
            lambda: fake_ollama.error_response(
                400, message=_echo("the input length exceeds the context length")
            )
        ),
        "bad_request": Failure(
            lambda: fake_ollama.error_response(
                400, message=_echo("registry.ollama.ai/library/gemma:2b does not support tools")
            )
        ),
        "stream_error": Failure(
            lambda: fake_ollama.stream_error_response("unexpected EOF", text=""), kind="server"
        ),
        "cut_before_events": Failure(lambda: fake_ollama.cut_stream_response("")),
        "protocol": Failure(fake_ollama.malformed_chunk_response),
    },
    round_trip=_ollama_round_trip,
    keeps_call_ids=False,
    links_results_by="name",
)


KITS: dict[str, ProviderKit] = {kit.name: kit for kit in (OPENAI, ANTHROPIC, OLLAMA)}
