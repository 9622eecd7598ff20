"""The task WAL on real files (TASK-1): two OS processes appending 1,000 records each to one
log lose and interleave nothing; a claimed step whose lease expired (fake clock) is claimed and
completed by another run through the task tools; the CLI bodies read the WAL alone."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from soong_agent.adapters.tasks import FileTaskLog
from soong_agent.application.tools.base import Tool, ToolContext, ToolOutput
from soong_agent.application.tools.tasks import task_board_text, task_tools
from soong_agent.domain.tasks import fold
from soong_agent.ports.tasks import TaskCreated
from soong_agent.testing import FixedClock, InMemoryFileSystem

SES = "ses_1"
PER_PROCESS = 1_000

WRITER = """
import sys
from soong_agent.adapters.tasks import FileTaskLog
from soong_agent.ports.tasks import StepAdded
root, who, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
log = FileTaskLog(root)
for n in range(count):
    log.append("ses_1", "shared", StepAdded(seq=0, at=1.0, actor=who, step_id=f"{who}-{n:04d}",
                                            title=f"step {n} of {who}"))
"""


def test_two_processes_appending_concurrently_lose_and_interleave_nothing(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    FileTaskLog(root).append(SES, "shared", TaskCreated(seq=0, at=1.0, actor="t", title="T"))
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(root), who, str(PER_PROCESS)])
        for who in ("p1", "p2")
    ]
    assert [w.wait(timeout=300) for w in writers] == [0, 0]

    raw = FileTaskLog(root).path(SES, "shared").read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    assert len(lines) == 1 + 2 * PER_PROCESS
    parsed = [json.loads(line) for line in lines]  # every line whole
    assert [p["seq"] for p in parsed] == list(range(1, len(lines) + 1))
    for who in ("p1", "p2"):
        mine = [p["step_id"] for p in parsed if p["actor"] == who]
        assert mine == [f"{who}-{n:04d}" for n in range(PER_PROCESS)]
    records, problems = FileTaskLog(root).read(SES, "shared")
    assert problems == []
    result = fold(records)
    assert result.problems == () and len(result.state.steps) == 2 * PER_PROCESS


def call(tool: Tool, ctx: ToolContext, **arguments: object) -> ToolOutput:
    args = tool.args_model.model_validate(arguments)
    return asyncio.run(tool.handler(args, ctx))


def tools_by_name(log: FileTaskLog, clock: FixedClock) -> dict[str, Tool]:
    return {tool.name: tool for tool in task_tools(log, clock, lease_ms=60_000)}


def test_an_expired_lease_lets_another_run_claim_and_complete(tmp_path: Path) -> None:
    clock = FixedClock()
    fs = InMemoryFileSystem()
    run1 = ToolContext(fs=fs, session_id=SES, run_id="run_1")
    run2 = ToolContext(fs=fs, session_id=SES, run_id="run_2")
    first = tools_by_name(FileTaskLog(tmp_path / "tasks"), clock)
    assert not call(first["task_create"], run1, name="ship", title="Ship it").is_error
    assert not call(first["task_add_step"], run1, task="ship", step_id="build", title="B").is_error
    out = call(
        first["task_add_step"], run1, task="ship", step_id="test", title="T", depends_on=["build"]
    )
    assert not out.is_error
    out = call(first["task_claim"], run1, task="ship")
    assert not out.is_error and "'build'" in out.content
    # run_1 dies; run_2, in another process (a new log, no shared cache), waits for the lease
    second = tools_by_name(FileTaskLog(tmp_path / "tasks"), clock)
    refused = call(second["task_claim"], run2, task="ship", step_id="build")
    assert refused.is_error and "held by 'run_1'" in refused.content
    blocked = call(second["task_claim"], run2, task="ship", step_id="test")
    assert blocked.is_error and "waits for build" in blocked.content
    clock.advance(59)
    assert call(second["task_claim"], run2, task="ship").is_error
    clock.advance(1)
    out = call(second["task_claim"], run2, task="ship")
    assert not out.is_error and "'build'" in out.content
    late = call(first["task_complete"], run1, task="ship", step_id="build", summary="x")
    assert late.is_error and "held by 'run_2', not by 'run_1'" in late.content
    clock.advance(30)
    assert not call(second["task_heartbeat"], run2, task="ship", step_id="build").is_error
    clock.advance(50)  # alive thanks to the heartbeat
    assert call(first["task_claim"], run1, task="ship", step_id="build").is_error
    done = call(second["task_complete"], run2, task="ship", step_id="build", summary="built")
    assert not done.is_error

    records, problems = FileTaskLog(tmp_path / "tasks").read(SES, "ship")
    assert problems == []
    claims = [(r.actor, r.step_id) for r in records if r.kind == "step_claimed"]
    assert claims == [("run_1", "build"), ("run_2", "build")]
    assert [r.actor for r in records if r.kind == "step_completed"] == ["run_2"]
    assert fold(records).state.ready(clock.now()) == ["test"]

    board = call(second["task_board"], run2)
    assert "- [done] build: B (by run_2: built)" in board.content
    assert "- [ready] test: T" in board.content
    text = task_board_text(FileTaskLog(tmp_path / "tasks"), SES, 1200, clock=clock)
    assert text.startswith("Task board:") and "## ship: Ship it" in text
    assert task_board_text(FileTaskLog(tmp_path / "tasks"), "ses_none", 1200, clock=clock) == ""


def test_tools_refuse_bad_names_and_tell_a_torn_line_once(tmp_path: Path) -> None:
    clock = FixedClock()
    log = FileTaskLog(tmp_path / "tasks")
    tools = tools_by_name(log, clock)
    ctx = ToolContext(fs=InMemoryFileSystem(), session_id=SES, run_id="run_1")
    bad = call(tools["task_create"], ctx, name="../escape", title="x")
    assert bad.is_error and "refused" in bad.content
    assert not list((tmp_path / "tasks").glob("**/*.jsonl"))
    assert not call(tools["task_create"], ctx, name="t", title="T").is_error
    path = log.path(SES, "t")
    path.write_bytes(path.read_bytes() + b'{"seq": 2, "at"')
    out = call(tools["task_add_step"], ctx, task="t", step_id="a", title="A")
    assert not out.is_error
    again = call(tools["task_add_step"], ctx, task="t", step_id="b", title="B")
    assert "torn" not in again.content
    assert [r.seq for r in log.read(SES, "t").records] == [1, 2, 3]


def test_the_cli_bodies_print_the_dag_from_the_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from soong_agent.entrypoints.cli.tasks_cmd import tasks_list, tasks_show
    from soong_agent.testing import write_minimal_config

    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    write_minimal_config(home)
    monkeypatch.setenv("SOONG_AGENT_HOME", str(home))
    log = FileTaskLog(project / ".soong-agent" / "tasks")
    tools = tools_by_name(log, FixedClock())
    ctx = ToolContext(fs=InMemoryFileSystem(), session_id=SES, run_id="run_1")
    call(tools["task_create"], ctx, name="ship", title="Ship it")
    call(tools["task_add_step"], ctx, task="ship", step_id="build", title="Build")
    call(
        tools["task_add_step"], ctx, task="ship", step_id="test", title="Test", depends_on=["build"]
    )
    call(tools["task_claim"], ctx, task="ship")

    assert tasks_list(str(project)) == 0
    out = capsys.readouterr().out
    assert "ses_1/ship  Ship it" in out
    assert tasks_show("ses_1/ship", str(project)) == 0
    out = capsys.readouterr().out
    assert "[pending] test: Test" in out and "after: build" in out
    assert "owner: run_1, lease ended" in out  # the fake clock is far behind the wall clock
    assert "claimed build" in out
    assert tasks_show("ses_1/none", str(project)) == 2
    assert tasks_show("nonsense", str(project)) == 2


def test_the_task_board_tool_shows_the_configured_recent_changes(tmp_path: Path) -> None:
    """`task.task_recent_changes_limit` / `…_window_minutes` shape `task_board` as they do the
    system prompt's board (not a fixed 20 changes in 30 minutes)."""
    clock = FixedClock()
    ctx = ToolContext(fs=InMemoryFileSystem(), session_id=SES, run_id="run_1")
    log = FileTaskLog(tmp_path / "tasks")
    default = tools_by_name(log, clock)
    assert not call(default["task_create"], ctx, name="ship", title="Ship it").is_error
    for step in ("a", "b", "c"):
        assert not call(
            default["task_add_step"], ctx, task="ship", step_id=step, title=step
        ).is_error

    def changes(board: Tool) -> list[str]:
        text = call(board, ctx).content
        return [line for line in text.splitlines() if " run_1 ship: " in line]

    assert len(changes(default["task_board"])) == 4
    two = {t.name: t for t in task_tools(log, clock, 60_000, recent_limit=2)}
    assert len(changes(two["task_board"])) == 2
    clock.advance(5 * 60)
    brief = {t.name: t for t in task_tools(log, clock, 60_000, recent_window_minutes=1)}
    assert changes(brief["task_board"]) == []
    assert len(changes(default["task_board"])) == 4
