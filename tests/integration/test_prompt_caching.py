"""Caching that pays (PROV-7): Anthropic's rolling cache breakpoints, a byte-stable prefix and
`prompt_cache_key` for OpenAI-compatible servers, and usage and cost that show cache reads.

The Anthropic runs go through the SDK (the real loop, system prompt and tools) to the strict
fake server, which computes each answer's cache figures from the request as the API does
(`tests/support/anthropic_cache.py`).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from soong_agent import AgentRuntime
from soong_agent.adapters.providers.anthropic_messages import AnthropicMessagesProvider
from soong_agent.adapters.providers.openai_chat import OpenAIChatProvider
from soong_agent.adapters.providers.openai_wire import accepts_cache_key
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.ports.events import UsageEvent
from soong_agent.ports.messages import Message, ToolCallBlock, ToolResultBlock, user_text
from soong_agent.ports.model import ModelRequest, SystemPart, ToolSpec
from tests.support import fake_anthropic, fake_openai
from tests.support.anthropic_cache import PromptCache, block_tokens
from tests.support.fake_anthropic import FakeAnthropicServer
from tests.support.fake_openai import FakeOpenAIServer

PRICE = (
    "[model.price]\n"
    "input_per_mtok = 3.0\n"
    "output_per_mtok = 15.0\n"
    "cache_read_per_mtok = 0.3\n"
    "cache_write_per_mtok = 3.75\n"
)


@pytest.fixture
def anthropic() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer(prompt_cache=True) as srv:
        yield srv


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    for i in range(12):
        (folder / f"notes{i}.txt").write_text(f"note {i}: " + "words " * 200, encoding="utf-8")
    return folder


def home_for(tmp_path: Path, provider: str, base_url: str, name: str, extra: str = "") -> Path:
    home = tmp_path / f"home-{provider}"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(
        "[model]\n"
        f'provider = "{provider}"\n'
        f'base_url = "{base_url}"\n'
        'api_key_env = ""\n'
        f'name = "{name}"\n' + extra,
        encoding="utf-8",
    )
    return home


def reads(calls: int, *, start: int = 0) -> list[tuple[str, str, str]]:
    """`calls` read_file calls, one a turn (ids toolu_<n>)."""
    return [
        (f"toolu_{start + i}", "read_file", json.dumps({"path": f"notes{(start + i) % 12}.txt"}))
        for i in range(calls)
    ]


def breakpoints(body: dict[str, Any]) -> list[str]:
    """Where the request's cache breakpoints are: `tools[i]`, `system[i]`, `messages[n][m]`."""
    found = [f"tools[{i}]" for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    found += [f"system[{i}]" for i, b in enumerate(body.get("system", [])) if "cache_control" in b]
    for n, message in enumerate(body["messages"]):
        found += [
            f"messages[{n}][{m}]"
            for m, block in enumerate(message["content"])
            if "cache_control" in block
        ]
    return found


def prefix_upto(body: dict[str, Any], n: int, m: int) -> str:
    """The request's messages up to and including block m of message n, without markers."""
    messages = [dict(msg, content=list(msg["content"])) for msg in body["messages"][: n + 1]]
    messages[-1]["content"] = messages[-1]["content"][: m + 1]
    return json.dumps(messages).replace(', "cache_control": {"type": "ephemeral"}', "")


async def test_breakpoints_move_with_the_conversation_and_the_next_request_reads_what_one_wrote(
    anthropic: FakeAnthropicServer, project: Path, tmp_path: Path
) -> None:
    home = home_for(tmp_path, "anthropic", anthropic.base_url, "claude-sonnet-4-5", PRICE)
    calls = reads(6)
    anthropic.enqueue(
        *[fake_anthropic.tool_call_response([c]) for c in calls],
        fake_anthropic.text_response("All read."),
        fake_anthropic.tool_call_response(reads(2, start=6)[:1]),
        fake_anthropic.text_response("And that one."),
    )
    async with AgentRuntime(project_dir=project, home=home) as runtime:
        first = await runtime.run("read the notes one by one")
        assert (await first.wait()).status == "completed"
        second = await runtime.run("read one more", session_id=first.session_id)
        assert (await second.wait()).status == "completed"
        usages = [
            e for run in (first, second) async for e in run.events() if isinstance(e, UsageEvent)
        ]
    assert anthropic.rejections == []
    bodies = [r.json for r in anthropic.requests]
    assert len(bodies) == 9  # 7 calls for the first run, 2 for the second
    for body in bodies:
        marks = breakpoints(body)
        assert len(marks) <= 4, marks
        # the last tool and the stable system prompt, then the two newest user turns
        assert marks[:2] == [f"tools[{len(body['tools']) - 1}]", "system[0]"]
        users = [n for n, msg in enumerate(body["messages"]) if msg["role"] == "user"]
        newest = [f"messages[{n}][{len(body['messages'][n]['content']) - 1}]" for n in users[-2:]]
        assert marks[2:] == newest
    for before, after in itertools.pairwise(bodies):
        # the breakpoint the next request reads at is where this one wrote its newest
        n, m = map(int, breakpoints(before)[-1][9:-1].split("]["))
        assert breakpoints(after)[-2] == f"messages[{n}][{m}]"
        assert prefix_upto(after, n, m) == prefix_upto(before, n, m)
    figures = [e.usage for e in usages]
    assert len(figures) == 9
    for earlier, later in itertools.pairwise(figures):
        # each request reads exactly the prefix the one before it wrote
        assert later.cache_read_tokens == earlier.cache_read_tokens + earlier.cache_write_tokens
    from_third = figures[2:]
    read = sum(u.cache_read_tokens for u in from_third)
    total = sum(u.input_tokens + u.cache_read_tokens + u.cache_write_tokens for u in from_third)
    assert read / total >= 0.8, (read, total)
    # the cost prices the reads at the cache price, not the input price
    cost = usages[-1].cost_usd
    u = figures[-1]
    expected = (
        u.input_tokens * 3.0
        + u.output_tokens * 15.0
        + u.cache_read_tokens * 0.3
        + u.cache_write_tokens * 3.75
    ) / 1e6
    assert cost == pytest.approx(expected, abs=1e-6)
    assert u.cache_read_tokens > 0


def conversation(turns: int, results_per_turn: int) -> list[Message]:
    """A tool loop of `turns` assistant turns, each making `results_per_turn` calls."""
    history: list[Message] = [user_text("go")]
    for t in range(turns):
        ids = [f"t{t}_{i}" for i in range(results_per_turn)]
        history.append(
            Message(
                role="assistant",
                content=[ToolCallBlock(id=c, name="read_file", arguments="{}") for c in ids],
            )
        )
        history.append(
            Message(
                role="tool",
                content=[
                    ToolResultBlock(call_id=c, name="read_file", content="line\n" * 300)
                    for c in ids
                ],
            )
        )
    return history


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:
        yield c


def anthropic_provider(client: httpx.AsyncClient, base_url: str) -> AnthropicMessagesProvider:
    return AnthropicMessagesProvider(
        client=client,
        base_url=base_url,
        model="claude-sonnet-4-5",
        api_key=lambda: None,
        retry=RetryPolicy(max_attempts=1),
        timeout_s=10,
    )


async def test_a_turn_of_many_tool_results_still_reads_the_last_prefix(
    anthropic: FakeAnthropicServer, client: httpx.AsyncClient
) -> None:
    # 25 results a turn: more blocks than the API looks back from one breakpoint (about 20),
    # so only the breakpoint on the previous user turn finds what the last request wrote
    provider = anthropic_provider(client, anthropic.base_url)
    system = [SystemPart("core", "You are a careful agent. " * 200)]
    tools = [ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {}})]
    previous = None
    for turns in (1, 2, 3):
        anthropic.enqueue(fake_anthropic.text_response("ok"))
        request = ModelRequest(system=system, messages=conversation(turns, 25), tools=tools)
        events = [e async for e in provider.stream(request)]
        usage = next(e.usage for e in events if type(e).__name__ == "UsageReported")
        if previous is not None:
            assert (
                usage.cache_read_tokens == previous.cache_read_tokens + previous.cache_write_tokens
            )
        previous = usage
    assert anthropic.rejections == []
    # with one rolling breakpoint only, the same third request would find nothing to read
    cache = PromptCache()
    for body in [r.json for r in anthropic.requests]:
        for message in body["messages"][:-1]:
            for block in message["content"]:
                block.pop("cache_control", None)
        last = cache.usage(body)
    assert previous is not None
    assert last.cache_read_input_tokens < previous.cache_read_tokens / 2


