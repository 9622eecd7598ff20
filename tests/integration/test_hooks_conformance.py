"""Every hook type fires, through the SDK, with real hook processes (HOOK-1 conformance).

One walk goes through every fire point a run has: session start and end, each model call, a
call that is asked about and allowed, one asked about and denied, one that fails, a task created
and one of its steps completed, a compaction, and the stop. At the root every registered type
but `subagent_stop` fires, each with the run's identity and depth 0. The same walk done by a
sub-agent (`create_sub_agent`) fires every one of them in the child, with the child's session,
run and agent id and depth 1, and its end fires `subagent_stop` in the parent's run, naming the
child.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from soong_agent import AgentRuntime, ApprovalRequest
from soong_agent.domain.hooks import HOOK_TYPES
from soong_agent.ports.approval import Decision
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config

ONLY_IN_PARENTS = {"subagent_stop"}
"""Fired in the run whose child ended, never by a run without children."""

LOGGER = """
import json, os, sys
data = json.load(sys.stdin)
line = {"hook": sys.argv[1], "session": data["session_id"], "run": data["run_id"],
        "depth": data["depth"], "agent": data["agent_id"],
        "child_session": data.get("child_session_id"),
        "child_agent": data.get("child_agent_id"), "env_agent": os.environ.get("AGENT_ID"),
        "env_session": os.environ.get("SESSION_ID")}
with open(sys.argv[2], "a") as log:
    log.write(json.dumps(line) + "\\n")
"""

WALKER = """---
id: walker
description: Walks every fire point of a run
tools: [read_file, write_file, task_create, task_add_step, task_claim, task_complete, compact]
---
You walk.
"""


def the_walk() -> list[ScriptedResponse]:
    """The model's side of a run that reaches every fire point a run without children has."""
    return [
        ScriptedResponse.tool_calls(("write_file", {"path": "a.txt", "content": "a"})),
        ScriptedResponse.tool_calls(("write_file", {"path": "b.txt", "content": "b"})),
        ScriptedResponse.tool_calls(("read_file", {"path": "missing.txt"})),
        ScriptedResponse.tool_calls(("task_create", {"name": "t", "title": "T"})),
        ScriptedResponse.tool_calls(("task_add_step", {"task": "t", "step_id": "s", "title": "S"})),
        ScriptedResponse.tool_calls(("task_claim", {"task": "t", "step_id": "s"})),
        ScriptedResponse.tool_calls(("task_complete", {"task": "t", "step_id": "s"})),
        # a manual compaction: pre_compact fires; this short a history needs no summary
        ScriptedResponse.tool_calls(("compact", {})),
        ScriptedResponse.text("done"),
    ]


