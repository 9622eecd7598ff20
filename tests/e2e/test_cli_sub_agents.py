"""Child agents through the installed CLI (AGT-2, AGT-4): `sessions show` prints a session's
children as a tree with their costs and the total, works on a child, sums workers and pools of
an orchestrator; Ctrl-C stops the parent and every child. One loopback server answers parent
and children by the task each request ends with (`RoutedOpenAIServer`)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import CANARY, CLI, CliWorld
from tests.support.fake_openai import text_response, tool_call_response
from tests.support.routed_openai import RoutedOpenAIServer

pytestmark = pytest.mark.e2e

# $1000 per million input tokens, $2000 per million output tokens: 100 in / 10 out = $0.12
PRICE = "[model.price]\ninput_per_mtok = 1000.0\noutput_per_mtok = 2000.0\n"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[CliWorld]:
    home, project, user = tmp_path / "home", tmp_path / "project", tmp_path / "user"
    for d in (home, project, user):
        d.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(user),
        "LANG": "C.UTF-8",
        "SOONG_AGENT_HOME": str(home),
        "SOONG_TEST_KEY": CANARY,
        "PYTHONIOENCODING": "utf-8",
    }
    with RoutedOpenAIServer() as server:
        yield CliWorld(server=server, home=home, project=project, env=env)


@pytest.fixture
def server(world: CliWorld) -> RoutedOpenAIServer:
    assert isinstance(world.server, RoutedOpenAIServer)
    return world.server


def configure(world: CliWorld, extra: str = "") -> None:
    world.write_config(
        "[model]\n"
        'provider = "openai"\n'
        f'base_url = "{world.server.base_url}"\n'
        'api_key_env = "SOONG_TEST_KEY"\n'
        'name = "fake-model"\n'
        "[model.retry]\n"
        "initial_backoff_ms = 10\n" + extra
    )


def call(call_id: str, name: str, **args: object) -> tuple[str, str, str]:
    return (call_id, name, json.dumps(args))


def session_id_of(output: str) -> str:
    match = re.search(r"session:? (ses_\w+)", output)
    assert match, output
    return match.group(1)


def shown_json(world: CliWorld, session_id: str) -> dict[str, Any]:
    shown = world.run("sessions", "show", session_id, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    obj = json.loads(shown.stdout)
    assert isinstance(obj, dict)
    return obj


def test_sessions_show_prints_the_child_tree_with_costs_and_works_on_the_child(
    world: CliWorld, server: RoutedOpenAIServer
) -> None:
    configure(world, PRICE)
    server.route(
        "review the notes",
        text_response("the notes say alpha", prompt_tokens=50, completion_tokens=5),
    )
    server.route(
        "parent question",
        tool_call_response(
            [call("call_1", "create_sub_agent", task="review the notes")],
            prompt_tokens=100,
            completion_tokens=10,
        ),
        text_response("done: alpha", prompt_tokens=200, completion_tokens=20),
    )
    result = world.run("run", "parent question")
    assert result.returncode == 0, result.stderr
    assert "done: alpha" in result.stdout
    parent = session_id_of(result.stdout + result.stderr)

    shown = world.run("sessions", "show", parent)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    child_line = re.search(
        r"^  (ses_\w+)  sub-agent default_sub_agent  completed, 50 in / 5 out tokens, "
        r"\$0\.0600  'review the notes'$",
        text,
        re.MULTILINE,
    )
    assert child_line, text
    child = child_line.group(1)
    assert "child sessions (1):" in text
    # the parent's own calls: $0.12 + $0.24; with the child's $0.06
    assert (
        "total: 350 in / 35 out tokens, $0.4200 (this session $0.3600, "
        "1 child session(s) $0.0600)" in text
    )
    assert text.index("child sessions") < text.index("total:") < text.index("parent question")

    on_child = world.run("sessions", "show", child)
    assert on_child.returncode == 0, on_child.stderr
    assert f"session {child}\n" in on_child.stdout
    assert f"child of session {parent} (sub-agent default_sub_agent" in on_child.stdout
    assert "the notes say alpha" in on_child.stdout
    assert "child sessions" not in on_child.stdout

    obj = shown_json(world, parent)
    (node,) = obj["children"]
    assert node["session_id"] == child and node["kind"] == "sub_agent"
    assert node["status"] == "completed" and node["cost_usd"] == pytest.approx(0.06)
    assert obj["own"]["cost_usd"] == pytest.approx(0.36)
    assert obj["total"]["cost_usd"] == pytest.approx(0.42)
    child_obj = shown_json(world, child)
    assert child_obj["parent_session_id"] == parent
    assert child_obj["started_as"]["parent_session_id"] == parent


def test_an_orchestrator_session_shows_each_worker_and_pool(
    world: CliWorld, server: RoutedOpenAIServer
) -> None:
    configure(
        world,
        PRICE
        + '[[agents.worker_pools]]\npool_id = "builders"\n'
        + '[[agents.worker_pools.workers]]\nworker_id = "w1"\n'
        + 'agent_definition_id = "default_worker_agent"\n'
        + '[[agents.worker_pools.workers]]\nworker_id = "w2"\n'
        + 'agent_definition_id = "default_worker_agent"\n',
    )
    server.route("first job", text_response("one", prompt_tokens=10, completion_tokens=1))
    server.route("second job", text_response("two", prompt_tokens=20, completion_tokens=2))
    server.route("third job", text_response("three", prompt_tokens=30, completion_tokens=3))
    server.route(
        "build it all",
        tool_call_response(
            [
                call("call_1", "dispatch_worker", pool="builders", task="first job", worker="w1"),
                call("call_2", "dispatch_worker", pool="builders", task="second job", worker="w2"),
            ],
            prompt_tokens=100,
            completion_tokens=10,
        ),
        tool_call_response(
            [call("call_3", "dispatch_worker", pool="builders", task="third job", worker="w1")],
            prompt_tokens=100,
            completion_tokens=10,
        ),
        text_response("all built", prompt_tokens=100, completion_tokens=10),
    )
    result = world.run("run", "--orchestrator", "build it all")
    assert result.returncode == 0, result.stderr
    parent = session_id_of(result.stdout + result.stderr)
    text = world.run("sessions", "show", parent).stdout
    assert re.search(
        r"^  ses_\w+  worker builders/w1 \(agent default_worker_agent\)  completed",
        text,
        re.MULTILINE,
    ), text
    assert "child sessions (3):" in text
    assert "workers:\n  pool builders: 3 tasks, 60 in / 6 out tokens, $0.0720\n" in text
    assert "    worker w1 (default_worker_agent): 2 tasks, 40 in / 4 out tokens, $0.0480\n" in text
    assert "    worker w2 (default_worker_agent): 1 task, 20 in / 2 out tokens, $0.0240\n" in text
    obj = shown_json(world, parent)
    assert [(w["worker"], w["tasks"]) for w in obj["workers"]] == [("w1", 2), ("w2", 1)]
    assert obj["pools"][0]["cost_usd"] == pytest.approx(0.072)


def test_ctrl_c_while_two_children_run_cancels_the_parent_and_both_children(
    world: CliWorld, server: RoutedOpenAIServer
) -> None:
    configure(world)
    slow = text_response("word " * 100, pieces=100).with_delay(0.1)  # ten seconds each
    server.route("slow job", slow)
    server.route(
        "parent question",
        tool_call_response(
            [
                call("call_1", "create_sub_agent", task="slow job a"),
                call("call_2", "create_sub_agent", task="slow job b"),
            ]
        ),
        text_response("should not get here"),
    )
    proc = subprocess.Popen(
        [str(CLI), "run", "parent question"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=world.env,
        cwd=world.project,
    )
    try:
        deadline = time.monotonic() + 10
        while len(server.requests_for("slow job")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(server.requests_for("slow job")) == 2, "both children should be running"
        time.sleep(0.3)
        os.kill(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    parent = session_id_of(stdout + stderr)

    obj = shown_json(world, parent)
    children = obj["children"]
    assert isinstance(children, list) and len(children) == 2
    assert [r["status"] for r in obj["runs"]] == ["cancelled"]
    assert [c["status"] for c in children] == ["cancelled", "cancelled"]
    for node in children:
        runs = shown_json(world, node["session_id"])["runs"]
        assert [r["status"] for r in runs] == ["cancelled"]
    text = world.run("sessions", "show", parent).stdout
    assert text.count("  sub-agent default_sub_agent  cancelled") == 2, text
    assert "running" not in text.split("child sessions")[1].split("total:")[0]
