"""CFG-6 at the run's boundary: the recorder scrubs what is stored and published, never what the
model is sent; artifacts are scrubbed before their bytes are written."""

from __future__ import annotations

import json

import pytest

from soong_agent.adapters.redaction import SecretScrubber
from soong_agent.application.runs.assembler import RunAssembler, RunPolicies, RunPorts, RunSpec
from soong_agent.application.runs.handle import Run
from soong_agent.application.runs.loop import LoopSettings
from soong_agent.application.runs.service import RunService
from soong_agent.application.tools.base import ToolRegistry
from soong_agent.application.tools.files import file_tools
from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.ports.events import (
    RunEvent,
    RunStarted,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolCallRequested,
    ToolResultEvent,
)
from soong_agent.ports.messages import Message, ThinkingBlock, ToolResultBlock
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.testing import (
    DictSecretRedactor,
    DictSecretSource,
    FixedClock,
    InMemoryArtifactStore,
    InMemoryFileSystem,
    InMemorySessionStore,
    RecordingApprover,
    ScriptedModel,
    ScriptedResponse,
    SequentialIds,
    StaticContextSource,
)

KEY = "sk-live-canary-4c1d9e2f7a8b6053"
NAME = "OPENAI_API_KEY"
MARK = f"[redacted:{NAME}]"
AWS = "AKIAIOSFODNN7EXAMPLE"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEowIBAAKCAQEAx4Zb8n1cV3qk9wH0aYt2Q5mGvR7sLdPzJ0uKf1eWcT9bXyN2\n"
    "hU6oI3pL8rE5tY7wQ1aS4dF6gH9jK2lZ3xC5vB8nM1qW4eR7tY0uI3oP6aS9dF2g\n"
    "-----END RSA PRIVATE KEY-----\n"
)


class World:
    def __init__(
        self,
        model: ScriptedModel,
        *,
        files: dict[str, str | bytes] | None = None,
        redactor: SecretRedactor | None = None,
        max_result_chars: int = 30_000,
    ) -> None:
        self.model = model
        self.store = InMemorySessionStore()
        self.artifacts = InMemoryArtifactStore()
        self.redactor = redactor or SecretScrubber(DictSecretSource({NAME: KEY}), [NAME])
        ports = RunPorts(
            provider=model,
            store=self.store,
            fs=InMemoryFileSystem(files or {}),
            context=StaticContextSource(),
            clock=FixedClock(),
            ids=SequentialIds(),
            approver=RecordingApprover(default="allow_once"),
            artifacts=self.artifacts,
            redactor=self.redactor,
        )
        policies = RunPolicies(
            permissions=PermissionsConfig(mode="bypass"), max_result_chars=max_result_chars
        )
        spec = RunSpec(
            tools=ToolRegistry(file_tools()), settings=LoopSettings(model_label="scripted")
        )
        self.service = RunService(RunAssembler(ports, policies), spec)

    async def run(self, message: str, session_id: str | None = None) -> tuple[Run, list[RunEvent]]:
        run = await self.service.start(message, session_id=session_id)
        events = [e async for e in run.events()]
        result = await run.wait()
        assert result.status == "completed", result
        return run, events

    async def stored(self, run: Run) -> tuple[list[Message], list[RunEvent]]:
        messages = await self.store.all_messages(run.session_id)
        events = list(await self.store.run_events(run.run_id))
        return messages, events


def dump(messages: list[Message], events: list[RunEvent]) -> str:
    return json.dumps([m.model_dump() for m in messages] + [e.model_dump() for e in events])


def read_call(path: str) -> ScriptedResponse:
    return ScriptedResponse.tool_calls(("read_file", {"path": path}))


async def test_a_tool_result_holding_the_key_is_stored_and_published_scrubbed() -> None:
    env = f"DEBUG=1\n{NAME}={KEY}\nAWS_ACCESS_KEY_ID={AWS}\n"
    model = ScriptedModel([read_call(".env.example"), ScriptedResponse.text("Found it.")])
    world = World(model, files={".env.example": env})
    run, published = await world.run("what is in .env.example?")

    messages, events = await world.stored(run)
    for text in (dump(messages, events), dump([], published)):
        assert KEY not in text and AWS not in text
        assert MARK in text and "[redacted:aws_access_key]" in text
    result = next(e for e in published if isinstance(e, ToolResultEvent))
    assert "DEBUG=1" in result.content  # only the secrets go
    # the model received the result as the tool returned it (the user approved that call)
    sent = model.calls[1].messages[-1].tool_results[0].content
    assert KEY in sent and AWS in sent


