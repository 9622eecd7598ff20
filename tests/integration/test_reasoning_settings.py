"""Reasoning (PROV-7): `[model] reasoning_effort` sent as each provider takes it, and the
thinking a model streamed sent back where its provider requires it and left out where it
refuses it. Through the real adapters (and the SDK) against the strict loopback fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from soong_agent import AgentRuntime
from soong_agent.adapters.providers.anthropic_messages import AnthropicMessagesProvider
from soong_agent.adapters.providers.anthropic_wire import EFFORT_BUDGETS
from soong_agent.adapters.providers.ollama_chat import OllamaChatProvider
from soong_agent.adapters.providers.openai_chat import OpenAIChatProvider
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.ports.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    user_text,
)
from soong_agent.ports.model import ModelProvider, ModelRequest
from tests.support import fake_anthropic, fake_ollama, fake_openai
from tests.support.fake_anthropic import FakeAnthropicServer
from tests.support.fake_ollama import FakeOllamaServer
from tests.support.fake_openai import FakeOpenAIServer

ONCE = RetryPolicy(max_attempts=1)


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:
        yield c


def common(client: httpx.AsyncClient, base_url: str, model: str) -> dict[str, Any]:
    return {
        "client": client,
        "base_url": base_url,
        "model": model,
        "api_key": lambda: None,
        "retry": ONCE,
        "timeout_s": 10,
    }


async def send(provider: ModelProvider, messages: list[Message]) -> None:
    request = ModelRequest(system=[], messages=messages, max_output_tokens=1000)
    _ = [e async for e in provider.stream(request)]


def tool_loop(thinking: str) -> list[Message]:
    """A user turn, an assistant turn that thought and called a tool, its result."""
    return [
        user_text("read a.txt"),
        Message(
            role="assistant",
            content=[
                ThinkingBlock(text=thinking),
                ToolCallBlock(id="call_1", name="read_file", arguments='{"path": "a.txt"}'),
            ],
        ),
        Message(
            role="tool", content=[ToolResultBlock(call_id="call_1", name="read_file", content="A")]
        ),
    ]


# --- OpenAI-compatible ----------------------------------------------------------------------


@pytest.mark.parametrize("effort", ["low", "medium", "high"])
async def test_openai_sends_reasoning_effort_with_max_completion_tokens(
    client: httpx.AsyncClient, effort: str
) -> None:
    with FakeOpenAIServer() as server:  # strict: refuses max_tokens beside reasoning_effort
        server.enqueue(fake_openai.text_response("ok"))
        provider = OpenAIChatProvider(
            **common(client, server.base_url, "o4-mini"), reasoning_effort=effort
        )
        await send(provider, [user_text("hi")])
        [body] = [r.json for r in server.requests]
        assert server.rejections == []
    assert body["reasoning_effort"] == effort
    assert body["max_completion_tokens"] == 1000 and "max_tokens" not in body


async def test_openai_without_effort_sends_neither(client: httpx.AsyncClient) -> None:
    with FakeOpenAIServer() as server:
        server.enqueue(fake_openai.text_response("ok"))
        await send(
            OpenAIChatProvider(**common(client, server.base_url, "gpt-4o")), [user_text("hi")]
        )
        [body] = [r.json for r in server.requests]
    assert "reasoning_effort" not in body and "max_completion_tokens" not in body
    assert body["max_tokens"] == 1000


async def test_openai_leaves_thinking_out_of_the_input(client: httpx.AsyncClient) -> None:
    # OpenAI does not define reasoning_content on input messages; strict servers refuse it
    with FakeOpenAIServer() as server:
        server.enqueue(fake_openai.text_response("ok"))
        await send(OpenAIChatProvider(**common(client, server.base_url, "gpt-4o")), tool_loop("hm"))
        [body] = [r.json for r in server.requests]
        assert server.rejections == []
    assert body["messages"][1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
            }
        ],
    }


async def test_deepseek_gets_the_thinking_back(
    client: httpx.AsyncClient,
) -> None:
    answered = Message(
        role="assistant", content=[ThinkingBlock(text="easy"), TextBlock(text="Hi!")]
    )
    history = [user_text("hello"), answered, *tool_loop("I should read it")]
    with FakeOpenAIServer(thinking_mode=True) as server:  # refuses a tool-call turn without it
        server.enqueue(fake_openai.text_response("ok"))
        provider = OpenAIChatProvider(
            **common(client, server.base_url, "deepseek-reasoner"), reasoning_effort="high"
        )
        await send(provider, history)
        [body] = [r.json for r in server.requests]
        assert server.rejections == []
    messages = body["messages"]
    assert messages[1]["reasoning_content"] == "easy"  # not needed here; DeepSeek ignores it
    assert messages[3]["reasoning_content"] == "I should read it"  # needed: a tool-call turn
    assert body["max_tokens"] == 1000  # DeepSeek documents max_tokens only


async def test_a_deepseek_tool_loop_through_the_sdk(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("alpha\n", encoding="utf-8")
    with FakeOpenAIServer(thinking_mode=True) as server:
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.toml").write_text(
            f'[model]\nprovider = "openai"\nbase_url = "{server.base_url}"\napi_key_env = ""\n'
            'name = "deepseek-chat"\nreasoning_effort = "high"\n',
            encoding="utf-8",
        )
        server.enqueue(
            fake_openai.tool_call_response(
                [("call_7", "read_file", '{"path": "a.txt"}')], reasoning="Read the file first."
            ),
            fake_openai.text_response("It says alpha.", reasoning="Done."),
        )
        async with AgentRuntime(project_dir=project, home=home) as runtime:
            result = await (await runtime.run("what is in a.txt?")).wait()
        assert server.rejections == []
        second = server.requests[1].json
    assert result.status == "completed" and result.output == "It says alpha."
    assert second["reasoning_effort"] == "high"
    [turn] = [m for m in second["messages"] if m.get("tool_calls")]
    assert turn["reasoning_content"] == "Read the file first."


# --- Ollama ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "effort", "think"),
    [
        ("qwen3:8b", "high", True),
        ("deepseek-r1:14b", "low", True),
        ("gpt-oss:20b", "low", "low"),
        ("gpt-oss:120b", "high", "high"),
        ("qwen3:8b", None, None),
    ],
)
async def test_ollama_think_is_a_level_only_where_ollama_takes_levels(
    client: httpx.AsyncClient, model: str, effort: str | None, think: object
) -> None:
    with FakeOllamaServer() as server:
        server.enqueue(fake_ollama.text_response("ok", thinking="hm"))
        provider = OllamaChatProvider(
            **common(client, server.base_url, model), reasoning_effort=effort
        )
        await send(provider, [user_text("hi")])
        [body] = [r.json for r in server.requests]
        assert server.rejections == []
    assert body.get("think") == think
    assert ("think" in body) == (think is not None)


async def test_ollama_gets_the_thinking_back_in_its_field(client: httpx.AsyncClient) -> None:
    with FakeOllamaServer() as server:
        server.enqueue(fake_ollama.text_response("ok"))
        provider = OllamaChatProvider(**common(client, server.base_url, "gpt-oss:20b"))
        await send(provider, tool_loop("look at a.txt"))
        [body] = [r.json for r in server.requests]
        assert server.rejections == []
    assert body["messages"][1]["thinking"] == "look at a.txt"
    assert body["messages"][1]["tool_calls"][0]["function"]["name"] == "read_file"


# --- Anthropic ------------------------------------------------------------------------------


@pytest.mark.parametrize("effort", ["low", "medium", "high"])
async def test_anthropic_effort_becomes_a_thinking_budget(
    client: httpx.AsyncClient, effort: str
) -> None:
    with FakeAnthropicServer() as server:
        server.enqueue(fake_anthropic.text_response("ok"))
        provider = AnthropicMessagesProvider(
            **common(client, server.base_url, "claude-sonnet-4-5"), reasoning_effort=effort
        )
        await send(provider, [user_text("hi")])
        [body] = [r.json for r in server.requests]
        assert server.rejections == []
    budget = EFFORT_BUDGETS[effort]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert body["max_tokens"] > budget


async def test_anthropic_explicit_budget_wins_over_effort(client: httpx.AsyncClient) -> None:
    with FakeAnthropicServer() as server:
        server.enqueue(fake_anthropic.text_response("ok"))
        provider = AnthropicMessagesProvider(
            **common(client, server.base_url, "claude-sonnet-4-5"),
            reasoning_effort="high",
            thinking_budget_tokens=1024,
        )
        await send(provider, [user_text("hi")])
        [body] = [r.json for r in server.requests]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}


async def test_anthropic_tool_loop_sends_the_signed_thinking_back(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "a.txt").write_text("alpha\n", encoding="utf-8")
    with FakeAnthropicServer() as server:  # strict: the tool loop needs the signed thinking
        home = tmp_path / "home"
        home.mkdir()
        (home / "config.toml").write_text(
            f'[model]\nprovider = "anthropic"\nbase_url = "{server.base_url}"\napi_key_env = ""\n'
            'name = "claude-sonnet-4-5"\nreasoning_effort = "low"\n',
            encoding="utf-8",
        )
        server.enqueue(
            fake_anthropic.thinking_response(
                "I will read it.", "", calls=[("toolu_1", "read_file", '{"path": "a.txt"}')]
            ),
            fake_anthropic.text_response("alpha"),
        )
        async with AgentRuntime(project_dir=project, home=home) as runtime:
            result = await (await runtime.run("what is in a.txt?")).wait()
        assert server.rejections == []
        second = server.requests[1].json
    assert result.status == "completed"
    assert second["thinking"] == {"type": "enabled", "budget_tokens": EFFORT_BUDGETS["low"]}
    assert second["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "I will read it.",
        "signature": fake_anthropic.DEFAULT_SIGNATURE,
    }


async def test_an_unknown_effort_is_refused_when_the_provider_is_made(
    client: httpx.AsyncClient,
) -> None:
    with pytest.raises(ValueError, match="reasoning_effort"):
        AnthropicMessagesProvider(
            **common(client, "http://127.0.0.1:9", "claude"), reasoning_effort="max"
        )
