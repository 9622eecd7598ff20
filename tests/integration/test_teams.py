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
            # before bob's own prompt: alice's mail may reach bob's inbox before bob's first
            # round reads it, and then bob's first run has both mails and answers alice's
            "hello bob, from alice": steps(
                call(
                    "send_message", to="lead", kind="plan_approval_request", body="plan: refactor"
                ),
                ScriptedResponse.text("asked the lead"),
            ),
            "bob: wait for alice": steps(ScriptedResponse.text("waiting for alice")),
            "plan_approval]": bob_after_approval,
            "lead the team": steps(
                ScriptedResponse.tool_calls(
                    spawn("alice", "alice: greet bob"), spawn("bob", "bob: wait for alice")
                ),
                call("team_wait", timeout_s=20),
                # until the team is quiet: bob's run has ended and bob waits for the approval (an
                # approval sent at once may reach bob in that run, and then it never waits)
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
    quiet = tool_result_texts(lead_calls[3])[-1]
    assert (
        "every teammate is idle" in quiet
        and "bob (default_worker_agent): waiting_approval" in quiet
    )
    assert "bob: plan approved, done" in tool_result_texts(lead_calls[5])[-1]
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


async def test_an_unknown_kind_or_member_is_refused_at_send_time(home: Path, project: Path) -> None:
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


async def test_an_idle_teammate_takes_up_ready_work_that_fits_it(home: Path, project: Path) -> None:
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


def git(repo: Path, *args: str) -> str:
    import subprocess

    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    import shutil

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "shared.txt").write_text("base\n", encoding="utf-8")
    git(repo, "add", "shared.txt")
    git(repo, "commit", "-q", "-m", "base")
    return repo


async def test_worktrees_isolate_teammates_and_the_lead_merges_one_and_discards_the_other(
    home: Path, repo: Path
) -> None:
    outside = str(repo / "shared.txt")  # the main tree, by its absolute path

    def member(name: str, text: str) -> object:
        def route(request: ModelRequest, count: int) -> ScriptedResponse:
            if count == 0:
                return ScriptedResponse.tool_calls(
                    ("write_file", {"path": "shared.txt", "content": text}),
                    ("write_file", {"path": outside, "content": "escaped"}),
                    (
                        "write_file",
                        {
                            "path": str(repo / ".soong-agent/worktrees/other/x.txt"),
                            "content": "escaped",
                        },
                    ),
                )
            return ScriptedResponse.text(f"{name} wrote")

        return route

    model = routed(
        {
            "alice: edit": member("alice", "alice's version\n"),  # type: ignore[dict-item]
            "bob: edit": member("bob", "bob's version\n"),  # type: ignore[dict-item]
            "lead": steps(
                ScriptedResponse.tool_calls(
                    spawn("alice", "alice: edit"), spawn("bob", "bob: edit")
                ),
                call("team_wait", timeout_s=20),
                call("review_worktree", member="alice"),
                call("accept_worktree", member="alice", message="take alice's edit"),
                call("reject_worktree", member="bob"),
                ScriptedResponse.text("merged alice"),
            ),
        }
    )
    seen_main: list[str] = []

    def approve(request: object) -> str:
        seen_main.append((repo / "shared.txt").read_text(encoding="utf-8"))
        return "allow_once"

    async with AgentRuntime(repo, home, approve, model=model) as runtime:  # type: ignore[arg-type]
        run = await runtime.run("lead", orchestrator=True)
        result = await asyncio.wait_for(run.wait(), 60)
        teams = runtime._container.services.teams()
        roster = {m.name: m for m in teams.roster(run.session_id)}
    assert result.status == "completed", result.reason
    assert set(seen_main) == {"base\n"}  # the main tree saw no write before the review
    lead_calls = [c for c in model.calls if last_user_text(c) == "lead"]
    diff = tool_result_texts(lead_calls[3])[-1]
    assert "+alice's version" in diff and "-base" in diff
    assert "merged the worktree of alice" in tool_result_texts(lead_calls[4])[-1]
    assert "discarded what teammate bob changed" in tool_result_texts(lead_calls[5])[-1]
    assert (repo / "shared.txt").read_text(encoding="utf-8") == "alice's version\n"
    assert "alice" in git(repo, "log", "--merges", "--format=%s")  # a merge commit
    assert "take alice's edit" in git(repo, "log", "--format=%s")
    bob_tree = Path(roster["bob"].worktree or "")
    assert (bob_tree / "shared.txt").read_text(encoding="utf-8") == "alice's version\n"
    member_calls = [c for c in model.calls if "edit" in last_user_text(c)]
    refusals = [t for c in member_calls for t in tool_result_texts(c)]
    escapes = [t for t in refusals if "escaped" not in t and ("outside" in t or "denied" in t)]
    assert len(escapes) >= 4, refusals  # each member's two escapes were refused
    changed = git(repo, "status", "--porcelain", "--untracked-files=no").strip()
    assert changed == ""  # only the merge changed the main tree, and it is committed


