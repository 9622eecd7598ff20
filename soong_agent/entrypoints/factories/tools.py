"""The tool catalog of a runtime, and what compaction and the prompt read of plans and tasks."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.errors import UsageError
from soong_agent.ports.process import ProcessRunner
from soong_agent.ports.web import WebFetcher

if TYPE_CHECKING:
    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.application.permissions.plan_mode import PlanModes
    from soong_agent.application.tools.background import BackgroundCommands
    from soong_agent.application.tools.base import Tool, ToolRegistry
    from soong_agent.application.tools.todo import TodoBoard
    from soong_agent.ports.approval import Approver
    from soong_agent.ports.system import Clock
    from soong_agent.ports.tasks import TaskLog

from soong_agent.entrypoints.factories.knowledge import Knowledge
from soong_agent.entrypoints.factories.models import image_reading
from soong_agent.entrypoints.factories.safety import CommandSandboxing, secret_names
from soong_agent.entrypoints.factories.stores import task_log


@dataclass(frozen=True)
class ToolCatalog:
    """The tools of a runtime and the problems met while loading them (shown as warnings)."""

    registry: ToolRegistry
    warnings: list[str]


def tool_catalog(
    loaded: LoadedConfig,
    runner: ProcessRunner,
    fetcher: WebFetcher,
    artifacts: ArtifactStore,
    board: TodoBoard,
    user_tools: list[Tool],
    sandbox: CommandSandboxing | None = None,
    knowledge: Knowledge | None = None,
    plan_modes: PlanModes | None = None,
    approver: Approver | None = None,
    tasks: TaskLog | None = None,
    clock: Clock | None = None,
    background: BackgroundCommands | None = None,
) -> ToolCatalog:
    """Built-in tools, declarative tools from the home, the SDK caller's Python tools, then
    `tools.disabled`/`overrides`. A Python tool named like another tool is a UsageError.

    `runner` runs the commands of run_command and declarative tools; `sandbox` is the OS
    sandbox it starts them in: what it allows is told to the model, and its warning (no
    sandbox works here) joins the catalog's warnings. `knowledge` adds `load_skill` (when
    the home has skills) and the memory tools (when `memory.enabled`). `background` lets
    run_command start background commands, read and ended by command_output and command_kill
    (BG-1; not when `tools.max_background_commands` is 0)."""
    import os

    from soong_agent.adapters.declarative.loader import load_enabled_declarative_tools
    from soong_agent.application.tools.agents import agent_tools
    from soong_agent.application.tools.artifacts import read_artifact_tool
    from soong_agent.application.tools.background import background_tools
    from soong_agent.application.tools.base import ToolRegistry
    from soong_agent.application.tools.catalog import apply_tool_config
    from soong_agent.application.tools.declarative import add_declarative_tools
    from soong_agent.application.tools.files import file_tools
    from soong_agent.application.tools.shell import run_command_tool
    from soong_agent.application.tools.todo import todo_write_tool
    from soong_agent.application.tools.web import web_fetch_tool

    config = loaded.config.tools
    project = str(loaded.project)
    secrets = secret_names(loaded)
    env = dict(os.environ)
    tasks, clock = _task_log_and_clock(loaded, tasks, clock)
    tools = [
        *file_tools(images=image_reading(loaded)),
        run_command_tool(
            runner=runner,
            project=project,
            tools=config,
            base_env=env,
            secret_names=secrets,
            sandbox_note=sandbox.note if sandbox is not None else "",
            background=background,
        ),
        web_fetch_tool(fetcher=fetcher, max_bytes=config.fetch_max_bytes),
        todo_write_tool(board),
        read_artifact_tool(store=artifacts),
        *_deferrable(
            [
                *(background_tools(background) if background and background.limit else ()),
                *(agent_tools() if loaded.config.agents.max_children_per_run > 0 else ()),
                *(knowledge.tools if knowledge is not None else ()),
                *_plan_tools(loaded, plan_modes, approver),
                *_task_tools(loaded, tasks, clock),
            ]
        ),
    ]
    specs, problems = load_enabled_declarative_tools(loaded.home / "tools", config)
    tools, clashes = add_declarative_tools(
        tools, specs, runner=runner, project=project, config=config, env=env, secret_names=secrets
    )
    tools, warnings = apply_tool_config([*tools, *_users(user_tools, tools)], config)
    loud = [sandbox.choice.warning] if sandbox is not None and sandbox.choice.warning else []
    known = knowledge.warnings if knowledge is not None else []
    return ToolCatalog(ToolRegistry(tools), [*loud, *problems, *clashes, *known, *warnings])


def _task_log_and_clock(
    loaded: LoadedConfig, tasks: TaskLog | None, clock: Clock | None
) -> tuple[TaskLog, Clock]:
    """The container's task log and clock, or the default ones for a catalog built alone."""
    if clock is None:
        from soong_agent.adapters.system.clock import SystemClock

        clock = SystemClock()
    return (task_log(loaded) if tasks is None else tasks), clock


