"""A branch starts from a user message only (CTX-3, `context.allow_branch_from =
"user_message"`), through the SDK: `runtime.run(..., from_message=<id>)` naming an assistant
or a tool message is a UsageError naming that message and saying where a branch may start,
and nothing is written; a message the runtime wrote in the user's place (a continuation
prompt) is refused too. Branching from the user's own message works (the control)."""

from __future__ import annotations

from pathlib import Path

import pytest

from soong_agent import AgentRuntime
from soong_agent.ports.errors import UsageError
from soong_agent.ports.messages import Message
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    (project / "notes.txt").write_text("alpha\n", encoding="utf-8")
    write_minimal_config(home)
    return project, home


def first_of(path: list[Message], role: str, kind: str = "normal") -> Message:
    return next(m for m in path if m.role == role and m.kind == kind)


async def test_a_branch_from_an_assistant_or_tool_message_is_refused_naming_it(
    world: tuple[Path, Path],
) -> None:
    project, home = world
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("read_file", {"path": "notes.txt"})),
            ScriptedResponse.text("the notes say alpha"),
            ScriptedResponse.text("a branch from the question"),
        ]
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        first = await (await runtime.run("what do the notes say?")).wait()
        store = runtime._container.adapters.session_store()
        path = await store.active_path(first.session_id)
        assert [m.role for m in path] == ["user", "assistant", "tool", "assistant"]
        runs_before = await store.list_runs(first.session_id)
        for message in (first_of(path, "assistant"), first_of(path, "tool")):
            with pytest.raises(UsageError) as refused:
                await runtime.run("go on", session_id=first.session_id, from_message=message.id)
            said = str(refused.value)
            assert message.id in said and f"{message.role} message" in said
            assert "a branch starts from a user message" in said
        # nothing was written: no run, no message, the same active path
        assert await store.list_runs(first.session_id) == runs_before
        assert await store.active_path(first.session_id) == path
        calls = len(model.calls)
        user = first_of(path, "user")
        branched = await runtime.run(
            "again, shorter", session_id=first.session_id, from_message=user.id
        )
        assert (await branched.wait()).status == "completed"
        assert len(model.calls) == calls + 1
        assert [m.text for m in model.last_call.messages] == ["again, shorter"]


async def continuation_refusal(world: tuple[Path, Path]) -> tuple[Message, str]:
    """A run cut at max_tokens (the runtime asks the model to go on, in a user message of
    kind `continuation`), then a branch from that prompt: the prompt and the refusal."""
    project, home = world
    model = ScriptedModel(
        [
            ScriptedResponse.text("the first half", stop_reason="max_tokens"),
            ScriptedResponse.text(" and the second half"),
        ]
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        first = await (await runtime.run("write a long answer")).wait()
        store = runtime._container.adapters.session_store()
        path = await store.active_path(first.session_id)
        prompt = first_of(path, "user", kind="continuation")
        with pytest.raises(UsageError) as refused:
            await runtime.run("x", session_id=first.session_id, from_message=prompt.id)
        assert await store.active_path(first.session_id) == path
    return prompt, str(refused.value)


async def test_a_branch_from_a_continuation_prompt_is_refused_saying_what_it_is(
    world: tuple[Path, Path],
) -> None:
    prompt, said = await continuation_refusal(world)
    assert prompt.id in said and "a branch starts from a user message" in said
    assert "continuation" in said and "is a user message;" not in said
