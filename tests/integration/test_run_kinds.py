"""Every kind of run comes from the one starter (issue 32): a root run, a sub-agent, a fork, an
orchestrator's worker and a teammate each get their records, their lineage, their first
events, their effective policy and (a child) a bounded wait from `RunStarter`, through the SDK
with a real home, SQLite and one scripted model that answers every run by its task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from soong_agent import AgentRuntime
from soong_agent.application.runs import starter as starter_module
from soong_agent.application.runs.starter import PreparedRun, RunStarter
from soong_agent.ports.events import ChildStarted, PlanModeChanged, ToolResultEvent
from soong_agent.testing import ScriptedResponse, write_minimal_config
from tests.integration.test_sub_agents import routed, steps

POOL = (
    '[[agents.worker_pools]]\npool_id = "p"\n'
    '[[agents.worker_pools.workers]]\nagent_definition_id = "doer"\n'
)
DOER = (
    "---\nid: doer\ndescription: Does the work.\ntools: [read_file, write_file, send_message]\n"
    "---\nYou do the work.\n"
)
KINDS = ["root", "sub_agent", "fork", "worker", "teammate"]
TASK = "the task of the run under test"


def spawning_call(kind: str) -> ScriptedResponse:
    if kind == "sub_agent":
        return ScriptedResponse.tool_calls(("create_sub_agent", {"agent_id": "doer", "task": TASK}))
    if kind == "fork":
        return ScriptedResponse.tool_calls(("fork_agent", {"task": TASK}))
    if kind == "worker":
        return ScriptedResponse.tool_calls(("dispatch_worker", {"pool": "p", "task": TASK}))
    spawn = {"definition": "doer", "name": "tess", "prompt": TASK}
    return ScriptedResponse.tool_calls(("spawn_teammate", spawn))


def write_attempt() -> ScriptedResponse:
    return ScriptedResponse.tool_calls(("write_file", {"path": "written.txt", "content": "x"}))


@pytest.mark.parametrize("kind", KINDS)
async def test_each_kind_of_run_starts_through_the_one_starter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    write_minimal_config(home, POOL + "[agents]\ndefault_child_timeout_ms = 60000\n")
    (home / "agents").mkdir()
    (home / "agents" / "doer.md").write_text(DOER, encoding="utf-8")

    prepared: list[PreparedRun] = []
    waits: list[float] = []
    launch, bounded = RunStarter.launch, starter_module.wait_bounded

    def spy_launch(self: RunStarter, run: PreparedRun, **kw: Any) -> Any:
        prepared.append(run)
        return launch(self, run, **kw)

    async def spy_wait(task: Any, timeout_s: float, cancel_s: float) -> bool:
        waits.append(timeout_s)
        return await bounded(task, timeout_s, cancel_s)

    monkeypatch.setattr(RunStarter, "launch", spy_launch)
    launchers = (
        "soong_agent.application.children.launcher",
        "soong_agent.application.teams.members",
    )
    for module in launchers:
        monkeypatch.setattr(f"{module}.wait_bounded", spy_wait)

    root_message = TASK if kind == "root" else "the root's message"
    routes = {TASK: steps(write_attempt(), ScriptedResponse.text("tried"))}
    if kind != "root":
        routes[root_message] = steps(spawning_call(kind), ScriptedResponse.text("root done"))
    model = routed(routes)
    agent = "doer-parent" if kind == "fork" else None
    if agent is not None:  # a fork keeps its parent's tools: the parent may write too
        (home / "agents" / "doer-parent.md").write_text(
            DOER.replace("id: doer", "id: doer-parent").replace(
                "send_message]", "send_message, fork_agent]"
            ),
            encoding="utf-8",
        )
    orchestrator = kind in ("worker", "teammate")
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run(
            root_message, plan_mode=True, orchestrator=orchestrator, agent=agent
        )
        result = await run.wait()
        if kind == "teammate":
            teams = runtime._container.services.run_service().teams
            assert teams is not None and await teams.settle(run.session_id, timeout_s=30)
        store = runtime._container.adapters.session_store()
        assert result.status == "completed", result.reason

        kinds = [p.lineage.kind for p in prepared]
        assert kinds == (["root"] if kind == "root" else ["root", kind])
        under_test = prepared[-1]
        lineage = under_test.lineage
        # records: the run's session and run rows, written by its first commit
        session = await store.get_session(under_test.session.id)
        assert session is not None
        runs = {r.id: r for r in await store.list_runs(session.id)}
        assert under_test.run_info.id in runs
        events = list(await store.run_events(under_test.run_info.id))
        if kind == "root":
            assert lineage.depth == 0 and session.parent_session_id is None
            assert waits == []
        else:
            # lineage: one deeper than the root, linked to its session, stored with the run
            assert lineage.depth == 1 and session.parent_session_id == result.session_id
            (link,) = [e for e in events if isinstance(e, ChildStarted)]
            assert (link.kind, link.depth, link.parent_session_id) == (
                kind,
                1,
                result.session_id,
            )
            assert waits == [60.0]  # a bounded wait: agents.default_child_timeout_ms
        # effective policy: the root was started in plan mode, so this run is held to it
        assert any(isinstance(e, PlanModeChanged) and e.active for e in events)
        refused = [e for e in events if isinstance(e, ToolResultEvent) and e.name == "write_file"]
        assert refused and refused[0].is_error and "mode plan" in refused[0].content
        assert not (project / "written.txt").exists()
        assert json.loads(json.dumps(lineage.hook_agent)) == (
            "root" if kind == "root" else ("doer" if kind != "fork" else "default_fork_agent")
        )
