"""`tools.disabled` and `tools.overrides` reach every tool a run can be offered (TOOL-3,
issue 31): the `compact` tool each run gets, `tool_search` (without it nothing is deferred),
and the orchestrator's and teammates' tools. Through the SDK with a scripted model: what the
model is offered is what the requests carry."""

from __future__ import annotations

from pathlib import Path

from soong_agent import AgentRuntime
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config

POOL = (
    '[[agents.worker_pools]]\npool_id = "p"\n'
    '[[agents.worker_pools.workers]]\nagent_definition_id = "default_worker_agent"\n'
)


async def offered(tmp_path: Path, extra: str, *, orchestrator: bool = False) -> dict[str, str]:
    """The tools (name -> description) the first request of a run under `extra` offers."""
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir(parents=True, exist_ok=True)
    write_minimal_config(home, extra)
    model = ScriptedModel([ScriptedResponse.text("ok")])
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("hello", orchestrator=orchestrator)
        result = await run.wait()
    assert result.status == "completed", result.reason
    return {t.name: t.description for t in model.calls[0].tools}


async def test_disabling_compact_takes_the_tool_away(tmp_path: Path) -> None:
    before = await offered(tmp_path / "a", "")
    assert "compact" in before
    after = await offered(tmp_path / "b", '[tools]\ndisabled = ["compact"]\n')
    assert "compact" not in after and "read_file" in after


async def test_an_override_reaches_compact(tmp_path: Path) -> None:
    tools = await offered(
        tmp_path, '[tools.overrides.compact]\ndescription = "Squash the history."\n'
    )
    assert tools["compact"] == "Squash the history."


async def test_without_tool_search_nothing_is_deferred(tmp_path: Path) -> None:
    # past the threshold the optional tools hide behind tool_search ...
    deferred = await offered(tmp_path / "a", "[tools]\ndefer_threshold = 1\n")
    assert "tool_search" in deferred and "task_create" not in deferred
    # ... unless tool_search is disabled: then every tool is offered in full
    full = await offered(
        tmp_path / "b", '[tools]\ndefer_threshold = 1\ndisabled = ["tool_search"]\n'
    )
    assert "tool_search" not in full and "task_create" in full


async def test_disabled_orchestrator_and_team_tools_are_not_offered(tmp_path: Path) -> None:
    every = await offered(tmp_path / "a", POOL, orchestrator=True)
    assert {"dispatch_worker", "spawn_teammate", "send_message", "team_wait"} <= set(every)
    some = await offered(
        tmp_path / "b",
        '[tools]\ndisabled = ["spawn_teammate", "team_wait"]\n'
        '[tools.overrides.dispatch_worker]\ndescription = "Hand work over."\n' + POOL,
        orchestrator=True,
    )
    assert "spawn_teammate" not in some and "team_wait" not in some
    assert "send_message" in some
    assert some["dispatch_worker"] == "Hand work over."
