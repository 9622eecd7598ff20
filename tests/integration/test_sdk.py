"""The SDK as a user drives it: AgentRuntime over a real home, SQLite and the loopback server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from soong_agent import AgentRuntime, ApprovalRequest, ConfigError, SessionNotFound, UsageError
from soong_agent.testing import (
    InMemorySessionStore,
    ScriptedModel,
    ScriptedResponse,
    write_minimal_config,
)
from tests.support.fake_openai import FakeOpenAIServer, text_response, tool_call_response


@pytest.fixture
def home(tmp_path: Path) -> Path:
    write_minimal_config(tmp_path / "home")
    return tmp_path / "home"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    return tmp_path / "project"


def write_call(path: str = "out.txt", content: str = "data") -> ScriptedResponse:
    return ScriptedResponse.tool_calls(("write_file", {"path": path, "content": content}))


async def test_run_events_and_result_with_scripted_model(home: Path, project: Path) -> None:
    model = ScriptedModel([ScriptedResponse.text("hi there", pieces=2)])
    async with AgentRuntime(project_dir=project, home=home, model=model) as runtime:
        run = await runtime.run("hello")
        kinds = [e.type async for e in run.events()]
        result = await run.wait()
    assert result.status == "completed" and result.output == "hi there"
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert kinds.count("text_delta") == 2
    assert (home / "sessions.sqlite").exists()


@pytest.mark.parametrize("answer", ["allow_once", "allow_for_session", True])
async def test_sync_approval_callback_allows(home: Path, project: Path, answer: object) -> None:
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> object:
        asked.append(request)
        return answer

    model = ScriptedModel([write_call(), ScriptedResponse.text("ok")])
    async with AgentRuntime(project, home, approve, model=model) as runtime:  # type: ignore[arg-type]
        await (await runtime.run("write")).wait()
    assert (project / "out.txt").read_text() == "data"
    assert asked[0].tool == "write_file" and "out.txt" in asked[0].summary


async def test_async_approval_callback_can_deny(home: Path, project: Path) -> None:
    async def approve(request: ApprovalRequest) -> str:
        await asyncio.sleep(0)
        return "deny"

    model = ScriptedModel([write_call(), ScriptedResponse.text("ok")])
    async with AgentRuntime(project, home, approve, model=model) as runtime:  # type: ignore[arg-type]
        await (await runtime.run("write")).wait()
    assert not (project / "out.txt").exists()


async def test_without_callback_writes_are_denied_by_default(home: Path, project: Path) -> None:
    model = ScriptedModel([write_call(), ScriptedResponse.text("ok")])
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("write")
        await run.wait()
        decided = [e async for e in run.events() if e.type == "permission_decided"]
    assert not (project / "out.txt").exists()
    assert decided[0].decision == "deny"  # type: ignore[union-attr]
    assert "write_without_callback" in decided[0].reason  # type: ignore[union-attr]


async def test_write_without_callback_allow_from_config(home: Path, project: Path) -> None:
    write_minimal_config(home, '[permissions]\nwrite_without_callback = "allow"\n')
    model = ScriptedModel([write_call(), ScriptedResponse.text("ok")])
    async with AgentRuntime(project, home, model=model) as runtime:
        await (await runtime.run("write")).wait()
    assert (project / "out.txt").exists()


async def test_cancel_returns_within_the_timeout(home: Path, project: Path) -> None:
    write_minimal_config(home, "[runtime]\ncancel_timeout_ms = 2000\n")
    model = ScriptedModel([ScriptedResponse.text("x" * 100, pieces=100, delay_s=0.05)])
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("long")
        await asyncio.sleep(0.2)
        result = await run.cancel()
        assert result is not None and result.status == "cancelled"
        runs = await runtime.session_runs(run.session_id)
    assert runs[0].status == "cancelled"


async def test_resume_across_runtimes_uses_sqlite(home: Path, project: Path) -> None:
    first_model = ScriptedModel([ScriptedResponse.text("answer one")])
    async with AgentRuntime(project, home, model=first_model) as runtime:
        first = await (await runtime.run("question one")).wait()
    second_model = ScriptedModel([ScriptedResponse.text("answer two")])
    async with AgentRuntime(project, home, model=second_model) as runtime:
        second = await (await runtime.run("question two", session_id=first.session_id)).wait()
        messages = await runtime.session_messages(first.session_id)
    assert second.session_id == first.session_id
    assert [m.text for m in second_model.last_call.messages] == [
        "question one",
        "answer one",
        "question two",
    ]
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]


async def test_unknown_session_agent_and_orchestrator_are_usage_errors(
    home: Path, project: Path
) -> None:
    async with AgentRuntime(project, home, model=ScriptedModel()) as runtime:
        with pytest.raises(SessionNotFound):
            await runtime.run("x", session_id="ses_unknown")
        with pytest.raises(UsageError, match=r"unknown agent .nope.; known agents: .*minimal"):
            await runtime.run("x", agent="nope")
        with pytest.raises(UsageError, match="needs at least one worker pool"):
            await runtime.run("x", orchestrator=True)


def test_bad_config_and_project_fail_at_start(tmp_path: Path, project: Path) -> None:
    with pytest.raises(ConfigError, match=r"config\.toml"):
        AgentRuntime(project, tmp_path / "empty-home")
    home = tmp_path / "home2"
    write_minimal_config(home, "[runtime]\ncancel_timeout_ms = -1\n")
    with pytest.raises(ConfigError, match=r"runtime\.cancel_timeout_ms"):
        AgentRuntime(project, home)
    write_minimal_config(home)
    with pytest.raises(UsageError, match="nowhere"):
        AgentRuntime(tmp_path / "nowhere", home)


def test_run_sync_convenience(home: Path, project: Path) -> None:
    model = ScriptedModel([ScriptedResponse.text("sync answer")])
    runtime = AgentRuntime(project, home, model=model, session_store=InMemorySessionStore())
    result = runtime.run_sync("hi")
    assert result.ok and result.final_text == "sync answer"


async def test_sdk_over_the_loopback_openai_server(tmp_path: Path, project: Path) -> None:
    home = tmp_path / "home"
    with FakeOpenAIServer() as server:
        home.mkdir()
        (home / "config.toml").write_text(
            f'[model]\nbase_url = "{server.base_url}"\nname = "m"\napi_key_env = ""\n'
        )
        server.enqueue(
            tool_call_response(
                [("c1", "write_file", json.dumps({"path": "a.md", "content": "# A"}))]
            ),
            text_response("written"),
        )
        async with AgentRuntime(project, home, lambda r: "allow_once") as runtime:
            run = await runtime.run("write a.md")
            result = await run.wait()
        assert result.status == "completed" and result.final_text == "written"
        assert (project / "a.md").read_text() == "# A"
        assert "authorization" not in server.requests[0].headers
        second = server.requests[1].json["messages"]
        assert second[-1] == {
            "role": "tool",
            "tool_call_id": "c1",
            "content": second[-1]["content"],
        }


def test_making_a_runtime_leaves_the_applications_garbage_collectable(
    home: Path, project: Path
) -> None:
    # a library must not freeze the process's objects: an object of the application that
    # becomes cyclic garbage after a runtime was made is still collected
    import gc
    import weakref

    class Node:
        me: object = None

    node = Node()
    node.me = node  # a cycle: only the cyclic collector frees it
    gone = weakref.ref(node)
    before = gc.get_freeze_count()
    AgentRuntime(project_dir=project, home=home, model=ScriptedModel())
    assert gc.get_freeze_count() == before
    del node
    gc.collect()
    assert gone() is None


def test_run_sync_closes_the_runtime_and_a_second_call_says_so(home: Path, project: Path) -> None:
    model = ScriptedModel([ScriptedResponse.text("one")])
    runtime = AgentRuntime(project_dir=project, home=home, model=model)
    assert runtime.run_sync("first").final_text == "one"
    with pytest.raises(UsageError, match=r"closed .*run_sync.*make a new one"):
        runtime.run_sync("second")
    with pytest.raises(UsageError, match="AgentRuntime is closed"):
        asyncio.run(runtime.list_sessions())
