"""The loopback fake OpenAI server refuses, in strict mode, what the strictest real servers refuse.

Each rule gets a bad request and must answer it as the real server does, without consuming the
scripted response; every request shape the runtime sends must pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from soong_agent.adapters.providers.openai_wire import build_body
from soong_agent.ports.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    user_text,
)
from soong_agent.ports.model import ModelRequest, SystemPart, ToolSpec
from tests.support.fake_openai import FakeOpenAIServer, text_response
from tests.support.images import PNG_B64

SYSTEM = {"role": "system", "content": "You are a test."}
USER = {"role": "user", "content": "list the folder"}
CALL = {"id": "call_1", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}}
CALL_2 = {
    "id": "call_2",
    "type": "function",
    "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
}
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "list_dir",
            "description": "List a folder.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
]


def calling(*calls: dict[str, Any], content: Any = "") -> dict[str, Any]:
    return {"role": "assistant", "content": content, "tool_calls": list(calls)}


def result(call_id: str, content: Any = "a.txt\nb.txt") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def request(*messages: Any, **extra: Any) -> dict[str, Any]:
    """A streaming request as the runtime shapes it, `extra` merged in (None removes a key)."""
    body: dict[str, Any] = {
        "model": "fake-model",
        "messages": list(messages) or [SYSTEM, USER],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    for key, value in extra.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body


def without(message: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k != key}


def with_function(call: dict[str, Any], **function: Any) -> dict[str, Any]:
    merged = {**call["function"], **function}
    return {**call, "function": {k: v for k, v in merged.items() if v is not None}}


@dataclass(frozen=True)
class Case:
    """A request a strict server refuses, and what its answer must say."""

    id: str
    body: dict[str, Any] | bytes
    fragment: str  # in the error message the client receives
    param: str | None = None  # OpenAI's `param` when it names one
    status: int = 400


TOOL_ROUND = [SYSTEM, USER, calling(CALL), result("call_1")]
FUNCTION_ROLE = {"role": "function", "name": "list_dir", "content": "x"}

CASES = [
    # the body
    Case("body-not-json", b'{"model": "fake-model", "messages": [', "could not parse the JSON"),
    Case("body-an-array", b"[1, 2]", "Invalid type for 'body'"),
    Case("unknown-parameter", request(top_k=40), "Unrecognized request argument supplied: top_k"),
    Case("model-missing", request(model=None), "you must provide a model", "model"),
    Case("model-empty", request(model=""), "you must provide a model", "model"),
    Case("messages-missing", request(messages=None), "Missing required parameter", "messages"),
    Case("messages-not-a-list", request(messages="hi"), "expected an array", "messages"),
    Case("messages-empty", request(messages=[]), "empty array", "messages"),
    # roles and content
    Case("message-not-an-object", request(SYSTEM, "hi"), "Invalid type for 'messages[1]'"),
    Case("role-missing", request(without(USER, "role")), "'messages[0].role'", "messages[0].role"),
    Case("role-unknown", request(SYSTEM, {**USER, "role": "wizard"}), "'wizard'"),
    Case("role-function", request(SYSTEM, USER, FUNCTION_ROLE), "Invalid value: 'function'"),
    Case("system-content-int", request({**SYSTEM, "content": 5}, USER), "messages[0].content"),
    Case("user-content-null", request(SYSTEM, {**USER, "content": None}), "got null instead"),
    Case("user-content-missing", request(SYSTEM, without(USER, "content")), "messages[1].content"),
    Case("user-content-empty-list", request(SYSTEM, {**USER, "content": []}), "empty array"),
    Case(
        "user-part-text-not-string",
        request(SYSTEM, {**USER, "content": [{"type": "text", "text": 3}]}),
        "messages[1].content[0].text",
    ),
    Case(
        "system-image-part",
        request({**SYSTEM, "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, USER),
        "messages[0].content[0].type in a system message",
    ),
    Case(
        "tool-content-object",
        request(SYSTEM, USER, calling(CALL), result("call_1", {"text": "x"})),
        "messages[3].content",
    ),
    # assistant messages
    Case(
        "assistant-null-content-beside-tool-calls",
        request(*TOOL_ROUND[:2], calling(CALL, content=None), result("call_1")),
        "Input should be a valid string",
        status=500,
    ),
    Case(
        "assistant-missing-content-beside-tool-calls",
        request(*TOOL_ROUND[:2], without(calling(CALL), "content"), result("call_1")),
        "messages[2].content is missing beside tool_calls",
        "messages[2].content",
    ),
    Case(
        "assistant-neither-content-nor-tool-calls",
        request(SYSTEM, USER, {"role": "assistant"}, USER),
        "messages[2] (assistant) has neither content nor tool_calls",
    ),
    Case(
        "assistant-content-int",
        request(SYSTEM, USER, {"role": "assistant", "content": 7}, USER),
        "messages[2].content",
    ),
    Case(
        "tool-calls-empty",
        request(SYSTEM, USER, calling(), USER),
        "Invalid 'messages[2].tool_calls': empty array",
    ),
    Case(
        "tool-calls-not-a-list",
        request(SYSTEM, USER, {"role": "assistant", "content": "", "tool_calls": CALL}, USER),
        "messages[2].tool_calls",
    ),
    Case(
        "tool-call-without-id",
        request(SYSTEM, USER, calling(without(CALL, "id")), USER),
        "'messages[2].tool_calls[0].id'",
    ),
    Case(
        "tool-call-id-not-a-string",
        request(SYSTEM, USER, calling({**CALL, "id": 1}), USER),
        "'messages[2].tool_calls[0].id': expected a string",
    ),
    Case(
        "tool-call-without-type",
        request(*TOOL_ROUND[:2], calling(without(CALL, "type")), result("call_1")),
        "'messages[2].tool_calls[0].type'",
    ),
    Case(
        "tool-call-type-not-function",
        request(*TOOL_ROUND[:2], calling({**CALL, "type": "custom"}), result("call_1")),
        "Invalid value: 'custom'",
        "messages[2].tool_calls[0].type",
    ),
    Case(
        "tool-call-without-function",
        request(*TOOL_ROUND[:2], calling(without(CALL, "function")), result("call_1")),
        "'messages[2].tool_calls[0].function'",
    ),
    Case(
        "tool-call-without-name",
        request(*TOOL_ROUND[:2], calling(with_function(CALL, name=None)), result("call_1")),
        "'messages[2].tool_calls[0].function.name'",
    ),
    Case(
        "tool-call-empty-name",
        request(*TOOL_ROUND[:2], calling(with_function(CALL, name="")), result("call_1")),
        "'messages[2].tool_calls[0].function.name': string too short",
        "messages[2].tool_calls[0].function.name",
    ),
    Case(
        "tool-call-arguments-an-object",
        request(*TOOL_ROUND[:2], calling(with_function(CALL, arguments={})), result("call_1")),
        "'messages[2].tool_calls[0].function.arguments': expected a string, but got an object",
    ),
    Case(
        "tool-call-arguments-missing",
        request(*TOOL_ROUND[:2], calling(with_function(CALL, arguments=None)), result("call_1")),
        "Missing required parameter: 'messages[2].tool_calls[0].function.arguments'",
    ),
    Case(
        "tool-call-arguments-not-json",
        request(
            *TOOL_ROUND[:2], calling(with_function(CALL, arguments='{"path": ')), result("call_1")
        ),
        "messages[2].tool_calls[0].function.arguments is not JSON",
        "messages[2].tool_calls[0].function.arguments",
    ),
    Case(
        "tool-call-arguments-empty",
        request(*TOOL_ROUND[:2], calling(with_function(CALL, arguments="")), result("call_1")),
        "function.arguments is not JSON",
    ),
    # tool messages and the pairing of calls and results
    Case(
        "tool-message-without-call-id",
        request(*TOOL_ROUND[:3], without(result("call_1"), "tool_call_id")),
        "'messages[3].tool_call_id'",
    ),
    Case(
        "tool-message-call-id-not-a-string",
        request(*TOOL_ROUND[:3], result(1)),  # type: ignore[arg-type]
        "'messages[3].tool_call_id': expected a string",
    ),
    Case(
        "tool-message-with-no-call-before-it",
        request(SYSTEM, USER, result("call_1")),
        "must be a response to a preceeding message with 'tool_calls'",
        "messages.[2].role",
    ),
    Case(
        "tool-message-after-a-user-message",
        request(*TOOL_ROUND, USER, result("call_1")),
        "messages[5] answers 'call_1', but no assistant message with tool_calls",
    ),
    Case(
        "tool-message-answering-another-call",
        request(*TOOL_ROUND[:3], result("call_9")),
        "'call_9' is none of the calls of messages[2]: 'call_1'",
        "messages.[3].tool_call_id",
    ),
    Case(
        "tool-message-answering-twice",
        request(*TOOL_ROUND, result("call_1")),
        "answers 'call_1' of messages[2] a second time",
    ),
    Case(
        "call-unanswered-before-the-next-user-message",
        request(SYSTEM, USER, calling(CALL), USER),
        "The following tool_call_ids did not have response messages: call_1",
        "messages.[2].role",
    ),
    Case(
        "call-unanswered-at-the-end",
        request(SYSTEM, USER, calling(CALL, CALL_2), result("call_2")),
        "did not have response messages: call_1 (calls of messages[2])",
    ),
    Case(
        "call-unanswered-before-the-next-assistant-message",
        request(SYSTEM, USER, calling(CALL), {"role": "assistant", "content": "done"}),
        "did not have response messages: call_1",
    ),
    # tools and tool_choice
    Case("tools-empty", request(tools=[]), "Invalid 'tools': empty array", "tools"),
    Case("tools-not-a-list", request(tools=TOOLS[0]), "Invalid type for 'tools'", "tools"),
    Case(
        "tool-type-not-function",
        request(tools=[{**TOOLS[0], "type": "code_interpreter"}]),
        "Invalid value: 'code_interpreter'",
        "tools[0].type",
    ),
    Case(
        "tool-without-function",
        request(tools=[{"type": "function"}]),
        "'tools[0].function'",
        "tools[0].function",
    ),
    Case(
        "tool-name-with-a-dot",
        request(tools=[{"type": "function", "function": {**TOOLS[0]["function"], "name": "a.b"}}]),
        "'a.b' does not match the pattern",
        "tools[0].function.name",
    ),
    Case(
        "tool-without-parameters",
        request(tools=[{"type": "function", "function": {"name": "list_dir"}}]),
        "'tools[0].function.parameters'",
    ),
    Case(
        "tool-parameters-not-an-object-schema",
        request(
            tools=[
                {"type": "function", "function": {"name": "n", "parameters": {"type": "string"}}}
            ]
        ),
        "schema must be a JSON Schema of 'type: \"object\"', got 'type: \"string\"'",
        "tools[0].function.parameters",
    ),
    Case(
        "tool-choice-unknown-mode",
        request(tools=TOOLS, tool_choice="always"),
        "Invalid value: 'always'",
        "tool_choice",
    ),
    Case(
        "tool-choice-names-a-missing-tool",
        request(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "write"}}),
        "function 'write' is not among 'tools' (list_dir, read_file)",
        "tool_choice",
    ),
    Case(
        "tool-choice-object-without-function",
        request(tools=TOOLS, tool_choice={"type": "function"}),
        "Invalid 'tool_choice'",
        "tool_choice",
    ),
    Case(
        "tool-choice-without-tools",
        request(tool_choice="auto"),
        "'tool_choice' is only allowed when 'tools' are specified",
        "tool_choice",
    ),
    Case(
        "parallel-tool-calls-without-tools",
        request(parallel_tool_calls=False),
        "'parallel_tool_calls' is only allowed when 'tools' are specified",
    ),
    # streaming and sampling
    Case(
        "stream-options-without-stream",
        request(stream=None),
        "'stream_options' parameter is only allowed when 'stream' is enabled",
        "stream_options",
    ),
    Case("stream-options-with-stream-false", request(stream=False), "only allowed when 'stream'"),
    Case("stream-not-a-boolean", request(stream="yes"), "Invalid type for 'stream'", "stream"),
    Case(
        "max-tokens-zero", request(max_tokens=0), "Expected a value >= 1, but got 0", "max_tokens"
    ),
    Case("max-tokens-negative", request(max_tokens=-5), "but got -5 instead", "max_tokens"),
    Case("max-tokens-a-string", request(max_tokens="100"), "expected an integer", "max_tokens"),
    Case("max-tokens-a-decimal", request(max_tokens=1.5), "expected an integer", "max_tokens"),
    Case("max-tokens-a-boolean", request(max_tokens=True), "but got a boolean", "max_tokens"),
    Case(
        "max-completion-tokens-zero",
        request(max_completion_tokens=0),
        "Invalid 'max_completion_tokens'",
        "max_completion_tokens",
    ),
    Case("temperature-above-2", request(temperature=2.5), "Expected a value <= 2", "temperature"),
    Case("temperature-below-0", request(temperature=-0.1), "Expected a value >= 0", "temperature"),
    Case("temperature-a-string", request(temperature="hot"), "Invalid type", "temperature"),
]


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


def post(server: FakeOpenAIServer, body: dict[str, Any] | bytes) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(
        server.base_url + "/chat/completions",
        content=content,
        headers={"content-type": "application/json", "authorization": "Bearer sk-test"},
        timeout=10,
    )


def test_strict_is_the_default_and_can_be_turned_off() -> None:
    assert FakeOpenAIServer().strict is True
    assert FakeOpenAIServer(strict=False).strict is False


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_rule_refuses_its_bad_request(server: FakeOpenAIServer, case: Case) -> None:
    server.enqueue(text_response("should not be served"))
    response = post(server, case.body)
    assert response.status_code == case.status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert case.fragment in error["message"]
    if case.param is not None:
        assert error["param"] == case.param
    if case.status == 400:
        assert error["type"] == "invalid_request_error"
    # nothing consumed, the request recorded, the problem kept for the test to read
    assert server.pending == 1
    assert len(server.requests) == 1
    [rejection] = server.rejections
    assert rejection.request_index == 0 and rejection.status == case.status
    assert rejection.problems and str(rejection).startswith("request 0 (HTTP ")


def test_null_content_beside_tool_calls_is_answered_as_llama_cpp_python_answers_it(
    server: FakeOpenAIServer,
) -> None:
    null_content = calling(CALL, content=None)
    response = post(server, request(SYSTEM, USER, null_content, result("call_1")))
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["type"] == "internal_server_error"
    assert error["param"] is None and error["code"] is None
    # The text llama-cpp-python's server returned for this very request, up to its traceback.
    loc = "('body', 'messages', 2, 'ChatCompletionRequest{}Message', '{}')"
    echoed = repr(null_content)
    expected = (
        "7 validation errors:\n"
        f"  {{'type': 'literal_error', 'loc': {loc.format('System', 'role')}, 'msg': "
        "\"Input should be 'system'\", 'input': 'assistant', 'ctx': {'expected': \"'system'\"}}\n"
        f"  {{'type': 'literal_error', 'loc': {loc.format('User', 'role')}, 'msg': "
        "\"Input should be 'user'\", 'input': 'assistant', 'ctx': {'expected': \"'user'\"}}\n"
        f"  {{'type': 'string_type', 'loc': {loc.format('Assistant', 'content')}, 'msg': "
        "'Input should be a valid string', 'input': None}\n"
        f"  {{'type': 'literal_error', 'loc': {loc.format('Tool', 'role')}, 'msg': "
        "\"Input should be 'tool'\", 'input': 'assistant', 'ctx': {'expected': \"'tool'\"}}\n"
        f"  {{'type': 'missing', 'loc': {loc.format('Tool', 'tool_call_id')}, 'msg': "
        f"'Field required', 'input': {echoed}}}\n"
        f"  {{'type': 'literal_error', 'loc': {loc.format('Function', 'role')}, 'msg': "
        "\"Input should be 'function'\", 'input': 'assistant', 'ctx': {'expected': "
        "\"'function'\"}}\n"
        f"  {{'type': 'missing', 'loc': {loc.format('Function', 'name')}, 'msg': "
        f"'Field required', 'input': {echoed}}}\n"
        "\n"
    )
    assert error["message"].startswith(expected)
    assert error["message"].endswith("in create_chat_completion\n    POST /v1/chat/completions")
    [rejection] = server.rejections
    assert "messages[2].content is null beside tool_calls" in rejection.messages[0]


def test_a_refused_request_leaves_the_script_for_the_next_one(server: FakeOpenAIServer) -> None:
    server.enqueue(text_response("Hello there"))
    assert post(server, request(temperature=9)).status_code == 400
    answer = post(server, request())
    assert answer.status_code == 200 and "Hello there" in "".join(_texts(answer))
    assert server.pending == 0
    assert [r.request_index for r in server.rejections] == [0]


def test_every_problem_of_a_request_is_kept(server: FakeOpenAIServer) -> None:
    response = post(server, request(SYSTEM, USER, calling(CALL), max_tokens=0, temperature=3))
    assert response.status_code == 400
    [rejection] = server.rejections
    assert len(rejection.problems) == 3
    assert "call_1" in rejection.messages[0]  # the first problem is the one answered
    assert response.json()["error"]["message"] == rejection.messages[0]


def test_lenient_mode_serves_what_strict_mode_refuses() -> None:
    with FakeOpenAIServer(strict=False) as lenient:
        lenient.enqueue(text_response("anything goes"))
        response = post(lenient, request(SYSTEM, USER, calling(CALL, content=None), USER))
        assert response.status_code == 200
        assert "anything goes" in "".join(_texts(response))
        assert lenient.rejections == []


def test_a_refusal_no_test_looked_at_fails_when_the_server_stops() -> None:
    server = FakeOpenAIServer().start()
    post(server, request(max_tokens=0))
    with pytest.raises(AssertionError, match=r"refused 1 request\(s\) that no test looked at"):
        server.__exit__(None, None, None)


def test_a_refusal_a_test_read_does_not_fail_the_server() -> None:
    with FakeOpenAIServer() as server:
        post(server, request(max_tokens=0))
        assert len(server.rejections) == 1
    # nor does one while the test fails for its own reason, which must stay the one reported
    with pytest.raises(KeyError, match="the test's own failure"), FakeOpenAIServer() as server:
        post(server, request(max_tokens=0))
        raise KeyError("the test's own failure")


def test_other_routes_are_not_validated(server: FakeOpenAIServer) -> None:
    response = httpx.post(server.base_url + "/embeddings", content=b"not json", timeout=10)
    assert response.status_code == 404
    assert server.rejections == []


# --- what must pass --------------------------------------------------------------------------

LIST_DIR = ToolSpec(
    "list_dir", "List a folder.", {"type": "object", "properties": {"path": {"type": "string"}}}
)
READ_FILE = ToolSpec(
    "read_file",
    "Read a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def _assistant(*blocks: TextBlock | ThinkingBlock | ToolCallBlock) -> Message:
    return Message(role="assistant", content=list(blocks))


def _results(*pairs: tuple[str, str]) -> Message:
    blocks = [ToolResultBlock(call_id=i, name="list_dir", content=c) for i, c in pairs]
    return Message(role="tool", content=list(blocks))


RUNTIME_REQUESTS = {
    "plain-text": ModelRequest(
        system=[SystemPart("core", "Be brief.")], messages=[user_text("hi")]
    ),
    "no-system-prompt": ModelRequest(system=[], messages=[user_text("hi")]),
    "tools-offered": ModelRequest(
        system=[SystemPart("core", "Be brief.")],
        messages=[user_text("what is here?")],
        tools=[LIST_DIR, READ_FILE],
        max_output_tokens=1024,
        temperature=0.0,
    ),
    "tool-call-without-text-and-its-result": ModelRequest(
        system=[SystemPart("core", "Be brief.")],
        messages=[
            user_text("what is here?"),
            _assistant(ToolCallBlock(id="call_1", name="list_dir", arguments='{"path": "."}')),
            _results(("call_1", "a.txt\nb.txt")),
        ],
        tools=[LIST_DIR, READ_FILE],
    ),
    "tool-calls-with-text-thinking-and-results-then-a-new-turn": ModelRequest(
        system=[SystemPart("core", "Be brief."), SystemPart("env", "cwd: /p", stable=False)],
        messages=[
            user_text("read both"),
            _assistant(
                ThinkingBlock(text="two files"),
                TextBlock(text="Reading them."),
                ToolCallBlock(id="call_1", name="read_file", arguments='{"path": "a"}'),
                ToolCallBlock(id="call_2", name="read_file", arguments=""),
            ),
            _results(("call_1", "A"), ("call_2", "error: path is required")),
            _assistant(TextBlock(text="A, and b failed.")),
            user_text("thanks"),
        ],
        tools=[LIST_DIR, READ_FILE],
        max_output_tokens=1,
        temperature=2.0,
    ),
}


@pytest.mark.parametrize("name", list(RUNTIME_REQUESTS))
def test_requests_the_runtime_builds_pass(server: FakeOpenAIServer, name: str) -> None:
    server.enqueue(text_response("ok"))
    body = build_body("fake-model", RUNTIME_REQUESTS[name])
    response = post(server, body)
    assert server.rejections == [], [str(r) for r in server.rejections]
    assert response.status_code == 200 and "ok" in "".join(_texts(response))


VALID = {
    "plain-text": request(USER),
    "system-prompt": request(SYSTEM, USER),
    "developer-prompt": request({"role": "developer", "content": "Be brief."}, USER),
    "not-streamed": request(stream=False, stream_options=None),
    "user-content-parts": request(
        SYSTEM,
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
            ],
        },
    ),
    "tool-call-without-text": request(*TOOL_ROUND, tools=TOOLS),
    "tool-call-with-text": request(
        SYSTEM, USER, calling(CALL, content="Looking."), result("call_1")
    ),
    "assistant-text-parts": request(
        SYSTEM, USER, {"role": "assistant", "content": [{"type": "text", "text": "Hi."}]}, USER
    ),
    "parallel-calls-answered-in-any-order": request(
        SYSTEM,
        USER,
        calling(CALL, CALL_2),
        result("call_2", "A"),
        result("call_1", [{"type": "text", "text": "a.txt"}]),
        {"role": "assistant", "content": "Done."},
        USER,
        tools=TOOLS,
    ),
    "tool-choice-auto": request(tools=TOOLS, tool_choice="auto"),
    "tool-choice-none": request(tools=TOOLS, tool_choice="none"),
    "tool-choice-required": request(tools=TOOLS, tool_choice="required", parallel_tool_calls=True),
    "tool-choice-named": request(
        tools=TOOLS, tool_choice={"type": "function", "function": {"name": "read_file"}}
    ),
    "sampling-bounds": request(max_tokens=1, max_completion_tokens=1, temperature=0),
}


@pytest.mark.parametrize("name", list(VALID))
def test_valid_requests_pass(server: FakeOpenAIServer, name: str) -> None:
    server.enqueue(text_response("ok"))
    response = post(server, VALID[name])
    assert server.rejections == [], [str(r) for r in server.rejections]
    assert response.status_code == 200


def _texts(response: httpx.Response) -> list[str]:
    out: list[str] = []
    for line in response.text.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                out.append(choice["delta"].get("content") or "")
    return out
