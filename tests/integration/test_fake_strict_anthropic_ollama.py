"""The strict mode of the Anthropic and Ollama fakes: each rule, and how a refusal is answered."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.support import fake_anthropic, fake_ollama
from tests.support.fake_anthropic import FakeAnthropicServer, validate_messages_request
from tests.support.fake_ollama import FakeOllamaServer, validate_chat_request
from tests.support.images import PNG_B64

Body = dict[str, Any]
Edit = Callable[[Body], None]

SIG = "EqQBCkgIARAB/sig+=="

# --- Anthropic Messages ----------------------------------------------------------------------


def anthropic_body() -> Body:
    """A valid request touching every rule: cached system and tools, a thinking tool loop."""
    return {
        "model": "claude-test",
        "max_tokens": 4096,
        "stream": True,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "list the dir"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "ls it", "signature": SIG},
                    {"type": "text", "text": "Listing."},
                    {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a\nb"},
                    {"type": "text", "text": "and be quick"},
                ],
            },
        ],
        "tools": [
            {
                "name": "ls",
                "description": "List.",
                "input_schema": {"type": "object", "properties": {}},
                "cache_control": {"type": "ephemeral"},
            }
        ],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "enabled", "budget_tokens": 2048},
    }


def set_(path: str, value: Any) -> Edit:
    """An edit setting the value at a dotted path ("messages.1.content.0.signature")."""

    def edit(body: Body) -> None:
        *parents, last = path.split(".")
        node: Any = body
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return edit


def drop(path: str) -> Edit:
    def edit(body: Body) -> None:
        *parents, last = path.split(".")
        node: Any = body
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        del node[int(last) if isinstance(node, list) else last]

    return edit


def no_thinking(body: Body) -> None:
    del body["thinking"]
    del body["messages"][1]["content"][0]


def both(*edits: Edit) -> Edit:
    def edit(body: Body) -> None:
        for e in edits:
            e(body)

    return edit


def anthropic_problems(edit: Edit) -> list[str]:
    body = anthropic_body()
    edit(body)
    return validate_messages_request(json.dumps(body).encode())


def test_the_anthropic_reference_body_is_valid() -> None:
    assert anthropic_problems(lambda body: None) == []
    assert anthropic_problems(no_thinking) == []


ANTHROPIC_RULES: list[tuple[str, Edit, str]] = [
    ("unknown field", set_("stop", ["x"]), "stop: Extra inputs are not permitted"),
    ("no model", drop("model"), "model: Field required"),
    ("max_tokens 0", set_("max_tokens", 0), "max_tokens"),
    ("stream not bool", set_("stream", "yes"), "stream: Input should be a valid boolean"),
    (
        "temperature over 1",
        both(no_thinking, set_("temperature", 1.5)),
        "temperature: Input should be a number between 0 and 1",
    ),
    (
        "blank system block",
        set_("system.0.text", "  "),
        "system: text content blocks must be non-empty",
    ),
    ("no messages", set_("messages", []), "messages: at least one message is required"),
    ("system role", set_("messages.0.role", "system"), "Input should be 'user' or 'assistant'"),
    (
        "assistant first",
        both(
            no_thinking, lambda b: b["messages"].insert(0, {"role": "assistant", "content": "Hi"})
        ),
        'first message must use the "user" role',
    ),
    (
        "empty content",
        lambda b: b["messages"].insert(1, {"role": "user", "content": []}),
        "messages.1: all messages must have non-empty content except for the optional final",
    ),
    (
        "empty text block",
        set_("messages.0.content.0.text", ""),
        "messages: text content blocks must be non-empty",
    ),
    (
        "whitespace text block",
        set_("messages.1.content.1.text", " \n"),
        "messages: text content blocks must contain non-whitespace text",
    ),
    (
        "tool_use in a user message",
        set_("messages.0.content.0", {"type": "tool_use", "id": "x", "name": "ls", "input": {}}),
        "not permitted in `user` messages",
    ),
    (
        "unsigned thinking",
        drop("messages.1.content.0.signature"),
        "messages.1.content.0.thinking.signature: Field required",
    ),
    (
        "redacted thinking without data",
        set_("messages.1.content.0", {"type": "redacted_thinking"}),
        "redacted_thinking.data: Field required",
    ),
    (
        "thinking not first",
        lambda b: b["messages"][1]["content"].reverse(),
        "the first block must be thinking or redacted_thinking. Found tool_use.",
    ),
    (
        "thinking last",
        both(
            no_thinking,
            lambda b: b["messages"].extend(
                [
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "text", "text": "Done."},
                            {"type": "thinking", "thinking": "x", "signature": SIG},
                        ],
                    },
                    {"role": "user", "content": "ok"},
                ]
            ),
        ),
        "The final block in an assistant message cannot be `thinking`.",
    ),
    (
        "bad tool_use id",
        both(
            set_("messages.1.content.2.id", "a.b:0"),
            set_("messages.2.content.0.tool_use_id", "a.b:0"),
        ),
        "messages.1.content.2.tool_use.id: String should match pattern",
    ),
    (
        "tool_use input not an object",
        set_("messages.1.content.2.input", "{}"),
        "tool_use.input: Input should be a valid dictionary",
    ),
    (
        "unanswered tool_use",
        drop("messages.2.content.0"),
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "toolu_1",
    ),
    (
        "result without its call",
        set_("messages.2.content.0.tool_use_id", "toolu_9"),
        "messages.2: unexpected `tool_use_id` found in `tool_result` blocks: toolu_9",
    ),
    (
        "result after text",
        lambda b: b["messages"][2]["content"].reverse(),
        "tool_result blocks must come first",
    ),
    (
        "empty error result",
        both(set_("messages.2.content.0.is_error", True), set_("messages.2.content.0.content", "")),
        "content cannot be empty if `is_error` is true",
    ),
    (
        "prefill ending in whitespace",
        both(
            no_thinking,
            lambda b: b["messages"].append({"role": "assistant", "content": "Answer: "}),
        ),
        "final assistant content cannot end with trailing whitespace",
    ),
    (
        "five cache breakpoints",
        lambda b: [
            blk.update(cache_control={"type": "ephemeral"})
            for m in b["messages"]
            for blk in m["content"]
        ],
        "A maximum of 4 blocks with cache_control may be provided. Found",
    ),
    ("bad tool name", set_("tools.0.name", "read file"), "tools.0.name: String should match"),
    (
        "schema without type",
        set_("tools.0.input_schema", {"properties": {}}),
        "tools.0.input_schema",
    ),
    (
        "tool_choice naming no tool",
        set_("tool_choice", {"type": "tool", "name": "grep"}),
        "no tool named 'grep'",
    ),
    (
        "tool_choice without tools",
        both(drop("tools"), no_thinking, drop("messages.2"), drop("messages.1")),
        "tool_choice: may only be specified while providing tools",
    ),
    (
        "budget under 1024",
        set_("thinking.budget_tokens", 512),
        "thinking.enabled.budget_tokens",
    ),
    (
        "budget not under max_tokens",
        set_("max_tokens", 2048),
        "`max_tokens` must be greater than `thinking.budget_tokens`",
    ),
    ("thinking with temperature", set_("temperature", 0.2), "only be set to 1 when thinking"),
    (
        "thinking with forced tool use",
        set_("tool_choice", {"type": "any"}),
        "Thinking may not be enabled when tool_choice forces tool use.",
    ),
    (
        "thinking with a prefill",
        lambda b: b["messages"].extend([{"role": "assistant", "content": "ok"}]),
        "Prefilling the assistant message is not supported with thinking enabled",
    ),
    (
        "thinking in a tool loop without a thinking block",
        drop("messages.1.content.0"),
        "When `thinking` is enabled, a final `assistant` message must start with a thinking block",
    ),
    (
        "thinking disabled with thinking in a final assistant message",
        both(
            drop("thinking"),
            drop("messages.2"),
            drop("messages.1.content.2"),
        ),
        "When thinking is disabled, an `assistant` message in the final position cannot contain",
    ),
]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [pytest.param(edit, expected, id=name) for name, edit, expected in ANTHROPIC_RULES],
)
def test_each_anthropic_rule(edit: Edit, expected: str) -> None:
    problems = anthropic_problems(edit)
    assert any(expected in p for p in problems), problems


def test_consecutive_same_role_messages_are_accepted() -> None:
    def two_users(body: Body) -> None:
        no_thinking(body)
        body["messages"].append({"role": "user", "content": "one more thing"})

    assert anthropic_problems(two_users) == []


def test_a_refused_request_is_answered_like_the_api_and_consumes_nothing() -> None:
    body = anthropic_body()
    drop("messages.1.content.0.signature")(body)
    with FakeAnthropicServer() as srv:
        srv.enqueue(fake_anthropic.text_response("kept for later"))
        response = httpx.post(srv.base_url + "/v1/messages", json=body)
        assert response.status_code == 400
        answer = response.json()
        assert answer["type"] == "error"
        assert answer["error"] == {
            "type": "invalid_request_error",
            "message": "messages.1.content.0.thinking.signature: Field required",
        }
        assert answer["request_id"].startswith("req_")
        [rejection] = srv.rejections
        assert rejection.request_index == 0
        assert rejection.status == 400
        assert rejection.messages == ["messages.1.content.0.thinking.signature: Field required"]
        assert srv.pending == 1
        ok = httpx.post(srv.base_url + "/v1/messages", json=anthropic_body())
        assert ok.status_code == 200
        assert srv.pending == 0
        assert len(srv.requests) == 2
        assert len(srv.rejections) == 1


def test_anthropic_strict_mode_can_be_turned_off() -> None:
    with FakeAnthropicServer(strict=False) as srv:
        srv.enqueue(fake_anthropic.text_response("served anyway"))
        response = httpx.post(srv.base_url + "/v1/messages", json={"model": "m"})
        assert response.status_code == 200
        assert srv.rejections == []
        assert srv.pending == 0


# --- Ollama /api/chat ------------------------------------------------------------------------


def ollama_body() -> Body:
    return {
        "model": "llama3.2",
        "stream": True,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "list the dir", "images": [PNG_B64]},
            {
                "role": "assistant",
                "content": "",
                "thinking": "ls it",
                "tool_calls": [{"function": {"name": "ls", "arguments": {"path": "."}}}],
            },
            {"role": "tool", "content": "a\nb", "tool_name": "ls"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "ls",
                    "description": "List.",
                    "parameters": {"type": "object", "properties": {}},
                },
            }
        ],
        "options": {"num_predict": 256, "temperature": 0.2},
    }


def ollama_problems(edit: Edit) -> list[str]:
    body = ollama_body()
    edit(body)
    return validate_chat_request(json.dumps(body).encode())


def test_the_ollama_reference_body_is_valid() -> None:
    assert ollama_problems(lambda body: None) == []
    assert ollama_problems(set_("think", True)) == []
    assert ollama_problems(set_("think", "low")) == []
    assert ollama_problems(set_("messages.2.content", None)) == []  # Go decodes null as ""
    assert ollama_problems(set_("keep_alive", "5m")) == []  # unknown fields are ignored


OLLAMA_RULES: list[tuple[str, Edit, str]] = [
    ("no model", drop("model"), "model is required"),
    ("no messages", set_("messages", []), "messages is empty"),
    ("stream not bool", set_("stream", 1), "cannot unmarshal number into Go struct field"),
    ("unknown role", set_("messages.1.role", "human"), "role must be one of"),
    (
        "content parts",
        set_("messages.1.content", [{"type": "text", "text": "hi"}]),
        "json: cannot unmarshal array into Go struct field Message.messages.content of type string",
    ),
    ("images not strings", set_("messages.1.images", [1]), "[]api.ImageData"),
    (
        "images not base64",
        set_("messages.1.images", ["a!b"]),
        "illegal base64 data at input byte 1",
    ),
    ("images not an image", set_("messages.1.images", ["aGk="]), "image: unknown format"),
    ("think not a level", set_("think", "max"), 'invalid think value: "max"'),
    ("think a number", set_("think", 2), "ChatRequest.think"),
    (
        "arguments as a string",
        set_("messages.2.tool_calls.0.function.arguments", '{"path": "."}'),
        "json: cannot unmarshal string into Go struct field "
        "ChatRequest.messages.tool_calls.function.arguments of type api.ToolCallFunctionArguments",
    ),
    (
        "tool call without a name",
        set_("messages.2.tool_calls.0.function.name", ""),
        "function.name is required",
    ),
    (
        "tool calls on a user message",
        set_("messages.1.tool_calls", [{"function": {"name": "ls", "arguments": {}}}]),
        "only assistant messages carry tool_calls",
    ),
    ("tool message without tool_name", drop("messages.3.tool_name"), "tool_name"),
    (
        "properties as an array",
        set_("tools.0.function.parameters.properties", []),
        "cannot unmarshal array into Go struct field "
        "ToolFunctionParameters.tools.function.parameters.properties",
    ),
    ("tool without type", drop("tools.0.type"), 'type must be "function"'),
    (
        "num_predict as text",
        set_("options.num_predict", "256"),
        'option "num_predict" must be of type integer',
    ),
    ("options not an object", set_("options", [1]), "ChatRequest.options"),
]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [pytest.param(edit, expected, id=name) for name, edit, expected in OLLAMA_RULES],
)
def test_each_ollama_rule(edit: Edit, expected: str) -> None:
    problems = ollama_problems(edit)
    assert any(expected in p for p in problems), problems


def test_a_refused_chat_is_answered_like_ollama_and_consumes_nothing() -> None:
    body = copy.deepcopy(ollama_body())
    set_("messages.2.tool_calls.0.function.arguments", "{}")(body)
    with FakeOllamaServer() as srv:
        srv.enqueue(fake_ollama.text_response("kept for later"))
        response = httpx.post(srv.base_url + "/api/chat", json=body)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error.startswith("json: cannot unmarshal string into Go struct field")
        [rejection] = srv.rejections
        assert (rejection.request_index, rejection.status) == (0, 400)
        assert rejection.messages == [error]
        assert srv.pending == 1
        assert httpx.post(srv.base_url + "/api/chat", json=ollama_body()).status_code == 200
        assert srv.pending == 0


def test_ollama_strict_mode_can_be_turned_off() -> None:
    with FakeOllamaServer(strict=False) as srv:
        srv.enqueue(fake_ollama.text_response("served anyway"))
        response = httpx.post(srv.base_url + "/api/chat", json={"messages": "nope"})
        assert response.status_code == 200
        assert srv.rejections == []
