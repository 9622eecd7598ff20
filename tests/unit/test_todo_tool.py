"""todo_write (TASK-3): the run's plan, replaced whole, at most one step in progress."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from soong_agent.application.tools.base import ToolContext
from soong_agent.application.tools.todo import TodoBoard, TodoWriteArgs, todo_write_tool
from soong_agent.ports.events import ToolResultEvent
from soong_agent.testing import InMemoryFileSystem, ScriptedModel, ScriptedResponse
from tests.support.harness import Harness


def ctx(session: str = "s1") -> ToolContext:
    return ToolContext(fs=InMemoryFileSystem(), session_id=session, run_id="r1")


def item(content: str, status: str = "pending", active: str | None = None) -> dict[str, Any]:
    return {"content": content, "status": status, "activeForm": active or f"Doing {content}"}


async def test_write_replaces_the_list_and_renders_a_checklist() -> None:
    board = TodoBoard()
    tool = todo_write_tool(board)
    assert tool.name == "todo_write"
    assert tool.permission_class == "read_only"
    first = TodoWriteArgs.model_validate({"todos": [item("Read code"), item("Write tests")]})
    await tool.handler(first, ctx())
    second = TodoWriteArgs.model_validate(
        {
            "todos": [
                item("Read code", "completed"),
                item("Write tests", "in_progress", "Writing tests"),
                item("Update docs"),
            ]
        }
    )
    out = await tool.handler(second, ctx())
    assert not out.is_error
    assert out.content.splitlines() == [
        "Todo list (1/3 completed):",
        "[x] Read code",
        "[~] Writing tests",
        "[ ] Update docs",
    ]
    assert [t.content for t in board.current_todos("s1")] == [
        "Read code",
        "Write tests",
        "Update docs",
    ]
    assert board.current_todos("s1")[1].status == "in_progress"


async def test_lists_are_kept_per_session_and_can_be_emptied() -> None:
    board = TodoBoard()
    tool = todo_write_tool(board)
    await tool.handler(TodoWriteArgs.model_validate({"todos": [item("A")]}), ctx("s1"))
    await tool.handler(TodoWriteArgs.model_validate({"todos": [item("B")]}), ctx("s2"))
    assert [t.content for t in board.current_todos("s1")] == ["A"]
    assert [t.content for t in board.current_todos("s2")] == ["B"]
    assert board.current_todos("never") == []
    out = await tool.handler(TodoWriteArgs.model_validate({"todos": []}), ctx("s1"))
    assert out.content == "The todo list is empty."
    assert board.current_todos("s1") == []
    board.clear("s2")
    assert board.current_todos("s2") == []


async def test_current_todos_is_a_copy() -> None:
    board = TodoBoard()
    await board.write(TodoWriteArgs.model_validate({"todos": [item("A")]}), ctx())
    board.current_todos("s1").clear()
    assert len(board.current_todos("s1")) == 1


@pytest.mark.parametrize(
    ("todos", "needle"),
    [
        ([item("A", "in_progress"), item("B", "in_progress")], "at most one may be in_progress"),
        ([item("A", "done")], "status"),
        ([item("")], "content"),
        ([item("   ")], "must not be blank"),
        ([{"content": "A", "status": "pending"}], "activeForm"),
        ([{**item("A"), "priority": "high"}], "priority"),
    ],
)
def test_invalid_lists_are_validation_errors(todos: list[dict[str, Any]], needle: str) -> None:
    with pytest.raises(ValidationError) as caught:
        TodoWriteArgs.model_validate({"todos": todos})
    assert needle in str(caught.value)


async def test_two_in_progress_goes_back_to_the_model_and_keeps_the_old_list() -> None:
    board = TodoBoard()
    good = [item("A", "in_progress")]
    bad = [item("A", "in_progress"), item("B", "in_progress")]
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("todo_write", {"todos": good})),
            ScriptedResponse.tool_calls(("todo_write", {"todos": bad})),
            ScriptedResponse.text("done"),
        ]
    )
    h = Harness(model, extra_tools=[todo_write_tool(board)])
    run = await h.service.start("plan it")
    events = [e async for e in run.events()]
    result = await run.wait()
    assert result.status == "completed"
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert [r.is_error for r in results] == [False, True]
    assert "invalid arguments for todo_write" in results[1].content
    assert "at most one may be in_progress" in results[1].content
    assert [t.content for t in board.current_todos(run.session_id)] == ["A"]