async def test_the_in_memory_history_keeps_the_raw_text_but_a_resume_reads_the_placeholder() -> (
    None
):
    model = ScriptedModel(
        [read_call("notes.txt"), ScriptedResponse.text("ok"), ScriptedResponse.text("again")]
    )
    world = World(model, files={"notes.txt": f"the key: {KEY}\n"})
    first, _ = await world.run("read notes.txt")
    await world.run("and now?", session_id=first.session_id)
    resumed = model.calls[-1].messages
    results = [b for m in resumed for b in m.content if isinstance(b, ToolResultBlock)]
    assert MARK in results[0].content and KEY not in results[0].content


async def test_a_key_streamed_across_deltas_never_shows_in_any_delta() -> None:
    answer = f"Your key is {KEY}, keep it safe.\nAlso {AWS} here."
    model = ScriptedModel([ScriptedResponse.text(answer, pieces=len(answer) // 3)])
    world = World(model)
    run, published = await world.run("what is my key?")
    messages, events = await world.stored(run)

    deltas = [e.text for e in published if isinstance(e, TextDeltaEvent)]
    joined = "".join(deltas)
    assert joined == f"Your key is {MARK}, keep it safe.\nAlso [redacted:aws_access_key] here."
    assert all(KEY[:8] not in d and "AKIA" not in d for d in deltas)
    assert [e.text for e in events if isinstance(e, TextDeltaEvent)] == deltas
    assert messages[-1].text == joined
    # sequence numbers stay dense and ordered with the held-back text published in its place
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_thinking_is_scrubbed_but_its_signature_kept() -> None:
    model = ScriptedModel([ScriptedResponse.text("done", thinking=f"the key {KEY} is there")])
    world = World(model)
    run, _ = await world.run("think")
    messages, events = await world.stored(run)
    thinking = [e.text for e in events if isinstance(e, ThinkingDeltaEvent)]
    assert "".join(thinking) == f"the key {MARK} is there"
    block = next(b for b in messages[-1].content if isinstance(b, ThinkingBlock))
    assert block.text == f"the key {MARK} is there" and block.signature == "scripted-signature"


async def test_tool_call_arguments_title_and_run_started_are_scrubbed() -> None:
    args = {"path": "k.txt", "content": f"{NAME}={KEY}\n{PEM}"}
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(("write_file", args)), ScriptedResponse.text("written")]
    )
    world = World(model)
    run, _ = await world.run(f"save {KEY} to k.txt")
    messages, events = await world.stored(run)
    text = dump(messages, events)
    assert KEY not in text and "MIIEowIBAAKCAQEA" not in text
    assert "[redacted:private_key]" in text
    started = next(e for e in events if isinstance(e, RunStarted))
    assert started.message == f"save {MARK} to k.txt"
    call = next(e for e in events if isinstance(e, ToolCallRequested))
    assert json.loads(call.arguments)["path"] == "k.txt"
    session = await world.store.get_session(run.session_id)
    assert session is not None and session.title == f"save {MARK} to k.txt"
    # the file itself holds what the model asked for: the scrubber guards storage, not tools
    assert model.calls[1].messages[-2].tool_calls[0].arguments == json.dumps(args)


async def test_an_artifact_is_scrubbed_before_it_is_written() -> None:
    big = ("filler line\n" * 400) + f"{NAME}={KEY}\n{PEM}" + ("tail line\n" * 10)
    model = ScriptedModel([read_call("big.txt"), ScriptedResponse.text("read it")])
    world = World(model, files={"big.txt": big}, max_result_chars=1_000)
    run, _ = await world.run("read big.txt")
    (data,) = world.artifacts.data.values()
    stored = data.decode()
    assert KEY not in stored and "MIIEowIBAAKCAQEA" not in stored
    assert MARK in stored and "[redacted:private_key]" in stored
    assert "1\tfiller line\n" in stored[:40]  # the rest is kept as it was
    messages, events = await world.stored(run)
    assert KEY not in dump(messages, events)


async def test_the_fake_redactor_works_at_the_same_boundary() -> None:
    fake = DictSecretRedactor({"MY_TOKEN": "tok-123456789"})
    model = ScriptedModel([read_call("a.txt"), ScriptedResponse.text("ok tok-123456789")])
    world = World(model, files={"a.txt": "tok-123456789"}, redactor=fake)
    run, published = await world.run("go")
    messages, events = await world.stored(run)
    assert "tok-123456789" not in dump(messages, events) + dump([], published)
    assert fake.calls > 0


@pytest.mark.parametrize("pieces", [1, 3, 17])
async def test_ordinary_text_is_published_unchanged(pieces: int) -> None:
    answer = "Hello there, nothing secret: see https://example.com/a-b and task-runner."
    model = ScriptedModel([ScriptedResponse.text(answer, pieces=pieces)])
    world = World(model)
    run, published = await world.run("hi")
    assert "".join(e.text for e in published if isinstance(e, TextDeltaEvent)) == answer
    messages, _ = await world.stored(run)
    assert messages[-1].text == answer
