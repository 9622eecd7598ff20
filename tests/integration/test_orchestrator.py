"""Orchestrator mode (AGT-4) through the SDK: two pools of three workers on one scripted model,
a real home, SQLite, and the real Task WAL on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from soong_agent import AgentRuntime
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import Usage
from soong_agent.testing import ScriptedResponse
from tests.integration.test_sub_agents import last_user_text, routed, steps, tool_result_texts

POOLS = """
[model.price]
input_per_mtok = 1000.0
output_per_mtok = 1000.0

[agents]
max_concurrent_children_per_session = 8

[[agents.worker_pools]]
pool_id = "build"
workers = [
  { agent_definition_id = "default_worker_agent" },
  { agent_definition_id = "default_worker_agent" },
  { worker_id = "b3", agent_definition_id = "default_worker_agent", allowed_tools = ["task_*"] },
]

[[agents.worker_pools]]
pool_id = "test"
max_tokens = 1000000
workers = [
  { agent_definition_id = "default_worker_agent" },
  { agent_definition_id = "default_worker_agent" },
  { agent_definition_id = "default_worker_agent" },
]

[task]
step_lease_timeout_ms = 300
"""

WORKER_USAGE = Usage(input_tokens=100, output_tokens=20)
EXPECTED_IDS = {
    ("build", "build-1-default_worker_agent"),
    ("build", "build-2-default_worker_agent"),
    ("build", "b3"),
    ("test", "test-1-default_worker_agent"),
    ("test", "test-2-default_worker_agent"),
    ("test", "test-3-default_worker_agent"),
}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    from soong_agent.testing import write_minimal_config

    write_minimal_config(tmp_path / "home", POOLS)
    return tmp_path / "home"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    return tmp_path / "project"


def dispatch(pool: str, task: str) -> tuple[str, dict[str, object]]:
    return ("dispatch_worker", {"pool": pool, "task": task})


def six_tasks() -> ScriptedResponse:
    calls = [dispatch(pool, f"job {pool} {i}") for pool in ("build", "test") for i in (1, 2, 3)]
    return ScriptedResponse.tool_calls(*calls)


async def orchestrate(home: Path, project: Path) -> list[tuple[str | None, str | None, float]]:
    """One orchestrator run dispatching six jobs at once; (pool, worker, cost) per child."""
    model = routed(
        {
            "job ": steps(ScriptedResponse.text("job done", usage=WORKER_USAGE, delay_s=0.05)),
            "run the jobs": steps(six_tasks(), ScriptedResponse.text("all jobs done")),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("run the jobs", orchestrator=True)
        result = await run.wait()
        finished = [e async for e in run.events() if e.type == "child_finished"]
    assert result.status == "completed", result.reason
    first = model.calls[0]
    assert "dispatch_worker" in {t.name for t in first.tools}
    description = next(t for t in first.tools if t.name == "dispatch_worker").description
    assert "build (" in description and "b3: default_worker_agent" in description
    worker_tools = next(c for c in model.calls if last_user_text(c).startswith("job build"))
    assert "dispatch_worker" not in {t.name for t in worker_tools.tools}
    return [(e.pool, e.worker, e.cost_usd or 0.0) for e in finished]


async def test_jobs_spread_over_every_worker_with_stable_ids_and_costs_per_worker(
    home: Path, project: Path
) -> None:
    first = await orchestrate(home, project)
    assert {(pool, worker) for pool, worker, _ in first} == EXPECTED_IDS  # one job each
    assert all(cost == pytest.approx(0.12) for _, _, cost in first)  # 120 tokens at $1000/M
    again = await orchestrate(home, project)  # a new runtime: a restart
    assert {(pool, worker) for pool, worker, _ in again} == EXPECTED_IDS


async def test_a_worker_capped_by_allowed_tools_gets_only_those(home: Path, project: Path) -> None:
    model = routed(
        {
            "capped job": steps(ScriptedResponse.text("ok")),
            "use b3": steps(
                ScriptedResponse.tool_calls(
                    ("dispatch_worker", {"pool": "build", "task": "capped job", "worker": "b3"})
                ),
                ScriptedResponse.text("done"),
            ),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        await (await runtime.run("use b3", orchestrator=True)).wait()
    worker_call = next(c for c in model.calls if last_user_text(c) == "capped job")
    names = {t.name for t in worker_call.tools}
    assert names and all(n.startswith("task_") or n == "compact" for n in names)


async def test_a_dead_workers_step_is_taken_over_after_its_lease(home: Path, project: Path) -> None:
    def dying_worker(request: ModelRequest, count: int) -> ScriptedResponse:
        if count == 0:
            return ScriptedResponse.tool_calls(("task_claim", {"task": "ship"}))
        raise ProviderError(
            "the worker's connection died",
            kind="bad_request",
            provider="scripted",
            base_url="memory://scripted",
        )

    def second_worker(request: ModelRequest, count: int) -> ScriptedResponse:
        if count == 0:
            return ScriptedResponse.tool_calls(("task_claim", {"task": "ship"}))
        if count == 1:
            assert "claimed step 'build'" in tool_result_texts(request)[-1]
            return ScriptedResponse.tool_calls(
                ("task_complete", {"task": "ship", "step_id": "build", "summary": "built"})
            )
        return ScriptedResponse.text("step build completed")

    root = steps(
        ScriptedResponse.tool_calls(("task_create", {"name": "ship", "title": "Ship it"})),
        ScriptedResponse.tool_calls(
            ("task_add_step", {"task": "ship", "step_id": "build", "title": "Build"})
        ),
        ScriptedResponse.tool_calls(dispatch("build", "first attempt")),
        # the next dispatch comes after the dead worker's lease (300 ms) has expired
        ScriptedResponse.tool_calls(dispatch("build", "second attempt"), delay_s=0.5),
        ScriptedResponse.text("shipped"),
    )
    model = routed({"first attempt": dying_worker, "second attempt": second_worker, "ship": root})
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("ship the thing", orchestrator=True)
        result = await run.wait()
        finished = [e async for e in run.events() if e.type == "child_finished"]
    assert result.status == "completed", result.reason
    assert [e.status for e in finished] == ["failed", "completed"], [e.reason for e in finished]
    assert finished[0].worker != finished[1].worker  # the idle worker took it over
    wal = project / ".soong-agent" / "tasks" / run.session_id / "ship.wal.jsonl"
    records = [json.loads(line) for line in wal.read_text().splitlines()]
    claims = [r for r in records if r["kind"] == "step_claimed"]
    assert len(claims) == 2 and claims[0]["owner"] != claims[1]["owner"]
    done = [r for r in records if r["kind"] == "step_completed"]
    assert len(done) == 1 and done[0]["actor"] == claims[1]["owner"]


async def test_a_resumed_orchestrator_session_keeps_dispatch_worker(
    home: Path, project: Path
) -> None:
    model = routed(
        {
            "one job": steps(ScriptedResponse.text("ok")),
            "start": steps(
                ScriptedResponse.tool_calls(dispatch("test", "one job")),
                ScriptedResponse.text("started"),
            ),
            "continue": steps(ScriptedResponse.text("continued")),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await (await runtime.run("start", orchestrator=True)).wait()
        await (await runtime.run("continue", session_id=run.session_id)).wait()
    resumed = next(c for c in model.calls if last_user_text(c) == "continue")
    assert "dispatch_worker" in {t.name for t in resumed.tools}


async def test_a_worker_past_its_budget_gets_no_more_work(tmp_path: Path, project: Path) -> None:
    from soong_agent.testing import write_minimal_config

    home = tmp_path / "tiny-home"
    write_minimal_config(
        home,
        '[[agents.worker_pools]]\npool_id = "tiny"\n'
        'workers = [{ worker_id = "w", agent_definition_id = "default_worker_agent", '
        "max_tokens = 100 }]\n",
    )
    model = routed(
        {
            "small job": steps(ScriptedResponse.text("done", usage=WORKER_USAGE)),
            "go": steps(
                ScriptedResponse.tool_calls(dispatch("tiny", "small job one")),
                ScriptedResponse.tool_calls(dispatch("tiny", "small job two")),
                ScriptedResponse.text("stopped"),
            ),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("go", orchestrator=True)
        await run.wait()
    results = tool_result_texts([c for c in model.calls if last_user_text(c) == "go"][-1])
    assert "done" in results[0]
    assert "spent its budget" in results[1]
    assert sum(1 for c in model.calls if "small job" in last_user_text(c)) == 1


async def test_pool_budgets_cover_the_whole_session_across_a_restart(
    tmp_path: Path, project: Path
) -> None:
    from soong_agent.testing import write_minimal_config

    home = tmp_path / "pool-home"
    write_minimal_config(
        home,
        '[[agents.worker_pools]]\npool_id = "p"\nmax_tokens = 100\n'
        'workers = [{ agent_definition_id = "default_worker_agent" }, '
        '{ agent_definition_id = "default_worker_agent" }]\n',
    )

    def model() -> object:
        return routed(
            {
                "pool job": steps(ScriptedResponse.text("done", usage=WORKER_USAGE)),
                "again": steps(
                    ScriptedResponse.tool_calls(dispatch("p", "pool job")),
                    ScriptedResponse.text("end"),
                ),
                "go": steps(
                    ScriptedResponse.tool_calls(dispatch("p", "pool job")),
                    ScriptedResponse.text("end"),
                ),
            }
        )

    first = model()
    async with AgentRuntime(project, home, model=first) as runtime:  # type: ignore[arg-type]
        done = await (await runtime.run("go", orchestrator=True)).wait()
    second = model()
    async with AgentRuntime(project, home, model=second) as runtime:  # type: ignore[arg-type]
        await (await runtime.run("again", session_id=done.session_id)).wait()
    results = tool_result_texts(second.calls[-1])  # type: ignore[attr-defined]
    assert "the budget of pool 'p' is spent" in results[-1]
