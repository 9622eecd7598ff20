"""Python functions as tools (`@tool`, `AgentRuntime(tools=[...])`), end to end through the SDK."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest
from pydantic import BaseModel

from soong_agent import AgentRuntime, ApprovalRequest, ToolContext, UsageError, tool
from soong_agent.ports.events import PermissionDecided, ToolResultEvent
from soong_agent.ports.model import ModelRequest
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config


@pytest.fixture
def home(tmp_path: Path) -> Path:
    write_minimal_config(tmp_path / "home")
    return tmp_path / "home"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    return tmp_path / "project"


@tool
def word_count(text: str, *, minimum_length: int = 1) -> int:
    """Count the words in a text.

    Args:
        text: the text to count in.
        minimum_length: words shorter than this are not counted;
            one counts every word.
    """
    return sum(1 for w in text.split() if len(w) >= minimum_length)


def call(name: str, args: dict[str, object] | str) -> ScriptedResponse:
    return ScriptedResponse.tool_calls((name, args))


async def results_of(runtime: AgentRuntime, message: str = "go") -> list[ToolResultEvent]:
    run = await runtime.run(message)
    events = [e async for e in run.events()]
    result = await run.wait()
    assert result.status == "completed", result.reason
    return [e for e in events if isinstance(e, ToolResultEvent)]


def test_the_schema_comes_from_the_signature_and_the_docstring() -> None:
    spec = word_count.as_tool().spec
    assert spec.name == "word_count"
    assert spec.description == "Count the words in a text."
    props = spec.parameters["properties"]
    assert props["text"]["type"] == "string"
    assert props["text"]["description"] == "the text to count in."
    assert props["minimum_length"]["type"] == "integer"
    assert props["minimum_length"]["default"] == 1
    assert "one counts every word" in props["minimum_length"]["description"]
    assert spec.parameters["required"] == ["text"]
    assert word_count("a bb ccc", minimum_length=2) == 2  # still callable as a function


async def test_a_sync_function_runs_off_the_loop_and_its_result_reaches_the_model(
    home: Path, project: Path
) -> None:
    threads: list[str] = []

    @tool
    def where() -> str:
        """Say which thread runs this."""
        threads.append(threading.current_thread().name)
        return "here"

    model = ScriptedModel(
        [
            call("word_count", {"text": "one two three"}),
            call("where", {}),
            ScriptedResponse.text("3"),
        ]
    )
    async with AgentRuntime(project, home, model=model, tools=[word_count, where]) as runtime:
        results = await results_of(runtime)
        assert "word_count" in [s.name for s in model.calls[0].tools]
    assert [r.content for r in results] == ["3", "here"]
    assert threads and threads[0] != threading.main_thread().name
    tool_message = model.calls[1].messages[-1]
    assert tool_message.tool_results[0].content == "3"


async def test_an_async_function_gets_the_tool_context(home: Path, project: Path) -> None:
    (project / "notes.txt").write_text("hello from the project")

    @tool(target="path")
    async def read_note(path: str, ctx: ToolContext) -> str:
        """Read a note through the sandboxed project filesystem."""
        await asyncio.sleep(0)
        return (await ctx.fs.read_bytes(path)).decode() + f" ({ctx.session_id[:4]})"

    model = ScriptedModel([call("read_note", {"path": "notes.txt"}), ScriptedResponse.text("ok")])
    async with AgentRuntime(project, home, model=model, tools=[read_note]) as runtime:
        results = await results_of(runtime)
    assert results[0].content == "hello from the project (ses_)"
    assert "ctx" not in read_note.as_tool().spec.parameters["properties"]


async def test_a_write_tool_asks_and_is_denied_without_a_callback(
    home: Path, project: Path
) -> None:
    ran: list[str] = []

    @tool(permission="write", target="path")
    def touch(path: str) -> str:
        """Create an empty file."""
        ran.append(path)
        return "created"

    model = ScriptedModel([call("touch", {"path": "a.txt"}), ScriptedResponse.text("ok")])
    async with AgentRuntime(project, home, model=model, tools=[touch]) as runtime:
        run = await runtime.run("touch it")
        events = [e async for e in run.events()]
        await run.wait()
    decided = [e for e in events if isinstance(e, PermissionDecided)]
    assert decided[0].decision == "deny"
    assert ran == []


async def test_a_write_tool_runs_when_the_user_allows_it(home: Path, project: Path) -> None:
    asked: list[ApprovalRequest] = []

    @tool(permission="write", target="path")
    def touch(path: str) -> str:
        """Create an empty file."""
        return "created"

    def approve(request: ApprovalRequest) -> str:
        asked.append(request)
        return "allow_once"

    model = ScriptedModel([call("touch", {"path": "a.txt"}), ScriptedResponse.text("ok")])
    async with AgentRuntime(project, home, approve, model=model, tools=[touch]) as runtime:
        results = await results_of(runtime)
    assert results[0].content == "created"
    assert asked[0].tool == "touch" and asked[0].permission_class == "write"
    assert "a.txt" in asked[0].summary


async def test_a_path_target_is_checked_by_the_sandbox(home: Path, project: Path) -> None:
    ran: list[str] = []

    @tool(permission="write", target="path")
    def touch(path: str) -> str:
        """Create an empty file."""
        ran.append(path)
        return "created"

    outside = str(project.parent / "elsewhere.txt")
    model = ScriptedModel([call("touch", {"path": outside}), ScriptedResponse.text("ok")])
    async with AgentRuntime(
        project, home, lambda r: "allow_once", model=model, tools=[touch]
    ) as runtime:
        results = await results_of(runtime)
    assert results[0].is_error
    assert ran == []


async def test_rules_apply_to_the_declared_target(home: Path, project: Path) -> None:
    write_minimal_config(home, '[permissions]\nallow = ["touch(/docs/**)"]\n')

    @tool(permission="write", target="file")
    def touch(file: str) -> str:
        """Create an empty file."""
        return f"created {file}"

    model = ScriptedModel(
        [
            call("touch", {"file": "docs/a.md"}),
            call("touch", {"file": "src/a.py"}),
            ScriptedResponse.text("ok"),
        ]
    )
    async with AgentRuntime(project, home, model=model, tools=[touch]) as runtime:
        results = await results_of(runtime)
    assert results[0].content == "created docs/a.md"  # allowed by the rule, nobody asked
    assert results[1].is_error  # not covered: it asked, and nobody can answer


async def test_bad_arguments_exceptions_and_big_results(home: Path, project: Path) -> None:
    @tool
    def fail() -> str:
        """Always fails."""
        raise RuntimeError("the disk is on fire")

    @tool
    def big() -> str:
        """A long result."""
        return "x" * 100_000

    class Point(BaseModel):
        x: int
        y: int

    @tool
    def point() -> Point:
        """A point."""
        return Point(x=1, y=2)

    model = ScriptedModel(
        [
            call("word_count", {"txt": "typo in the name"}),
            call("fail", {}),
            call("big", {}),
            call("point", {}),
            ScriptedResponse.text("done"),
        ]
    )
    tools = [word_count, fail, big, point]
    async with AgentRuntime(project, home, model=model, tools=tools) as runtime:
        results = await results_of(runtime)
    invalid, failed, stored, shaped = results
    assert invalid.is_error and "text" in invalid.content
    assert failed.is_error and "the disk is on fire" in failed.content
    assert "artifact" in stored.content and len(stored.content) < 10_000
    assert json.loads(shaped.content) == {"x": 1, "y": 2}


def test_a_name_taken_by_a_built_in_is_refused_at_construction(home: Path, project: Path) -> None:
    @tool
    def read_file(path: str) -> str:
        """Shadows the built-in."""
        return ""

    with pytest.raises(UsageError, match="read_file"):
        AgentRuntime(project, home, tools=[read_file])


def test_a_plain_function_is_refused_with_the_fix(home: Path, project: Path) -> None:
    def plain(text: str) -> str:
        return text

    with pytest.raises(UsageError, match="@tool"):
        AgentRuntime(project, home, tools=[plain])  # type: ignore[list-item]


def test_unannotated_and_variadic_parameters_are_refused() -> None:
    def untyped(text):  # type: ignore[no-untyped-def]
        return text

    with pytest.raises(TypeError, match="type annotation"):
        tool(untyped)

    def variadic(*texts: str) -> str:
        return ""

    with pytest.raises(TypeError, match=r"\*args"):
        tool(variadic)
    with pytest.raises(ValueError, match="permission"):
        tool(permission="admin")(word_count.function)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a parameter"):
        tool(target="file")(word_count.function)


def test_tools_of_the_requests_include_the_python_tool(home: Path, project: Path) -> None:
    seen: list[ModelRequest] = []

    def respond(request: ModelRequest) -> ScriptedResponse:
        seen.append(request)
        return ScriptedResponse.text("ok")

    runtime = AgentRuntime(project, home, model=ScriptedModel(default=respond), tools=[word_count])
    assert runtime.run_sync("hi").status == "completed"
    assert "word_count" in [t.name for t in seen[0].tools]
