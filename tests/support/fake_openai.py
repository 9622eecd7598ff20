"""A real loopback HTTP server that speaks the OpenAI Chat Completions streaming format.

Tests script it with responses, point a provider (or the CLI, in a subprocess) at `base_url`,
and inspect what it received::

    with FakeOpenAIServer() as srv:
        srv.enqueue(text_response("Hello there"), tool_call_response([("c1", "read_file", "{}")]))
        ...  # use srv.base_url ("http://127.0.0.1:<port>/v1")
        assert srv.requests[0].json["stream"] is True
        assert srv.rejections == []

POST .../chat/completions is answered from the queue in FIFO order (500 "no scripted response
left" when it is empty); any other POST, and every GET, gets 404. It runs in background threads.

Strict mode (the default; `FakeOpenAIServer(strict=False)` turns it off) validates each POST to
.../chat/completions before a scripted response is consumed. An invalid request is still
recorded, consumes nothing, is answered as the strictest real server answers it, and is kept in
`server.rejections` (each problem names the message index and field). Where servers disagree the
answer is OpenAI's: HTTP 400 {"error": {"message", "type": "invalid_request_error", "param",
"code"}}. The rules, one a line, with the real server each comes from:

- body not JSON, or not a JSON object: 400 (OpenAI; llama-cpp-python 500 "valid dictionary").
- unknown top-level parameter: 400 "Unrecognized request argument supplied" (OpenAI).
- `model` missing, not a string, or empty: 400 "you must provide a model parameter" (OpenAI).
- `messages` missing, not an array, or empty: 400 (OpenAI; missing_required_parameter, ...).
- a message not an object; `role` missing or not system/developer/user/assistant/tool: 400
  (OpenAI invalid_value; llama-cpp-python 500 literal_error).
- system/developer/user/tool `content` missing, null, not a string nor a non-empty array of
  content parts of that role's kinds (text only but for user): 400 (OpenAI invalid_type).
- assistant `content` null beside `tool_calls`: HTTP 500 with llama-cpp-python's own body, a
  pydantic error list with "Input should be a valid string" (llama-cpp-python server; the
  defect that broke sessions - OpenAI and llama-server accept null).
- assistant `content` missing beside `tool_calls`: 400 (llama-cpp-python's built-in chat formats
  fail on it with KeyError 'content', HTTP 500 or a cut stream; OpenAI accepts it).
- assistant `content` neither string, null nor text parts: 400 (OpenAI invalid_type).
- assistant with neither content nor tool_calls: 400 (OpenAI; llama-server "Expected 'content'
  or 'tool_calls'").
- `tool_calls` not a non-empty array (OpenAI empty_array) or an entry without a string `id`,
  without `type: "function"`, without a `function` object with a string `name`: 400 (OpenAI;
  llama-cpp-python 500 the same).
- `function.name` empty: 400 (Gemini's OpenAI-compatible endpoint, "function_call.name: Name
  cannot be empty"; the others take it, then no tool of that name exists).
- `function.arguments` not a string: 400 (OpenAI invalid_type; llama-cpp-python 500 string_type).
- `function.arguments` a string that is not JSON, "" included: 400 (vLLM's chat_utils
  json.loads-es it for the chat template and answers 400; older vLLM refuse "" too).
- tool message without a string `tool_call_id`: 400 (OpenAI missing_required_parameter).
- tool message not directly after (other tool messages aside) an assistant message with
  tool_calls, or answering no call of it, or one it already answered: 400 "messages with role
  'tool' must be a response to a preceeding message with 'tool_calls'" (OpenAI, sic).
- a tool call left unanswered before the next non-tool message or the end: 400 "An assistant
  message with 'tool_calls' must be followed by tool messages responding to each
  'tool_call_id'" (OpenAI; DeepSeek, Qwen and Kimi gateways say the same).
- `tools` not a non-empty array (OpenAI empty_array), an entry not {"type": "function",
  "function": {"name": ^[a-zA-Z0-9_-]{1,64}$, "parameters": {"type": "object", ...}}}: 400
  (OpenAI; `parameters` is required by llama-cpp-python, 500 "Field required").
- `tool_choice` not "auto"/"none"/"required"/{"type": "function", "function": {"name": <a name
  in tools>}}: 400 (OpenAI; vLLM "does not match any of the specified `tools`").
- `tool_choice` or `parallel_tool_calls` without `tools`: 400 "'tool_choice' is only allowed
  when 'tools' are specified" (OpenAI; vLLM "When using `tool_choice`, `tools` must be set").
- `stream` not a boolean; `stream_options` without `stream: true`, or not an object: 400
  (OpenAI; vLLM "Stream options can only be defined when `stream=True`").
- `max_tokens` / `max_completion_tokens` not an integer >= 1: 400 (OpenAI integer_below_min_value;
  llama-cpp-python 500 int_parsing).
- `temperature` not a number in [0, 2]: 400 (OpenAI decimal_above_max_value / below_min_value).
- a message field its role does not have (system/developer/user: content, name; assistant:
  also tool_calls, refusal, audio, function_call; tool: content, tool_call_id), such as
  `reasoning_content`: 400 "Additional properties are not allowed ('reasoning_content' was
  unexpected)" (OpenAI; gateways say "property ... is unsupported").
- an `image_url` part (user messages only) whose `image_url` is not {"url": <a string>,
  "detail"?: "auto" | "low" | "high"}, or whose `data:` URL is not base64 of a PNG, JPEG, GIF
  or WebP image of at most 20 MB: 400 "You uploaded an unsupported image..." (OpenAI).
- `reasoning_effort` not one of none/minimal/low/medium/high/xhigh: 400 invalid_value; with
  it, `max_tokens` is refused: OpenAI's reasoning models take only `max_completion_tokens`
  ("Unsupported parameter: 'max_tokens' is not supported with this model. Use
  'max_completion_tokens' instead.").
- `prompt_cache_key` not a string: 400 invalid_type.

`FakeOpenAIServer(thinking_mode=True)` is DeepSeek in thinking mode instead: assistant messages
may carry `reasoning_content` (a string), and one that made tool calls must ("Missing
`reasoning_content` field in the assistant message at message index N", HTTP 400).

A refused request answers with an error a test may expect for other reasons, so when the
server's `with` block ends, refusals no test read through `rejections` fail the test
(`check_no_unseen_rejections`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Protocol

Framing = Literal["chunked", "close", "length"]


@dataclass
class RecordedRequest:
    """One request the server received."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case keys
    body: bytes
    client_port: int = 0  # the client's source port: equal ports mean a reused connection

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class ScriptedResponse:
    """What to answer to one request.

    `chunks` are written one by one, each flushed. `framing` is how the body is delimited:
    chunked transfer encoding, connection close, or Content-Length. `cut_after` closes the
    connection abruptly after that many chunks (for chunked framing the client then sees an
    unfinished body). `delay_s` is slept before every chunk but the first.
    """

    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    framing: Framing = "chunked"
    cut_after: int | None = None
    delay_s: float = 0.0

    def with_delay(self, delay_s: float) -> ScriptedResponse:
        return replace(self, delay_s=delay_s)

    def with_framing(self, framing: Framing) -> ScriptedResponse:
        return replace(self, framing=framing)