def background_commands(
    loaded: LoadedConfig, closables: list[Callable[[], Awaitable[None]]]
) -> BackgroundCommands:
    """The runtime's background commands (BG-1), shared by its runs; closing the runtime
    kills those still running."""
    from soong_agent.application.tools.background import BackgroundCommands

    commands = BackgroundCommands(limit=loaded.config.tools.max_background_commands)
    closables.append(commands.close)
    return commands


def _users(user_tools: list[Tool], tools: list[Tool]) -> list[Tool]:
    """The SDK caller's Python tools; one named like another tool is a UsageError."""
    taken = {t.name for t in tools} | {"compact"}  # `compact` is added to every run
    for tool in user_tools:
        if tool.name in taken:
            raise UsageError(
                f"tools: a tool named {tool.name!r} already exists (a built-in or declarative "
                "tool, or another of yours); give yours another name with @tool(name=...)"
            )
        taken.add(tool.name)
    return user_tools


def _deferrable(tools: list[Tool]) -> list[Tool]:
    """Tools a run with many tools offers by name only, behind tool_search (so a small
    context window is not filled with schemas): sub-agents and forks, skills, memory, plans
    and tasks."""
    import dataclasses

    return [dataclasses.replace(tool, deferrable=True) for tool in tools]


ACTIVE_PLAN_LINES = 40
"""How much of the active plan compaction carries over (its file holds the rest)."""


def active_plan_reader(loaded: LoadedConfig) -> Callable[[str], str]:
    """The session's active plan as compaction carries it over (PLAN-1): the plan file this
    session wrote last (its marker line names the session), by name and path, and its first
    `ACTIVE_PLAN_LINES` lines; "" when the session wrote none."""
    from soong_agent.application.tools.plans import PlanFile

    folder = Path(loaded.config.plan.default_dir)
    # a plans folder inside the project is read only where it really is (no link of the
    # project's leads this read elsewhere); one the user put outside is theirs, as it is
    in_project = folder.is_relative_to(loaded.project)

    def read(session_id: str) -> str:
        try:
            if in_project and os.path.realpath(folder) != os.fspath(folder):
                return ""
            files = sorted(
                (p for p in folder.glob("*.md") if not p.is_symlink()),
                key=lambda p: p.lstat().st_mtime,
                reverse=True,
            )
        except OSError:
            return ""
        for path in files:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as file:
                    text = file.read().decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            plan = PlanFile(text)
            if plan.owner != session_id:
                continue
            lines = plan.body.strip().splitlines()
            shown = "\n".join(lines[:ACTIVE_PLAN_LINES])
            more = len(lines) - ACTIVE_PLAN_LINES
            tail = f"\n[… {more} more lines in the file]" if more > 0 else ""
            return f"Active plan {path.stem!r} ({path}):\n{shown}{tail}"
        return ""

    return read


def task_board_reader(loaded: LoadedConfig, log: TaskLog, clock: Clock) -> Callable[[str], str]:
    """The task board of a session, as the system prompt and compaction show it (TASK-2):
    read from the WAL files, cut to `task.task_board_token_budget`; "" without tasks."""
    from soong_agent.application.tools.tasks import task_board_text

    task = loaded.config.task
    folder = os.fspath(task.wal_dir)

    def read(session_id: str) -> str:
        if not os.path.isdir(os.path.join(folder, session_id)):
            return ""  # no task yet: no file is opened (a look per run: no Path built)
        return task_board_text(
            log,
            session_id,
            task.task_board_token_budget,
            clock=clock,
            recent_limit=task.task_recent_changes_limit,
            recent_window_minutes=task.task_recent_changes_window_minutes,
        )

    return read


def _task_tools(loaded: LoadedConfig, log: TaskLog, clock: Clock) -> list[Tool]:
    """The task-graph tools over the project's WAL files (TASK-1, TASK-2)."""
    from soong_agent.application.tools.tasks import task_tools

    task = loaded.config.task
    return task_tools(
        log,
        clock,
        task.step_lease_timeout_ms,
        recent_limit=task.task_recent_changes_limit,
        recent_window_minutes=task.task_recent_changes_window_minutes,
    )


def _plan_tools(
    loaded: LoadedConfig, modes: PlanModes | None, approver: Approver | None
) -> list[Tool]:
    """plan_write/read/list and, with `modes`, enter/exit_plan_mode (PLAN-1, PLAN-2)."""
    from soong_agent.application.permissions.plan_mode import plan_mode_tools
    from soong_agent.application.tools.plans import plan_tools

    plan = loaded.config.plan
    tools = plan_tools(plan)
    if modes is not None:
        tools += plan_mode_tools(modes, approver=approver, plan=plan)
    return tools