def home_with_hooks(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A home whose hooks.json logs every hook type; the project; the log (hooks run in the
    OS sandbox: they write in the project)."""
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    write_minimal_config(home)
    (home / "agents").mkdir()
    (home / "agents" / "walker.md").write_text(WALKER, encoding="utf-8")
    logger = tmp_path / "log_hook.py"
    logger.write_text(LOGGER, encoding="utf-8")
    log = project / "fired.jsonl"
    hooks = {hook: [{"command": f"{sys.executable} {logger} {hook} {log}"}] for hook in HOOK_TYPES}
    (home / "hooks.json").write_text(json.dumps({"hooks": hooks}), encoding="utf-8")
    return home, project, log


def allow_then_deny() -> Any:
    answers = iter(["allow_once", "deny"])

    def approve(request: ApprovalRequest) -> Decision:
        return next(answers)  # type: ignore[return-value]

    return approve


def fired_in(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def assert_walk_order(order: list[str]) -> None:
    assert order[0] == "session_start" and order[-1] == "session_end"
    # the first call: its hook before its permission, the question, then the call's result
    first = [order.index(h) for h in ("pre_tool_use", "permission_request", "notification")]
    assert first == sorted(first) and first[-1] < order.index("post_tool_use")
    assert order.index("pre_compact") < order.index("stop") < order.index("session_end")


async def test_every_hook_type_fires_at_the_root_through_the_sdk(tmp_path: Path) -> None:
    home, project, log = home_with_hooks(tmp_path)
    model = ScriptedModel(the_walk())
    async with AgentRuntime(project, home, allow_then_deny(), model=model) as runtime:
        run = await runtime.run("walk every hook")
        result = await run.wait()
    assert result.status == "completed", result.reason
    assert result.output == "done" and model.script == []  # the walk went as scripted
    assert (project / "a.txt").exists() and not (project / "b.txt").exists()

    fired = fired_in(log)
    assert {f["hook"] for f in fired} == set(HOOK_TYPES) - ONLY_IN_PARENTS
    assert {(f["session"], f["run"], f["depth"], f["agent"]) for f in fired} == {
        (result.session_id, result.run_id, 0, "root")
    }
    assert_walk_order([f["hook"] for f in fired])
    assert fired[0]["env_session"] == result.session_id


async def walk_in_a_sub_agent(
    tmp_path: Path,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, str]]:
    """The walk done by a sub-agent of definition `walker`: what fired in the parent's run,
    what fired in the child's, and the ids of both runs."""
    home, project, log = home_with_hooks(tmp_path)
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                ("create_sub_agent", {"task": "walk every hook", "agent_id": "walker"})
            ),
            *the_walk(),  # the child's (the parent waits for it)
            ScriptedResponse.text("the child walked"),
        ]
    )
    async with AgentRuntime(project, home, allow_then_deny(), model=model) as runtime:
        run = await runtime.run("have a sub-agent walk")
        result = await run.wait()
        events = [e async for e in run.events()]
    assert result.status == "completed", result.reason
    assert result.output == "the child walked" and model.script == []
    (started,) = [e for e in events if e.type == "child_started"]
    (finished,) = [e for e in events if e.type == "child_finished"]
    assert finished.status == "completed", finished.reason
    assert (project / "a.txt").exists() and not (project / "b.txt").exists()
    ids = {
        "session": result.session_id,
        "run": result.run_id,
        "child_session": started.child_session_id,
        "child_run": started.child_run_id,
    }
    fired = fired_in(log)
    in_parent = [f for f in fired if f["run"] == result.run_id]
    in_child = [f for f in fired if f["run"] == started.child_run_id]
    assert len(in_parent) + len(in_child) == len(fired)  # nothing fired under another run
    return in_parent, in_child, ids


async def test_every_hook_type_fires_in_a_sub_agent_and_subagent_stop_in_its_parent(
    tmp_path: Path,
) -> None:
    in_parent, in_child, ids = await walk_in_a_sub_agent(tmp_path)

    assert {f["hook"] for f in in_child} == set(HOOK_TYPES) - ONLY_IN_PARENTS
    assert {(f["session"], f["depth"], f["agent"]) for f in in_child} == {
        (ids["child_session"], 1, "walker")
    }
    assert_walk_order([f["hook"] for f in in_child])
    assert in_child[0]["env_session"] == ids["child_session"]

    parent_order = [f["hook"] for f in in_parent]
    assert parent_order.count("subagent_stop") == 1
    assert {f["session"] for f in in_parent} == {ids["session"]}
    # the parent's own run: started, asked the model, called the tool that ran the child,
    # then heard the child stop before that call's result
    assert parent_order.index("pre_tool_use") < parent_order.index("subagent_stop")
    assert parent_order.index("subagent_stop") < parent_order.index("post_tool_use")
    assert parent_order[0] == "session_start" and parent_order[-1] == "session_end"
    (stop,) = [f for f in in_parent if f["hook"] == "subagent_stop"]
    assert {(f["depth"], f["agent"]) for f in in_parent} == {(0, "root")}  # who fires
    assert (stop["child_session"], stop["child_agent"]) == (ids["child_session"], "walker")
    assert stop["env_agent"] == "walker"  # AGENT_ID: the child that stopped