# --- chunk builders --------------------------------------------------------------------------

_SSE_HEADERS = [("Content-Type", "text/event-stream; charset=utf-8"), ("Cache-Control", "no-cache")]
_DONE = b"data: [DONE]\n\n"


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


class _Chunks:
    """Builds the `data:` events of one streamed completion, byte for byte like OpenAI."""

    def __init__(self, model: str, usage: bool) -> None:
        self.id = "chatcmpl-" + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.model = model
        self.usage = usage
        self.out: list[bytes] = []

    def _event(self, choices: list[dict[str, Any]], usage: Any = None) -> None:
        obj: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake0001",
            "choices": choices,
        }
        if self.usage:
            obj["usage"] = usage
        self.out.append(f"data: {_dumps(obj)}\n\n".encode())

    def delta(self, delta: dict[str, Any], finish_reason: str | None = None) -> None:
        self._event(
            [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
        )

    def finish(
        self, finish_reason: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int
    ) -> list[bytes]:
        self.delta({}, finish_reason)
        if self.usage:
            self._event(
                [],
                {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                    "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
                    "completion_tokens_details": {
                        "reasoning_tokens": 0,
                        "audio_tokens": 0,
                        "accepted_prediction_tokens": 0,
                        "rejected_prediction_tokens": 0,
                    },
                },
            )
        self.out.append(_DONE)
        return self.out


def split_text(text: str, pieces: int) -> list[str]:
    """`text` cut into at most `pieces` non-empty parts of nearly equal length."""
    if not text:
        return []
    pieces = max(1, min(pieces, len(text)))
    size, extra = divmod(len(text), pieces)
    out: list[str] = []
    start = 0
    for i in range(pieces):
        end = start + size + (1 if i < extra else 0)
        out.append(text[start:end])
        start = end
    return out


def text_response(
    text: str,
    *,
    pieces: int = 3,
    usage: bool = True,
    finish_reason: str = "stop",
    model: str = "fake-model",
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    cached_tokens: int = 0,
    reasoning: str = "",
) -> ScriptedResponse:
    """A streamed answer of `text` in `pieces` content deltas (after `reasoning` in
    `reasoning_content` deltas, when given)."""
    c = _Chunks(model, usage)
    if reasoning:
        c.delta({"role": "assistant", "content": None, "reasoning_content": ""})
        for piece in split_text(reasoning, 3):
            c.delta({"content": None, "reasoning_content": piece})
    c.delta({"role": "assistant", "content": "", "refusal": None})
    for piece in split_text(text, pieces):
        c.delta({"content": piece})
    chunks = c.finish(finish_reason, prompt_tokens, completion_tokens, cached_tokens)
    return ScriptedResponse(headers=list(_SSE_HEADERS), chunks=chunks)


def tool_call_response(
    calls: list[tuple[str, str, str]],
    *,
    fragments: int = 3,
    repeat_id_and_name: bool = False,
    text: str = "",
    usage: bool = True,
    interleave: bool = False,
    model: str = "fake-model",
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    cached_tokens: int = 0,
    reasoning: str = "",
) -> ScriptedResponse:
    """A streamed answer making the tool calls `(id, name, arguments_json)`.

    Each call starts with a fragment holding its id and name (empty arguments), then its
    arguments arrive in `fragments` pieces. `repeat_id_and_name` repeats id and name in every
    fragment (as some gateways do); `interleave` mixes the fragments of parallel calls.
    `reasoning` comes first, in `reasoning_content` deltas (as DeepSeek streams its thinking).
    """
    c = _Chunks(model, usage)
    role: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    if reasoning:
        c.delta({"role": "assistant", "content": None, "reasoning_content": ""})
        for piece in split_text(reasoning, 3):
            c.delta({"content": None, "reasoning_content": piece})
        role = {}
    if text:
        c.delta({"role": "assistant", "content": "", "refusal": None})
        for piece in split_text(text, 3):
            c.delta({"content": piece})
        role = {}

    def head(index: int, call_id: str, name: str, arguments: str) -> dict[str, Any]:
        return {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }

    per_call: list[list[dict[str, Any]]] = []
    for index, (call_id, name, arguments) in enumerate(calls):
        frags = [head(index, call_id, name, "")]
        for piece in split_text(arguments, fragments):
            if repeat_id_and_name:
                frags.append(head(index, call_id, name, piece))
            else:
                frags.append({"index": index, "function": {"arguments": piece}})
        per_call.append(frags)
    if interleave:
        ordered = [f for group in _round_robin(per_call) for f in group]
    else:
        ordered = [f for frags in per_call for f in frags]
    for fragment in ordered:
        c.delta({**role, "tool_calls": [fragment]})
        role = {}
    chunks = c.finish("tool_calls", prompt_tokens, completion_tokens, cached_tokens)
    return ScriptedResponse(headers=list(_SSE_HEADERS), chunks=chunks)


def _round_robin(groups: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    rounds: list[list[dict[str, Any]]] = []
    for i in range(max((len(g) for g in groups), default=0)):
        rounds.append([g[i] for g in groups if i < len(g)])
    return rounds


def error_response(
    status: int,
    *,
    message: str = "fake error",
    type_: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> ScriptedResponse:
    """A non-streamed JSON error in OpenAI's shape: {"error": {message, type, param, code}}."""
    if type_ is None:
        type_ = "server_error" if status >= 500 else "invalid_request_error"
    body = _dumps({"error": {"message": message, "type": type_, "param": None, "code": code}})
    all_headers = [("Content-Type", "application/json")]
    all_headers += list((headers or {}).items())
    return ScriptedResponse(
        status=status, headers=all_headers, chunks=[body.encode()], framing="length"
    )


def cut_stream_response(text: str, *, framing: Framing = "chunked") -> ScriptedResponse:
    """Some text deltas, then the connection closes without `data: [DONE]`.

    With chunked framing the body is left unfinished; with "close" framing it ends cleanly
    (the client only notices the missing [DONE]).
    """
    c = _Chunks("fake-model", True)
    c.delta({"role": "assistant", "content": "", "refusal": None})
    for piece in split_text(text, 3):
        c.delta({"content": piece})
    return ScriptedResponse(
        headers=list(_SSE_HEADERS), chunks=c.out, framing=framing, cut_after=len(c.out)
    )


def malformed_chunk_response() -> ScriptedResponse:
    """A role delta, then a `data:` line that is not JSON, then [DONE]."""
    c = _Chunks("fake-model", True)
    c.delta({"role": "assistant", "content": "", "refusal": None})
    chunks = [*c.out, b'data: {"id":"chatcmpl-broken","choices":[{"delta":\n\n', _DONE]
    return ScriptedResponse(headers=list(_SSE_HEADERS), chunks=chunks)


def raw_sse_response(
    lines: list[str], *, status: int = 200, framing: Framing = "chunked"
) -> ScriptedResponse:
    """Each string is sent as one line (a "\\n" is appended) and flushed on its own."""
    return ScriptedResponse(
        status=status,
        headers=list(_SSE_HEADERS),
        chunks=[(line + "\n").encode() for line in lines],
        framing=framing,
    )


def raw_bytes_response(
    chunks: list[bytes], *, status: int = 200, framing: Framing = "chunked"
) -> ScriptedResponse:
    """Exactly these bytes, each piece flushed on its own."""
    return ScriptedResponse(
        status=status, headers=list(_SSE_HEADERS), chunks=list(chunks), framing=framing
    )


def _no_script_left() -> ScriptedResponse:
    return error_response(
        500, message="fake server: no scripted response left", type_="server_error"
    )


# --- strict request validation ---------------------------------------------------------------

_ROLES = ("system", "developer", "user", "assistant", "tool")
_PART_KINDS: dict[str, tuple[str, ...]] = {
    "system": ("text",),
    "developer": ("text",),
    "user": ("text", "image_url", "input_audio", "file"),
    "assistant": ("text", "refusal"),
    "tool": ("text",),
}
_TOOL_CHOICE_MODES = ("auto", "none", "required")
_MESSAGE_FIELDS: dict[str, frozenset[str]] = {
    "system": frozenset({"role", "content", "name"}),
    "developer": frozenset({"role", "content", "name"}),
    "user": frozenset({"role", "content", "name"}),
    "assistant": frozenset(
        {"role", "content", "name", "tool_calls", "refusal", "audio", "function_call"}
    ),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
_REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
_DATA_URL = re.compile(r"data:(image/[a-z]+);base64,([A-Za-z0-9+/]*={0,2})")
_MAX_IMAGE_BYTES = 20 * 1024 * 1024
_UNSUPPORTED_IMAGE = (
    "You uploaded an unsupported image. Please make sure your image has of one the following "
    "formats: ['png', 'jpeg', 'gif', 'webp']."
)


def _image_format(data: bytes) -> str | None:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_KNOWN_PARAMETERS = frozenset(
    {
        "model", "messages", "audio", "frequency_penalty", "function_call", "functions",
        "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata",
        "modalities", "n", "parallel_tool_calls", "prediction", "presence_penalty",
        "prompt_cache_key", "reasoning_effort", "response_format", "safety_identifier", "seed",
        "service_tier", "stop", "store", "stream", "stream_options", "temperature",
        "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity",
        "web_search_options",
    }
)  # fmt: skip
# Where llama-cpp-python's server reports a failed request validation (its traceback line).
_LLAMA_CPP_TRACE = (
    '  File "/usr/local/lib/python3.11/site-packages/llama_cpp/server/app.py", line 376,'
    " in create_chat_completion\n    POST /v1/chat/completions"
)


@dataclass(frozen=True)
class Problem:
    """One reason a strict server refuses a request.

    `message` is for people (it names the message index and field); `param` and `code` are
    OpenAI's fields. `llama_cpp_body` is set when the request is answered as llama-cpp-python
    answers it (HTTP 500 with that error body) instead of in OpenAI's shape.
    """

    message: str
    param: str | None = None
    code: str | None = None
    llama_cpp_body: dict[str, Any] | None = None


class RefusedRequest(Protocol):
    """What a strict fake server keeps of a request it refused (subclasses keep their own)."""

    @property
    def request_index(self) -> int: ...  # its index in the server's `requests`

    @property
    def status(self) -> int: ...

    @property
    def problems(self) -> Sequence[object]: ...

    @property
    def messages(self) -> list[str]: ...  # one per problem, the first one is the answer's


@dataclass(frozen=True)
class Rejection:
    """A request the strict server refused: the response went out, nothing was consumed."""

    request_index: int  # its index in `FakeOpenAIServer.requests`
    status: int
    problems: tuple[Problem, ...]  # the first one decides the answer

    @property
    def messages(self) -> list[str]:
        return [p.message for p in self.problems]

    def __str__(self) -> str:
        return f"request {self.request_index} (HTTP {self.status}): " + "; ".join(self.messages)


def _kind(value: Any) -> str:
    """A JSON value's type, as OpenAI's messages name it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _llama_cpp_validation_body(index: int, message: dict[str, Any]) -> dict[str, Any]:
    """llama-cpp-python's answer to an assistant message with `"content": null`.

    Its request model types `messages` as a union of TypedDicts, and the assistant one has
    `content: NotRequired[str]`: pydantic reports every union member's failure, FastAPI raises,
    and the server's route wrapper turns it into HTTP 500 with this text (checked against
    llama-cpp-python's server on pydantic 2 / FastAPI).
    """

    def literal(member: str, expected: str) -> dict[str, Any]:
        return {
            "type": "literal_error",
            "loc": ("body", "messages", index, member, "role"),
            "msg": f"Input should be '{expected}'",
            "input": "assistant",
            "ctx": {"expected": f"'{expected}'"},
        }

    def missing(member: str, name: str) -> dict[str, Any]:
        return {
            "type": "missing",
            "loc": ("body", "messages", index, member, name),
            "msg": "Field required",
            "input": message,
        }

    errors = [
        literal("ChatCompletionRequestSystemMessage", "system"),
        literal("ChatCompletionRequestUserMessage", "user"),
        {
            "type": "string_type",
            "loc": ("body", "messages", index, "ChatCompletionRequestAssistantMessage", "content"),
            "msg": "Input should be a valid string",
            "input": None,
        },
        literal("ChatCompletionRequestToolMessage", "tool"),
        missing("ChatCompletionRequestToolMessage", "tool_call_id"),
        literal("ChatCompletionRequestFunctionMessage", "function"),
        missing("ChatCompletionRequestFunctionMessage", "name"),
    ]
    text = f"{len(errors)} validation errors:\n" + "".join(f"  {e!r}\n" for e in errors)
    return {
        "error": {
            "message": text + "\n" + _LLAMA_CPP_TRACE,
            "type": "internal_server_error",
            "param": None,
            "code": None,
        }
    }


class _Validator:
    """Walks one Chat Completions request body and collects what strict servers refuse."""

    def __init__(self, *, thinking_mode: bool = False) -> None:
        self.problems: list[Problem] = []
        self.thinking_mode = thinking_mode

    def fail(
        self,
        message: str,
        param: str | None = None,
        code: str | None = None,
        llama_cpp_body: dict[str, Any] | None = None,
    ) -> None:
        self.problems.append(Problem(message, param, code, llama_cpp_body))

    def invalid_type(self, param: str, expected: str, value: Any) -> None:
        self.fail(
            f"Invalid type for '{param}': expected {expected}, but got {_kind(value)} instead.",
            param,
            "invalid_type",
        )

    def missing(self, param: str) -> None:
        self.fail(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")

    def empty_array(self, param: str) -> None:
        self.fail(
            f"Invalid '{param}': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead.",
            param,
            "empty_array",
        )

    # -- the body --

    def body(self, raw: bytes) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            self.fail(
                "We could not parse the JSON body of your request. (HINT: This likely means "
                "you aren't using your HTTP library correctly. The OpenAI API expects a JSON "
                "payload, but what was sent was not valid JSON.)"
            )
            return
        if not isinstance(body, dict):
            self.invalid_type("body", "an object", body)
            return
        for name in body:
            if name not in _KNOWN_PARAMETERS:
                self.fail(f"Unrecognized request argument supplied: {name}", name)
        model = body.get("model")
        if not isinstance(model, str) or not model:
            self.fail("you must provide a model parameter", "model")
        if "messages" not in body:
            self.missing("messages")
        elif not isinstance(body["messages"], list):
            self.invalid_type("messages", "an array", body["messages"])
        elif not body["messages"]:
            self.empty_array("messages")
        else:
            self.messages(body["messages"])
        tool_names = self.tools(body)
        self.tool_choice(body, tool_names)
        self.sampling(body)
        self.reasoning_and_cache(body)

    def reasoning_and_cache(self, body: dict[str, Any]) -> None:
        effort = body.get("reasoning_effort")
        if effort is not None:
            if effort not in _REASONING_EFFORTS:
                self.fail(
                    f"Invalid value: {effort!r}. Supported values are: 'minimal', 'low', "
                    "'medium', and 'high'.",
                    "reasoning_effort",
                    "invalid_value",
                )
            if body.get("max_tokens") is not None and not self.thinking_mode:
                self.fail(
                    "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                    "'max_completion_tokens' instead.",
                    "max_tokens",
                    "unsupported_parameter",
                )
        key = body.get("prompt_cache_key")
        if key is not None and not isinstance(key, str):
            self.invalid_type("prompt_cache_key", "a string", key)

    def fields(self, i: int, role: str, message: dict[str, Any]) -> None:
        """The fields of a message: those of its role only (see the module doc)."""
        allowed = _MESSAGE_FIELDS[role]
        if role == "assistant" and self.thinking_mode:
            allowed = allowed | {"reasoning_content"}
            reasoning = message.get("reasoning_content")
            if reasoning is not None and not isinstance(reasoning, str):
                self.invalid_type(f"messages[{i}].reasoning_content", "a string", reasoning)
            if message.get("tool_calls") and reasoning is None:
                self.fail(
                    "Missing `reasoning_content` field in the assistant message at message "
                    f"index {i}",
                    f"messages[{i}].reasoning_content",
                )
        extra = sorted(set(message) - allowed)
        if extra:
            self.fail(
                f"Additional properties are not allowed ({extra[0]!r} was unexpected) - "
                f"'messages.{i}'",
                f"messages[{i}]",
            )

    # -- messages --

    def messages(self, messages: list[Any]) -> None:
        open_at = -1  # the assistant message whose tool calls are being answered
        open_calls: dict[str, bool] = {}  # its call ids -> answered yet
        for i, message in enumerate(messages):
            where = f"messages[{i}]"
            if not isinstance(message, dict):
                self.invalid_type(where, "an object", message)
                continue
            role = message.get("role")
            if "role" not in message:
                self.missing(f"{where}.role")
                continue
            if role not in _ROLES:
                self.fail(
                    f"Invalid value: {role!r}. Supported values are: 'system', 'assistant', "
                    f"'user', 'tool', and 'developer'. ({where}.role)",
                    f"{where}.role",
                    "invalid_value",
                )
                continue
            self.fields(i, role, message)
            if role == "tool":
                call_id = self.tool_message(where, message)
                if call_id is None:
                    continue
                if open_at < 0:
                    self.fail(
                        "Invalid parameter: messages with role 'tool' must be a response to a "
                        f"preceeding message with 'tool_calls'. ({where} answers "
                        f"{call_id!r}, but no assistant message with tool_calls comes "
                        "directly before it)",
                        f"messages.[{i}].role",
                    )
                elif call_id not in open_calls:
                    self.fail(
                        "Invalid parameter: messages with role 'tool' must be a response to a "
                        f"preceeding message with 'tool_calls'. ({where}.tool_call_id "
                        f"{call_id!r} is none of the calls of messages[{open_at}]: "
                        f"{', '.join(map(repr, open_calls)) or 'none'})",
                        f"messages.[{i}].tool_call_id",
                    )
                elif open_calls[call_id]:
                    self.fail(
                        "Invalid parameter: messages with role 'tool' must be a response to a "
                        f"preceeding message with 'tool_calls'. ({where} answers "
                        f"{call_id!r} of messages[{open_at}] a second time)",
                        f"messages.[{i}].tool_call_id",
                    )
                else:
                    open_calls[call_id] = True
                continue
            self.unanswered(open_at, open_calls)
            open_at, open_calls = -1, {}
            if role == "assistant":
                ids = self.assistant_message(i, message)
                if ids:
                    open_at, open_calls = i, dict.fromkeys(ids, False)
            else:
                self.content(where, role, message)
        self.unanswered(open_at, open_calls)

    def unanswered(self, open_at: int, open_calls: dict[str, bool]) -> None:
        missing = [call_id for call_id, answered in open_calls.items() if not answered]
        if missing:
            self.fail(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(missing)} (calls of messages[{open_at}])",
                f"messages.[{open_at}].role",
            )

    def content(self, where: str, role: str, message: dict[str, Any]) -> None:
        """The content of a system, developer, user or tool message."""
        param = f"{where}.content"
        if "content" not in message:
            self.missing(param)
            return
        content = message["content"]
        if isinstance(content, str):
            return
        if not isinstance(content, list):
            self.invalid_type(param, "one of a string or array of objects", content)
            return
        self.parts(param, role, content)

    def parts(self, param: str, role: str, content: list[Any]) -> None:
        if not content:
            self.empty_array(param)
            return
        kinds = _PART_KINDS[role]
        for k, part in enumerate(content):
            where = f"{param}[{k}]"
            if not isinstance(part, dict):
                self.invalid_type(where, "an object", part)
                continue
            kind = part.get("type")
            if kind not in kinds:
                self.fail(
                    f"Invalid value: {kind!r}. Supported values are: "
                    f"{', '.join(map(repr, kinds))}. ({where}.type in a {role} message)",
                    f"{where}.type",
                    "invalid_value",
                )
            elif kind in ("text", "refusal") and not isinstance(part.get(kind), str):
                self.invalid_type(f"{where}.{kind}", "a string", part.get(kind))
            elif kind == "image_url":
                self.image_url(where, part)

    def image_url(self, where: str, part: dict[str, Any]) -> None:
        image = part.get("image_url")
        if not isinstance(image, dict) or not isinstance(image.get("url"), str):
            self.missing(f"{where}.image_url.url")
            return
        if set(image) - {"url", "detail"} or image.get("detail", "auto") not in (
            "auto",
            "low",
            "high",
        ):
            self.fail(f"Invalid '{where}.image_url': unexpected fields or detail", where)
        url = image["url"]
        if url.startswith(("http://", "https://")):
            return
        match = _DATA_URL.fullmatch(url)
        if match is None:
            self.fail(f"Invalid image URL: '{where}.image_url.url' ({url[:40]!r})", where)
            return
        try:
            data = base64.b64decode(match.group(2), validate=True)
        except binascii.Error:
            self.fail(_UNSUPPORTED_IMAGE + f" ({where}: not base64)", where, "invalid_image_format")
            return
        if len(data) > _MAX_IMAGE_BYTES:
            self.fail(f"Image too large: {len(data)} bytes ({where})", where, "image_too_large")
        elif _image_format(data) is None:
            self.fail(_UNSUPPORTED_IMAGE + f" ({where})", where, "invalid_image_format")

    def tool_message(self, where: str, message: dict[str, Any]) -> str | None:
        """Checks a tool message; its tool_call_id when that is a string."""
        self.content(where, "tool", message)
        call_id = message.get("tool_call_id")
        if "tool_call_id" not in message:
            self.missing(f"{where}.tool_call_id")
            return None
        if not isinstance(call_id, str):
            self.invalid_type(f"{where}.tool_call_id", "a string", call_id)
            return None
        return call_id

    def assistant_message(self, i: int, message: dict[str, Any]) -> list[str]:
        """Checks an assistant message; the ids of its well-formed tool calls."""
        where = f"messages[{i}]"
        has_calls = "tool_calls" in message
        content = message.get("content")
        if has_calls and "content" in message and content is None:
            self.fail(
                f"{where}.content is null beside tool_calls: llama-cpp-python answers HTTP 500 "
                "'Input should be a valid string' (send \"\" instead)",
                f"{where}.content",
                llama_cpp_body=_llama_cpp_validation_body(i, message),
            )
        elif has_calls and "content" not in message:
            self.fail(
                f"{where}.content is missing beside tool_calls: llama-cpp-python's chat formats "
                "fail with KeyError 'content' (send \"\" instead)",
                f"{where}.content",
                "missing_required_parameter",
            )
        elif not has_calls and content is None:
            self.fail(
                f"{where} (assistant) has neither content nor tool_calls: OpenAI answers "
                f'"Missing required parameter: \'{where}.content\'", llama-server "Expected '
                "'content' or 'tool_calls'\"",
                f"{where}.content",
                "missing_required_parameter",
            )
        elif isinstance(content, list):
            self.parts(f"{where}.content", "assistant", content)
        elif content is not None and not isinstance(content, str):
            self.invalid_type(f"{where}.content", "one of a string or array of objects", content)
        if not has_calls:
            return []
        calls = message["tool_calls"]
        if not isinstance(calls, list):
            self.invalid_type(f"{where}.tool_calls", "an array", calls)
            return []
        if not calls:
            self.empty_array(f"{where}.tool_calls")
            return []
        ids: list[str] = []
        for k, call in enumerate(calls):
            call_id = self.tool_call(f"{where}.tool_calls[{k}]", call)
            if call_id is not None:
                ids.append(call_id)
        return ids

    def tool_call(self, where: str, call: Any) -> str | None:
        """Checks one entry of `tool_calls`; its id when that is a string."""
        if not isinstance(call, dict):
            self.invalid_type(where, "an object", call)
            return None
        call_id = call.get("id")
        if "id" not in call:
            self.missing(f"{where}.id")
        elif not isinstance(call_id, str):
            self.invalid_type(f"{where}.id", "a string", call_id)
        if "type" not in call:
            self.missing(f"{where}.type")
        elif call["type"] != "function":
            self.fail(
                f"Invalid value: {call['type']!r}. Supported values are: 'function'. "
                f"({where}.type)",
                f"{where}.type",
                "invalid_value",
            )
        function = call.get("function")
        if "function" not in call:
            self.missing(f"{where}.function")
        elif not isinstance(function, dict):
            self.invalid_type(f"{where}.function", "an object", function)
        else:
            name = function.get("name")
            if "name" not in function:
                self.missing(f"{where}.function.name")
            elif not isinstance(name, str):
                self.invalid_type(f"{where}.function.name", "a string", name)
            elif not name:
                self.fail(
                    f"Invalid '{where}.function.name': string too short. Expected a string with "
                    "minimum length 1, but got an empty string instead.",
                    f"{where}.function.name",
                    "string_below_min_length",
                )
            arguments = function.get("arguments")
            if "arguments" not in function:
                self.missing(f"{where}.function.arguments")
            elif not isinstance(arguments, str):
                self.invalid_type(f"{where}.function.arguments", "a string", arguments)
            else:
                try:
                    json.loads(arguments)
                except ValueError as exc:
                    self.fail(
                        f"{where}.function.arguments is not JSON ({exc}): vLLM parses it "
                        f"(json.loads) and refuses the request; got {arguments[:80]!r}",
                        f"{where}.function.arguments",
                        "invalid_value",
                    )
        return call_id if isinstance(call_id, str) else None

    # -- tools --

    def tools(self, body: dict[str, Any]) -> set[str] | None:
        """Checks `tools`; the names it declares, None when there is no `tools`."""
        if "tools" not in body or body["tools"] is None:
            return None
        tools = body["tools"]
        if not isinstance(tools, list):
            self.invalid_type("tools", "an array", tools)
            return set()
        if not tools:
            self.empty_array("tools")
            return set()
        names: set[str] = set()
        for k, tool in enumerate(tools):
            where = f"tools[{k}]"
            if not isinstance(tool, dict):
                self.invalid_type(where, "an object", tool)
                continue
            if tool.get("type") != "function":
                self.fail(
                    f"Invalid value: {tool.get('type')!r}. Supported values are: 'function'. "
                    f"({where}.type)",
                    f"{where}.type",
                    "invalid_value",
                )
            function = tool.get("function")
            if "function" not in tool:
                self.missing(f"{where}.function")
                continue
            if not isinstance(function, dict):
                self.invalid_type(f"{where}.function", "an object", function)
                continue
            name = function.get("name")
            if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
                self.fail(
                    f"Invalid '{where}.function.name': {name!r} does not match the pattern "
                    "'^[a-zA-Z0-9_-]{1,64}$'.",
                    f"{where}.function.name",
                    "invalid_value",
                )
            else:
                names.add(name)
            if "description" in function and not isinstance(function["description"], str):
                self.invalid_type(
                    f"{where}.function.description", "a string", function["description"]
                )
            parameters = function.get("parameters")
            if "parameters" not in function:
                self.missing(f"{where}.function.parameters")
            elif not isinstance(parameters, dict) or parameters.get("type") != "object":
                got = parameters.get("type") if isinstance(parameters, dict) else _kind(parameters)
                self.fail(
                    f"Invalid schema for function {name!r}: schema must be a JSON Schema of "
                    f"'type: \"object\"', got 'type: \"{got}\"'. ({where}.function.parameters)",
                    f"{where}.function.parameters",
                    "invalid_function_parameters",
                )
        return names

    def tool_choice(self, body: dict[str, Any], tool_names: set[str] | None) -> None:
        for parameter in ("tool_choice", "parallel_tool_calls"):
            if parameter in body and tool_names is None:
                self.fail(
                    f"Invalid value for '{parameter}': '{parameter}' is only allowed when "
                    "'tools' are specified.",
                    parameter,
                )
        if "tool_choice" not in body:
            return
        choice = body["tool_choice"]
        if isinstance(choice, str):
            if choice not in _TOOL_CHOICE_MODES:
                self.fail(
                    f"Invalid value: {choice!r}. Supported values are: 'none', 'auto', and "
                    "'required'. (tool_choice)",
                    "tool_choice",
                    "invalid_value",
                )
            return
        function = choice.get("function") if isinstance(choice, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if (
            not isinstance(choice, dict)
            or choice.get("type") != "function"
            or not isinstance(name, str)
        ):
            self.fail(
                "Invalid 'tool_choice': expected 'none', 'auto', 'required' or "
                '{"type": "function", "function": {"name": ...}}, but got '
                f"{json.dumps(choice)[:120]}",
                "tool_choice",
                "invalid_value",
            )
        elif tool_names is not None and name not in tool_names:
            self.fail(
                f"Invalid 'tool_choice': function {name!r} is not among 'tools' "
                f"({', '.join(sorted(tool_names)) or 'none'}).",
                "tool_choice",
                "invalid_value",
            )

    # -- sampling and streaming --

    def sampling(self, body: dict[str, Any]) -> None:
        stream = body.get("stream")
        if "stream" in body and not isinstance(stream, bool) and stream is not None:
            self.invalid_type("stream", "a boolean", stream)
        if "stream_options" in body and body["stream_options"] is not None:
            if stream is not True:
                self.fail(
                    "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                    "stream_options",
                )
            elif not isinstance(body["stream_options"], dict):
                self.invalid_type("stream_options", "an object", body["stream_options"])
        for name in ("max_tokens", "max_completion_tokens"):
            if name not in body or body[name] is None:
                continue
            value = body[name]
            if not _is_int(value):
                self.invalid_type(name, "an integer", value)
            elif value < 1:
                self.fail(
                    f"Invalid '{name}': integer below minimum value. Expected a value >= 1, "
                    f"but got {value} instead.",
                    name,
                    "integer_below_min_value",
                )
        if "temperature" in body and body["temperature"] is not None:
            value = body["temperature"]
            if not _is_number(value):
                self.invalid_type("temperature", "a decimal", value)
            elif value > 2:
                self.fail(
                    "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, "
                    f"but got {value} instead.",
                    "temperature",
                    "decimal_above_max_value",
                )
            elif value < 0:
                self.fail(
                    "Invalid 'temperature': decimal below minimum value. Expected a value >= 0, "
                    f"but got {value} instead.",
                    "temperature",
                    "decimal_below_min_value",
                )


def validate_chat_request(body: bytes, *, thinking_mode: bool = False) -> list[Problem]:
    """What a strict server refuses in this Chat Completions request body (empty: valid);
    `thinking_mode`: DeepSeek's rules for `reasoning_content` (see the module doc)."""
    validator = _Validator(thinking_mode=thinking_mode)
    validator.body(body)
    return validator.problems


def rejection_response(problems: list[Problem]) -> ScriptedResponse:
    """The answer to a refused request: the first problem decides its status and shape."""
    first = problems[0]
    if first.llama_cpp_body is not None:
        body = _dumps(first.llama_cpp_body)
        status = 500
    else:
        status = 400
        error = {
            "message": first.message,
            "type": "invalid_request_error",
            "param": first.param,
            "code": first.code,
        }
        body = _dumps({"error": error})
    return ScriptedResponse(
        status=status,
        headers=[("Content-Type", "application/json")],
        chunks=[body.encode()],
        framing="length",
    )


# --- the server ------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each chunk leaves at once (Nagle would hold it ~40 ms)
    server: _HTTPServer
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, add=False)

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _record(self, body: bytes) -> int:
        headers = {k.lower(): v for k, v in self.headers.items()}
        path = self.path
        port = int(self.client_address[1])
        return self.server.owner._record(RecordedRequest(self.command, path, headers, body, port))

    def do_GET(self) -> None:
        self._record(b"")
        self._serve(error_response(404, message=f"no route for GET {self.path}"))

    def do_POST(self) -> None:
        body = self._read_body()
        index = self._record(body)
        if self.path.split("?")[0].rstrip("/").endswith("/chat/completions"):
            owner = self.server.owner
            problems = (
                validate_chat_request(body, thinking_mode=owner.thinking_mode)
                if owner.strict
                else []
            )
            if problems:
                response = rejection_response(problems)
                owner._reject(Rejection(index, response.status, tuple(problems)))
            else:
                response = owner._next() or _no_script_left()
        else:
            response = error_response(404, message=f"no route for POST {self.path}")
        self._serve(response)

    def _serve(self, response: ScriptedResponse) -> None:
        try:
            self._write(response)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError):
            self.close_connection = True
            self.server.owner._disconnected()

    def _write(self, r: ScriptedResponse) -> None:
        self.send_response(r.status)
        for name, value in r.headers:
            self.send_header(name, value)
        if r.framing == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
        elif r.framing == "length":
            self.send_header("Content-Length", str(sum(len(c) for c in r.chunks)))
        else:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.flush()
        for i, chunk in enumerate(r.chunks):
            if r.cut_after is not None and i >= r.cut_after:
                break
            if i and r.delay_s:
                time.sleep(r.delay_s)
            if r.framing == "chunked":
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            else:
                self.wfile.write(chunk)
            self.wfile.flush()
        if r.cut_after is not None:
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        if r.framing == "chunked":
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, owner: FakeOpenAIServer) -> None:
        self.owner = owner
        super().__init__(("127.0.0.1", 0), _Handler)


class FakeOpenAIServer:
    """A scripted OpenAI-compatible server on 127.0.0.1 (a free port), in background threads.

    `strict` (the default) refuses invalid Chat Completions requests as real servers do: see
    the module docstring for the rules, and `rejections` for what was refused.
    """

    def __init__(self, *, strict: bool = True, thinking_mode: bool = False) -> None:
        self.strict = strict
        self.thinking_mode = thinking_mode
        self._lock = threading.Lock()
        self._queue: deque[ScriptedResponse] = deque()
        self._requests: list[RecordedRequest] = []
        self._rejections: list[Rejection] = []
        self._seen_rejections = 0  # how many of them a test has read
        self._connections: set[socket.socket] = set()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.client_disconnected = threading.Event()
        self.disconnects = 0
        self.base_url = ""

    # -- lifecycle --

    def start(self) -> FakeOpenAIServer:
        if self._httpd is not None:
            return self
        self._httpd = _HTTPServer(self)
        port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        if exc_type is None:
            self.check_no_unseen_rejections()

    def check_no_unseen_rejections(self) -> None:
        """Fail when strict mode refused a request no test looked at.

        A refused request is answered with an error a test may expect for other reasons (a run
        that "fails as it should"), so one nobody read through `rejections` is a failure of its
        own when the server's `with` block ends.
        """
        with self._lock:
            unseen = self._rejections[self._seen_rejections :]
        if unseen:
            details = "\n".join(f"  {r}" for r in unseen)
            raise AssertionError(
                f"the strict fake OpenAI server refused {len(unseen)} request(s) that no test "
                f"looked at (read server.rejections to expect them):\n{details}"
            )

    # -- scripting and inspection --

    def enqueue(self, *responses: ScriptedResponse) -> None:
        with self._lock:
            self._queue.extend(responses)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def rejections(self) -> Sequence[RefusedRequest]:
        """The requests strict mode refused, in arrival order (empty when all were valid).

        Reading them tells the server a test expects them (see `check_no_unseen_rejections`).
        """
        with self._lock:
            self._seen_rejections = len(self._rejections)
            return list(self._rejections)

    @property
    def pending(self) -> int:
        """How many scripted responses have not been served yet."""
        with self._lock:
            return len(self._queue)

    def wait_for_disconnect(self, timeout: float = 5.0) -> bool:
        """Whether the server saw a client go away in the middle of a response."""
        return self.client_disconnected.wait(timeout)

    # -- called from handler threads --

    def _next(self) -> ScriptedResponse | None:
        with self._lock:
            return self._queue.popleft() if self._queue else None

    def _record(self, request: RecordedRequest) -> int:
        with self._lock:
            self._requests.append(request)
            return len(self._requests) - 1

    def _reject(self, rejection: Rejection) -> None:
        with self._lock:
            self._rejections.append(rejection)

    def _disconnected(self) -> None:
        with self._lock:
            self.disconnects += 1
        self.client_disconnected.set()

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)
