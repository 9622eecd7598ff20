"""Teams (issue 20) through the SDK: a lead in orchestrator mode and long-lived teammates on one
scripted model, with the real mailbox files, task WALs and SQLite under a temp home/project."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from soong_agent import AgentRuntime
from soong_agent.ports.model import ModelRequest
from soong_agent.testing import ScriptedResponse, write_minimal_config
from tests.integration.test_sub_agents import last_user_text, routed, steps, tool_result_texts

POOL = """
[[agents.worker_pools]]
pool_id = "p"
workers = [{ agent_definition_id = "default_worker_agent" }]
"""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    write_minimal_config(tmp_path / "home", POOL)
    return tmp_path / "home"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    return tmp_path / "project"


def call(tool: str, /, **args: object) -> ScriptedResponse:
    return ScriptedResponse.tool_calls((tool, dict(args)))


def spawn(name: str, prompt: str, **more: object) -> tuple[str, dict[str, object]]:
    return (
        "spawn_teammate",
        {"definition": "default_worker_agent", "name": name, "prompt": prompt, **more},
    )


def inbox(project: Path, team: str, member: str) -> list[dict[str, object]]:
    path = project / ".soong-agent" / "teams" / team / f"{member}.inbox.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [line for line in lines if line.get("kind") != "read"]


async def test_teammates_talk_a_plan_is_approved_and_shutdown_is_acknowledged(
    home: Path, project: Path
) -> None:
    def bob_after_approval(request: ModelRequest, count: int) -> ScriptedResponse:
        if count == 0:
            return call("send_message", to="lead", kind="message", body="bob: plan approved, done")
        return ScriptedResponse.text("bob done")

    model = routed(
        {
            "alice: greet bob": steps(
                call("send_message", to="bob", kind="message", body="hello bob, from alice"),
                ScriptedResponse.text("greeted"),
            ),
            "bob: wait for alice": steps(ScriptedResponse.text("waiting for alice")),
            "hello bob, from alice": steps(
                call(
                    "send_message", to="lead", kind="plan_approval_request", body="plan: refactor"
                ),
                ScriptedResponse.text("asked the lead"),
            ),
            "plan_approval]": bob_after_approval,
            "lead the team": steps(
                ScriptedResponse.tool_calls(
                    spawn("alice", "alice: greet bob"), spawn("bob", "bob: wait for alice")
                ),
                call("team_wait", timeout_s=20),
                call("send_message", to="bob", kind="plan_approval", data={"approved": True}),
                call("team_wait", timeout_s=20),
                ScriptedResponse.tool_calls(
                    ("send_message", {"to": "alice", "kind": "shutdown_request"}),
                    ("send_message", {"to": "bob", "kind": "shutdown_request"}),
                ),
                call("team_wait", timeout_s=20),
                call("team_wait", timeout_s=20),
                ScriptedResponse.text("team done"),
            ),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("lead the team", orchestrator=True)
        result = await asyncio.wait_for(run.wait(), 60)
        events = [e async for e in run.events()]
        teams = runtime._container.services.teams()
        roster = {m.name: m.status for m in teams.roster(run.session_id)}
        store = runtime._container.adapters.session_store()
        children = await store.child_sessions(run.session_id)
    assert result.status == "completed", result.reason
    lead_calls = [c for c in model.calls if last_user_text(c) == "lead the team"]
    waited = tool_result_texts(lead_calls[2])[-1]
    assert "from bob, plan_approval_request" in waited and "plan: refactor" in waited
    assert "bob: plan approved, done" in tool_result_texts(lead_calls[4])[-1]
    bob_approved = next(c for c in model.calls if "plan_approval]" in last_user_text(c))
    assert '"approved": true' in last_user_text(bob_approved)
    assert roster == {"alice": "stopped", "bob": "stopped"}
    lead_mail = inbox(project, run.session_id, "lead")
    acks = [m for m in lead_mail if m["kind"] == "shutdown_ack"]
    assert sorted(m["sender"] for m in acks) == ["alice", "bob"]
    bob_mail = [m["kind"] for m in inbox(project, run.session_id, "bob")]
    assert bob_mail == ["message", "message", "plan_approval", "shutdown_request"]
    assert {c.agent for c in children} == {"default_worker_agent"} and len(children) == 2
    changes = [(e.member, e.status) for e in events if e.type == "team_changed"]
    assert ("bob", "waiting_approval") in changes and ("alice", "stopped") in changes


async def test_an_unknown_kind_or_member_is_refused_at_send_time(
    home: Path, project: Path
) -> None:
    model = routed(
        {
            "quiet": steps(ScriptedResponse.text("idle")),
            "lead": steps(
                ScriptedResponse.tool_calls(spawn("carol", "quiet")),
                ScriptedResponse.tool_calls(
                    ("send_message", {"to": "carol", "kind": "gossip", "body": "x"}),
                    ("send_message", {"to": "dave", "body": "x"}),
                    ("send_message", {"to": "carol", "kind": "plan_approval"}),
                ),
                ScriptedResponse.text("done"),
            ),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("lead", orchestrator=True)
        await asyncio.wait_for(run.wait(), 30)
    results = tool_result_texts([c for c in model.calls if last_user_text(c) == "lead"][-1])
    gossip, dave, approval = results[-3:]
    assert "gossip" in gossip and "message, shutdown_request" in gossip
    assert "no teammate 'dave'" in dave
    assert "data.approved" in approval
    kinds = [m["kind"] for m in inbox(project, run.session_id, "carol")]
    assert kinds == ["message"]  # nothing refused was written


async def test_an_idle_teammate_takes_up_ready_work_that_fits_it(
    home: Path, project: Path
) -> None:
    def worker(request: ModelRequest, count: int) -> ScriptedResponse:
        if count == 0:
            return call("task_claim", task="ship", step_id="build")
        if count == 1:
            return call("task_complete", task="ship", step_id="build", summary="built")
        return ScriptedResponse.text("built it")

    model = routed(
        {
            "stand by": steps(ScriptedResponse.text("standing by")),
            "Work is ready for you": worker,
            "lead": steps(
                call("task_create", name="ship", title="Ship"),
                call("task_add_step", task="ship", step_id="build", title="Build", labels=["ops"]),
                ScriptedResponse.tool_calls(
                    spawn("erin", "stand by"), spawn("frank", "stand by", labels=["ops"])
                ),
                call("team_wait", timeout_s=20),
                ScriptedResponse.text("shipped"),
            ),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("lead", orchestrator=True)
        await asyncio.wait_for(run.wait(), 30)
        teams = runtime._container.services.teams()
        assert await teams.settle(run.session_id, timeout_s=20)
    wal = project / ".soong-agent" / "tasks" / run.session_id / "ship.wal.jsonl"
    records = [json.loads(line) for line in wal.read_text().splitlines()]
    claims = [r for r in records if r["kind"] == "step_claimed"]
    assert [c["owner"] for c in claims] == ["frank"]  # only frank carries the label
    assert any(r["kind"] == "step_completed" and r["actor"] == "frank" for r in records)