async def test_a_handoff_moves_a_step_and_its_artifacts(tmp_path: Path, project: Path) -> None:
    import re

    home = tmp_path / "handoff-home"
    write_minimal_config(home, POOL + "\n[tools]\nmax_result_chars = 200\n")
    (project / "notes.txt").write_text("NOTE " * 200, encoding="utf-8")

    def alice(request: ModelRequest, count: int) -> ScriptedResponse:
        if count == 0:
            return call("task_claim", task="ship", step_id="build")
        if count == 1:
            return call("read_file", path="notes.txt")
        if count == 2:
            artifact = re.search(r"art_[0-9a-z]+", tool_result_texts(request)[-1])
            assert artifact is not None
            data = {
                "task": "ship",
                "step_id": "build",
                "summary": "read the notes; the build is yours",
                "artifacts": [artifact.group()],
            }
            return call("send_message", to="bob", kind="handoff", body="over to you", data=data)
        return ScriptedResponse.text("handed off")

    def bob(request: ModelRequest, count: int) -> ScriptedResponse:
        if count == 0:
            artifact = re.search(r"art_[0-9a-z]+", last_user_text(request))
            assert artifact is not None
            return call("read_artifact", artifact_id=artifact.group())
        if count == 1:
            return call("task_claim", task="ship", step_id="build")
        if count == 2:
            return call("task_complete", task="ship", step_id="build", summary="built")
        return ScriptedResponse.text("built")

    model = routed(
        {
            "alice: start": alice,
            "bob: stand by": steps(ScriptedResponse.text("standing by")),
            "over to you": bob,
            "lead": steps(
                call("task_create", name="ship", title="Ship"),
                call("task_add_step", task="ship", step_id="build", title="Build", role="nobody"),
                ScriptedResponse.tool_calls(spawn("bob", "bob: stand by")),
                ScriptedResponse.tool_calls(spawn("alice", "alice: start")),
                call("team_wait", timeout_s=20),
                ScriptedResponse.text("done"),
            ),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("lead", orchestrator=True)
        await asyncio.wait_for(run.wait(), 30)
        assert await runtime._container.services.teams().settle(run.session_id, timeout_s=20)
    read = next(
        c
        for c in model.calls
        if "over to you" in last_user_text(c) and c.messages[-1].role == "tool"
    )
    assert "NOTE NOTE" in tool_result_texts(read)[-1]  # bob read the artifact alice handed over
    wal = project / ".soong-agent" / "tasks" / run.session_id / "ship.wal.jsonl"
    records = [(r["kind"], r["actor"]) for r in map(json.loads, wal.read_text().splitlines())]
    moves = [r for r in records if r[0] != "task_created" and r[0] != "step_added"]
    assert moves == [
        ("step_claimed", "alice"),
        ("step_released", "alice"),
        ("step_claimed", "bob"),
        ("step_completed", "bob"),
    ]


def test_after_kill_9_the_team_comes_back_with_its_mail_and_an_expired_step_moves(
    tmp_path: Path, project: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    home = tmp_path / "crash-home"
    write_minimal_config(home, POOL + "\n[task]\nstep_lease_timeout_ms = 1500\n")
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.team_crash",
            "first",
            str(home),
            str(project),
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert first.stdout is not None
        line = first.stdout.readline()
        assert line.strip() == "READY", first.stderr.read() if first.stderr else ""
        first.send_signal(signal.SIGKILL)
    finally:
        first.wait(10)
    session = json.loads(out.read_text())["session"]
    time.sleep(1.6)  # alice's lease on the step runs out while no process runs the team
    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.team_crash",
            "second",
            str(home),
            str(project),
            str(out),
            session,
        ],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert second.returncode == 0, second.stderr
    report = json.loads(out.read_text())
    assert report["settled"]
    alice = [text for who, text in report["seen"] if who == "alice"]
    assert alice, report["seen"]
    assert "status? (sent while you work)" in alice[0]  # her unread mail survived
    wal = project / ".soong-agent" / "tasks" / session / "ship.wal.jsonl"
    records = [(r["kind"], r["actor"]) for r in map(json.loads, wal.read_text().splitlines())]
    claims = [actor for kind, actor in records if kind == "step_claimed"]
    assert claims[0] == "alice" and "bob" in claims[1:]
    assert ("step_completed", claims[-1]) in records
    roster = {m["name"]: m["status"] for m in report["roster"]}
    assert roster == {"alice": "idle", "bob": "idle"}


async def test_a_failing_round_is_reported_and_the_teammate_goes_on(
    home: Path, project: Path
) -> None:
    model = routed(
        {
            "hello dan": steps(
                call("send_message", to="lead", body="dan is here"), ScriptedResponse.text("ok")
            ),
            "lead": steps(
                ScriptedResponse.tool_calls(spawn("dan", "hello dan")),
                call("team_wait", timeout_s=20),
                ScriptedResponse.text("done"),
            ),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        teams = runtime._container.services.teams()
        real = teams._mailbox.unread
        failures: list[str] = []

        def flaky(team: str, member: str) -> list[object]:
            if member == "dan" and not failures:
                failures.append(member)
                raise OSError("the disk hiccuped")
            return real(team, member)

        teams._mailbox.unread = flaky  # type: ignore[method-assign]
        run = await runtime.run("lead", orchestrator=True)
        result = await asyncio.wait_for(run.wait(), 30)
        events = [e async for e in run.events()]
    assert result.status == "completed" and failures == ["dan"]
    (error,) = [e for e in events if e.type == "error" and e.kind == "teammate"]
    assert "teammate dan: OSError: the disk hiccuped" in error.message
    lead_calls = [c for c in model.calls if last_user_text(c) == "lead"]
    assert "dan is here" in tool_result_texts(lead_calls[2])[-1]  # dan went on after it