def test_the_fake_cache_reads_only_prefixes_written_at_breakpoints() -> None:
    cache = PromptCache(min_tokens=10)
    text = "x" * 400
    body: dict[str, Any] = {
        "model": "m",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}],
            }
        ],
    }
    size = block_tokens(body["messages"][0]["content"][0])
    first = cache.usage(body)
    assert (first.cache_read_input_tokens, first.cache_creation_input_tokens) == (0, size)
    assert first.input_tokens == 0
    body["messages"].append({"role": "assistant", "content": [{"type": "text", "text": "ok"}]})
    body["messages"].append({"role": "user", "content": [{"type": "text", "text": "more"}]})
    del body["messages"][0]["content"][0]["cache_control"]
    again = cache.usage(body)  # no breakpoint at all: nothing is read (nor written)
    assert (again.cache_read_input_tokens, again.cache_creation_input_tokens) == (0, 0)
    body["messages"][-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
    hit = cache.usage(body)  # within the look-back of the new breakpoint
    assert hit.cache_read_input_tokens == size and hit.cache_creation_input_tokens > 0
    other = dict(body, model="other")  # caches are per model
    assert cache.usage(other).cache_read_input_tokens == 0


# --- OpenAI-compatible ----------------------------------------------------------------------


async def test_the_openai_prefix_is_byte_stable_across_turns_and_runs(
    project: Path, tmp_path: Path
) -> None:
    with FakeOpenAIServer() as server:
        home = home_for(tmp_path, "openai", server.base_url, "gpt-4o")
        server.enqueue(
            fake_openai.tool_call_response([("c1", "read_file", '{"path": "notes1.txt"}')]),
            fake_openai.tool_call_response([("c2", "read_file", '{"path": "notes2.txt"}')]),
            fake_openai.text_response("done"),
            fake_openai.text_response("again"),
        )
        async with AgentRuntime(project_dir=project, home=home) as runtime:
            run = await runtime.run("read two notes")
            await run.wait()
            more = await runtime.run("and now?", session_id=run.session_id)
            await more.wait()
        bodies = [r.json for r in server.requests]
        assert server.rejections == []
    assert len(bodies) == 4
    for before, after in itertools.pairwise(bodies):
        # the system prompt (its environment part has the date, not the time) and the tool
        # specs are the same bytes; every earlier message comes back unchanged, in order
        assert json.dumps(after["tools"]) == json.dumps(before["tools"])
        sent = before["messages"]
        assert json.dumps(after["messages"][: len(sent)]) == json.dumps(sent)
    assert all("prompt_cache_key" not in b for b in bodies)  # a loopback server: not known


async def test_prompt_cache_key_is_one_key_per_session(client: httpx.AsyncClient) -> None:
    assert accepts_cache_key("https://api.openai.com/v1")
    assert not accepts_cache_key("http://127.0.0.1:8080/v1")
    with FakeOpenAIServer() as server:
        provider = OpenAIChatProvider(
            client=client,
            base_url=server.base_url,
            model="gpt-4o",
            api_key=lambda: None,
            retry=RetryPolicy(max_attempts=1),
            timeout_s=10,
            prompt_cache_key=True,
        )
        session = [Message(id="msg_first", role="user", content=user_text("hi").content)]
        longer = [*session, Message(role="assistant", content=user_text("yes").content)]
        longer.append(user_text("more"))
        other = [Message(id="msg_other", role="user", content=user_text("hi").content)]
        for history in (session, longer, other):
            server.enqueue(fake_openai.text_response("ok"))
            _ = [e async for e in provider.stream(ModelRequest(system=[], messages=history))]
        keys = [r.json["prompt_cache_key"] for r in server.requests]
        assert server.rejections == []
    assert keys[0] == keys[1] != keys[2]
    assert keys[0].startswith("soong-") and "msg_first" not in keys[0]
