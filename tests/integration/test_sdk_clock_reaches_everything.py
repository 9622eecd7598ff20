"""One clock for every part of a runtime (issue 32): the SDK's `clock=` reaches the task
tools, the task board and the records of every run kind, not only the root loop."""

from __future__ import annotations

import json
from pathlib import Path

from soong_agent import AgentRuntime
from soong_agent.testing import FixedClock, ScriptedModel, ScriptedResponse, write_minimal_config

LONG_AGO = 1_000_000_000.0  # 2001-09-09: no wall clock reads this


async def test_the_sdk_clock_times_task_records_and_the_board(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    write_minimal_config(home)
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("task_create", {"name": "ship", "title": "Ship"})),
            ScriptedResponse.tool_calls(
                ("task_add_step", {"task": "ship", "step_id": "build", "title": "Build"})
            ),
            ScriptedResponse.tool_calls(("task_board", {})),
            ScriptedResponse.text("done"),
        ]
    )
    async with AgentRuntime(project, home, model=model, clock=FixedClock(LONG_AGO)) as runtime:
        run = await runtime.run("plan the work")
        result = await run.wait()
    assert result.status == "completed", result.reason
    (wal,) = (project / ".soong-agent" / "tasks" / result.session_id).glob("*.wal.jsonl")
    stamps = {json.loads(line)["at"] for line in wal.read_text(encoding="utf-8").splitlines()}
    assert stamps == {LONG_AGO}
    board = model.calls[3].messages[-1].tool_results[0].content
    assert "2001-09-09" in board  # the board's recent changes read the same clock
    assert "2026" not in board
