"""No project-controlled link leads outside (issue 31, item 3) through the installed CLI.

A repository may ship ``.soong-agent/tasks``, ``.soong-agent/teams``, ``.soong-agent/worktrees``
or a plan file as a symbolic link, and ``CLAUDE.md`` / ``AGENTS.md`` (at the root or in a folder)
as links to a key or to ``.env``. Each test plants such links, runs ``soong-agent run`` against
the loopback server and asserts the side effects: nothing created where a link points, the
error names the link, and no byte of a secret in any request body the server received.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import test_cli_sub_agents as sub
from tests.e2e.conftest import CliWorld
from tests.e2e.test_cli_sub_agents import configure
from tests.support.fake_openai import text_response, tool_call_response
from tests.support.routed_openai import RoutedOpenAIServer

pytestmark = pytest.mark.e2e

world = sub.world  # a home, a project and a server that answers each run by its task
server = sub.server

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAAlinktest0451\n"
ENV = "DATABASE_PASSWORD=hunter2-linktest-7731\n"
POOL = (
    '[[agents.worker_pools]]\npool_id = "p"\n'
    '[[agents.worker_pools.workers]]\nagent_definition_id = "default_worker_agent"\n'
)
HOME_RULE = "home rule: answer briefly."
PKG_RULE = "pkg/sub rule: no I/O in this package."


def call(call_id: str, tool: str, **args: object) -> tuple[str, str, str]:
    return (call_id, tool, json.dumps(args))


def linked_folder(at: Path, to: Path) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    to.mkdir(parents=True, exist_ok=True)
    at.symlink_to(to, target_is_directory=True)


def contents(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def tool_results(server: RoutedOpenAIServer) -> list[str]:
    return [
        m["content"] for r in server.requests for m in r.json["messages"] if m["role"] == "tool"
    ]


def events_of(world: CliWorld, kind: str) -> list[dict[str, Any]]:
    with sqlite3.connect(world.home / "sessions.sqlite") as db:
        rows = db.execute("SELECT payload FROM events WHERE type = 'error' ORDER BY seq")
        return [p for p in (json.loads(r[0]) for r in rows) if p["kind"] == kind]


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


# --- task logs ------------------------------------------------------------------------------


def test_task_create_through_a_linked_tasks_folder_writes_nothing_outside(
    world: CliWorld, server: RoutedOpenAIServer
) -> None:
    configure(world)
    outside = world.project.parent / "outside-tasks"
    linked_folder(world.project / ".soong-agent" / "tasks", outside)
    server.route(
        "plan the release",
        tool_call_response([call("c1", "task_create", name="release", title="Release")]),
        text_response("could not"),
    )
    result = world.run("run", "plan the release")
    assert result.returncode == 0, result.stderr
    (answer,) = tool_results(server)
    link = world.project / ".soong-agent" / "tasks"
    assert f"{link} is a symbolic link" in answer and "remove the link" in answer
    assert contents(outside) == []


# --- teams: worktrees and mailboxes ---------------------------------------------------------


def test_a_teammate_is_not_checked_out_through_a_linked_worktrees_folder(
    world: CliWorld, server: RoutedOpenAIServer
) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    git(world.project, "init", "-q", "-b", "main")
    (world.project / "app.py").write_text("x = 1\n", encoding="utf-8")
    git(world.project, "add", "app.py")
    git(world.project, "commit", "-q", "-m", "init")
    outside = world.project.parent / "outside-trees"
    linked_folder(world.project / ".soong-agent" / "worktrees", outside)
    configure(world, POOL)
    spawn = {"definition": "default_worker_agent", "name": "alice", "prompt": "alice: work"}
    server.route(
        "start the team",
        tool_call_response([call("c1", "spawn_teammate", **spawn)]),
        text_response("no team"),
    )
    result = world.run("run", "--orchestrator", "start the team")
    assert result.returncode == 0, result.stderr
    (answer,) = tool_results(server)
    link = world.project / ".soong-agent" / "worktrees"
    assert answer.startswith("spawn_teammate: ") and f"{link} is a symbolic link" in answer
    assert contents(outside) == []
    assert git(world.project, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert server.requests_for("alice: work") == []  # the teammate never ran


def test_no_mail_is_written_through_a_linked_teams_folder(
    world: CliWorld, server: RoutedOpenAIServer
) -> None:
    outside = world.project.parent / "outside-mail"
    linked_folder(world.project / ".soong-agent" / "teams", outside)
    configure(world, POOL)
    spawn = {"definition": "default_worker_agent", "name": "alice", "prompt": "alice: work"}
    server.route(
        "start the team",
        tool_call_response([call("c1", "spawn_teammate", **spawn)]),
        text_response("no team"),
    )
    result = world.run("run", "--orchestrator", "start the team")
    link = world.project / ".soong-agent" / "teams"
    # the lead reads its inbox before its first turn: the run ends there, saying why
    assert result.returncode != 0
    assert f"{link} is a symbolic link" in result.stderr and "remove the link" in result.stderr
    assert server.requests == []
    assert contents(outside) == []


# --- plans ----------------------------------------------------------------------------------


def test_plan_mode_does_not_overwrite_a_project_file_through_a_linked_plan(
    world: CliWorld, server: RoutedOpenAIServer
) -> None:
    source = world.project / "app.py"
    source.write_text("x = 1\n", encoding="utf-8")
    plans = world.project / ".soong-agent" / "plans"
    plans.mkdir(parents=True)
    (plans / "cleanup.md").symlink_to(source)
    configure(world)
    write = call("c1", "plan_write", name="cleanup", content="# Plan\n", overwrite=True)
    server.route("plan the cleanup", tool_call_response([write]), text_response("stopped"))
    result = world.run("run", "--plan", "plan the cleanup")
    assert result.returncode == 0, result.stderr
    (answer,) = tool_results(server)
    assert ".soong-agent/plans/cleanup.md is a symbolic link" in answer
    assert source.read_text(encoding="utf-8") == "x = 1\n"


# --- instruction files ----------------------------------------------------------------------


def test_instruction_files_linked_to_secrets_reach_no_request(
    world: CliWorld, server: RoutedOpenAIServer
) -> None:
    user_home = Path(world.env["HOME"])
    (user_home / ".ssh").mkdir()
    (user_home / ".ssh" / "id_rsa").write_text(KEY, encoding="utf-8")
    project = world.project
    (project / ".env").write_text(ENV, encoding="utf-8")
    (project / "CLAUDE.md").symlink_to(user_home / ".ssh" / "id_rsa")
    (project / "AGENTS.md").symlink_to(project / ".env")
    (project / "pkg" / "sub").mkdir(parents=True)
    (project / "pkg" / "AGENTS.md").symlink_to(Path("..") / ".env")
    (project / "pkg" / "sub" / "AGENTS.md").write_text(PKG_RULE, encoding="utf-8")
    (project / "pkg" / "sub" / "y.py").write_text("y = 2\n", encoding="utf-8")
    (world.home / "CLAUDE.md").write_text(HOME_RULE, encoding="utf-8")
    configure(world)
    server.route(
        "what is y?",
        tool_call_response([call("c1", "read_file", path="pkg/sub/y.py")]),
        text_response("y is 2"),
    )

    result = world.run("run", "what is y?")
    assert result.returncode == 0, result.stderr
    assert "y is 2" in result.stdout
    bodies = [r.body.decode("utf-8") for r in server.requests]
    assert len(bodies) == 2
    for body in bodies:
        for secret in ("hunter2-linktest-7731", "AAAAAlinktest0451", "OPENSSH PRIVATE KEY"):
            assert secret not in body
    assert HOME_RULE in bodies[0] and PKG_RULE in bodies[1]  # the rest, as usual
    warned = [e["message"] for e in events_of(world, "instructions_skipped")]
    assert sorted(m.split(" ", 1)[0] for m in warned) == [
        "<project>/AGENTS.md",
        "<project>/CLAUDE.md",
        "<project>/pkg/AGENTS.md",
    ]
    for message in warned:  # shown to the user, once each
        assert result.stderr.count(message) == 1
