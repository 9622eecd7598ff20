"""The ModelProvider contract as a caller sees it: ScriptedModel and a real adapter.

The real side is the OpenAI Chat Completions adapter against the strict fake OpenAI server on a
loopback port (the strictest of the wires: it sends the history as it is). Both answer scripted
text and tool calls the same way, and both refuse, as `bad_request`, the requests a strict
server refuses, without using up a scripted answer. The per-wire details (retries, error kinds,
usage) are in test_provider_contract.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import httpx
import pytest

from soong_agent.ports.errors import ProviderError
from soong_agent.ports.messages import Message, TextBlock, ToolCallBlock, ToolResultBlock, user_text
from soong_agent.ports.model import ModelProvider, ModelRequest, SystemPart, ToolChoice, ToolSpec
from soong_agent.ports.streaming import StreamEvent, StreamFinished, TextDelta, ToolCallReady
from soong_agent.testing import ScriptedModel, ScriptedResponse
from tests.contract.provider_matrix import KITS, Sleeps
from tests.support import fake_openai

READ_FILE = ToolSpec(
    "read_file",
    "Read a file.",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)

Call = tuple[str, str, dict[str, Any]]


class Kit(Protocol):
    provider: ModelProvider

    def text(self, text: str) -> None: ...

    def tool_calls(self, calls: list[Call]) -> None: ...

    def refusals(self) -> int: ...


class ScriptedKit:
    def __init__(self) -> None:
        self.model = ScriptedModel(unique_call_ids=False)
        self.provider: ModelProvider = self.model

    def text(self, text: str) -> None:
        self.model.script.append(ScriptedResponse.text(text, pieces=3))

    def tool_calls(self, calls: list[Call]) -> None:
        blocks = [ToolCallBlock(id=i, name=n, arguments=json.dumps(a)) for i, n, a in calls]
        self.model.script.append(ScriptedResponse.tool_calls(*blocks))

    def refusals(self) -> int:
        return len(self.model.rejections)


class OpenAIKit:
    def __init__(self, server: fake_openai.FakeOpenAIServer, client: httpx.AsyncClient) -> None:
        self.server = server
        self.provider = KITS["openai"].provider(client, server.base_url, sleep=Sleeps())

    def text(self, text: str) -> None:
        self.server.enqueue(fake_openai.text_response(text))

    def tool_calls(self, calls: list[Call]) -> None:
        self.server.enqueue(
            fake_openai.tool_call_response([(i, n, json.dumps(a)) for i, n, a in calls])
        )

    def refusals(self) -> int:
        return len(self.server.rejections)


async def _scripted() -> AsyncIterator[Kit]:
    yield ScriptedKit()


async def _openai() -> AsyncIterator[Kit]:
    with fake_openai.FakeOpenAIServer() as server:
        async with httpx.AsyncClient() as client:
            yield OpenAIKit(server, client)


KIT_MAKERS: dict[str, Callable[[], AsyncIterator[Kit]]] = {
    "scripted": _scripted,
    "openai": _openai,
}


@pytest.fixture(params=sorted(KIT_MAKERS))
async def kit(request: pytest.FixtureRequest) -> AsyncIterator[Kit]:
    async for made in KIT_MAKERS[request.param]():
        yield made


def request(*messages: Message, **fields: Any) -> ModelRequest:
    fields.setdefault("tools", (READ_FILE,))
    return ModelRequest(
        system=[SystemPart("core", "You are a contract test.")],
        messages=list(messages) or [user_text("hello")],
        **fields,
    )


async def collect(provider: ModelProvider, req: ModelRequest | None = None) -> list[StreamEvent]:
    async with asyncio.timeout(15):
        return [e async for e in provider.stream(req or request())]


def assistant_call(call_id: str = "call_1") -> Message:
    call = ToolCallBlock(id=call_id, name="read_file", arguments='{"path": "a"}')
    return Message(role="assistant", content=[call])


def tool_result(call_id: str = "call_1") -> Message:
    block = ToolResultBlock(call_id=call_id, name="read_file", content="contents")
    return Message(role="tool", content=[block])


def test_implements_the_port(kit: Kit) -> None:
    assert isinstance(kit.provider, ModelProvider)
    assert isinstance(kit.provider.label, str) and kit.provider.label


async def test_a_text_answer_streams_and_ends_once(kit: Kit) -> None:
    kit.text("Hello there, contract.")
    events = await collect(kit.provider)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello there, contract."
    assert events[-1] == StreamFinished("end_turn")
    assert sum(isinstance(e, StreamFinished) for e in events) == 1


async def test_tool_calls_arrive_whole(kit: Kit) -> None:
    kit.tool_calls([("call_a", "read_file", {"path": "a.txt"}), ("call_b", "read_file", {})])
    events = await collect(kit.provider)
    calls = [e.call for e in events if isinstance(e, ToolCallReady)]
    assert [(c.id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_a", "read_file", {"path": "a.txt"}),
        ("call_b", "read_file", {}),
    ]
    assert events[-1] == StreamFinished("tool_use")


async def test_a_well_formed_round_trip_is_accepted(kit: Kit) -> None:
    kit.text("done")
    req = request(user_text("read a"), assistant_call(), tool_result(), user_text("and now?"))
    events = await collect(kit.provider, req)
    assert events[-1] == StreamFinished("end_turn")
    assert kit.refusals() == 0


BAD_REQUESTS: dict[str, Callable[[], ModelRequest]] = {
    "result_of_no_call": lambda: request(user_text("hi"), tool_result("call_x")),
    "result_of_another_call": lambda: request(
        user_text("hi"), assistant_call("call_1"), tool_result("call_2")
    ),
    "call_answered_twice": lambda: request(
        user_text("hi"), assistant_call(), tool_result(), tool_result()
    ),
    "call_left_unanswered": lambda: request(
        user_text("hi"), assistant_call(), user_text("never mind")
    ),
    "call_unanswered_at_the_end": lambda: request(user_text("hi"), assistant_call()),
    "tool_name_with_a_space": lambda: request(
        tools=(ToolSpec("read file", "Read.", {"type": "object", "properties": {}}),)
    ),
    "tool_parameters_not_an_object": lambda: request(
        tools=(ToolSpec("read_file", "Read.", {"type": "string"}),)
    ),
    "tool_choice_of_an_unknown_tool": lambda: request(tool_choice=ToolChoice.parse("grep")),
    "temperature_above_2": lambda: request(temperature=2.5),
    "no_output_tokens": lambda: request(max_output_tokens=0),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
async def test_what_a_strict_server_refuses_is_a_bad_request(kit: Kit, case: str) -> None:
    kit.text("the answer to the next good request")
    with pytest.raises(ProviderError) as info:
        await collect(kit.provider, BAD_REQUESTS[case]())
    assert info.value.kind == "bad_request"
    assert not info.value.retryable
    assert kit.refusals() == 1
    # the refused request used up no scripted answer
    events = await collect(kit.provider)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == (
        "the answer to the next good request"
    )


async def test_text_beside_tool_results_in_one_message_is_accepted(kit: Kit) -> None:
    kit.text("ok")
    mixed = Message(
        role="user",
        content=[*tool_result().content, TextBlock(text="and here is more")],
    )
    events = await collect(kit.provider, request(user_text("hi"), assistant_call(), mixed))
    assert events[-1] == StreamFinished("end_turn")
