"""`todo_write` (TASK-3): the run's short plan, replaced as a whole on each call."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput

TodoStatus = Literal["pending", "in_progress", "completed"]
MAX_TODOS = 100

_MARKS: dict[str, str] = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


class TodoItem(ToolArgs):
    """One step of the plan."""

    content: str = Field(min_length=1, description="What to do, in the imperative: 'Run tests'.")
    status: TodoStatus = Field(description="pending, in_progress or completed.")
    activeForm: str = Field(  # the name models know from other agents
        min_length=1, description="The same step while it is being done: 'Running tests'."
    )

    @field_validator("content", "activeForm")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value.strip()


class TodoWriteArgs(ToolArgs):
    todos: list[TodoItem] = Field(
        max_length=MAX_TODOS,
        description="The whole updated list; it replaces the previous one. At most one item "
        "is in_progress.",
    )

    @model_validator(mode="after")
    def _one_in_progress(self) -> TodoWriteArgs:
        doing = [t.content for t in self.todos if t.status == "in_progress"]
        if len(doing) > 1:
            raise ValueError(
                f"{len(doing)} items are in_progress ({', '.join(repr(d) for d in doing)}); "
                "at most one may be in_progress at a time"
            )
        return self


def render_todos(todos: list[TodoItem]) -> str:
    """The plan as a checklist: `[x]` completed, `[~]` in progress (shown by its activeForm),
    `[ ]` pending."""
    if not todos:
        return "The todo list is empty."
    done = sum(t.status == "completed" for t in todos)
    lines = [f"Todo list ({done}/{len(todos)} completed):"]
    for todo in todos:
        text = todo.activeForm if todo.status == "in_progress" else todo.content
        lines.append(f"{_MARKS[todo.status]} {text}")
    return "\n".join(lines)


class TodoBoard:
    """The todo lists of the sessions, in memory; `todo_write` replaces one session's list."""

    def __init__(self) -> None:
        self._lists: dict[str, list[TodoItem]] = {}

    def current_todos(self, session_id: str) -> list[TodoItem]:
        """The session's list as last written (empty if never written); a copy."""
        return list(self._lists.get(session_id, ()))

    def clear(self, session_id: str) -> None:
        self._lists.pop(session_id, None)

    async def write(self, args: TodoWriteArgs, ctx: ToolContext) -> ToolOutput:
        self._lists[ctx.session_id] = list(args.todos)
        return ToolOutput(render_todos(args.todos))


def todo_write_tool(board: TodoBoard | None = None) -> Tool:
    """The `todo_write` tool keeping its lists in `board` (a new one when not given).

    Read-only: it changes nothing but the run's own plan.
    """
    board = board or TodoBoard()
    return Tool(
        "todo_write",
        "Keep a short plan of the current task as a todo list: send the whole updated list each "
        "time (it replaces the previous one). Mark a step in_progress before starting it (only "
        "one at a time) and completed as soon as it is done.",
        TodoWriteArgs,
        board.write,
        permission_class="read_only",
    )
