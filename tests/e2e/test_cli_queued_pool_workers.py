"""An orchestrator run by a worker process queues its pool workers (AGT-4, WORK-1), through
the installed CLI on SQLite and on a real PostgreSQL: each `dispatch_worker` becomes a queued run
of its own, linked to the orchestrator's run, that any worker process may claim; the
orchestrator waits for it without holding a slot (one worker serving one run at a time runs
the orchestrator and its workers), and gets each worker's answer, usage and cost back as an
in-process worker's would (the pools and workers of `sessions show`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import CANARY, CLI, CliWorld
from tests.support.fake_openai import text_response, tool_call_response
from tests.support.routed_openai import RoutedOpenAIServer

pytestmark = pytest.mark.e2e

WAIT_S = 60.0
PRICE = "[model.price]\ninput_per_mtok = 1000.0\noutput_per_mtok = 2000.0\n"
POOL = (
    '[[agents.worker_pools]]\npool_id = "builders"\n'
    '[[agents.worker_pools.workers]]\nworker_id = "w1"\n'
    'agent_definition_id = "default_worker_agent"\n'
    '[[agents.worker_pools.workers]]\nworker_id = "w2"\n'
    'agent_definition_id = "default_worker_agent"\n'
)


@pytest.fixture(params=["sqlite", "postgresql"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CliWorld]:
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
    storage = ""
    if request.param == "postgresql":
        storage = f'[storage]\nurl = "{request.getfixturevalue("postgres_url")}"\n'
    with RoutedOpenAIServer() as server:
        world = CliWorld(server=server, home=home, project=project, env=env)
        world.write_config(
            "[model]\n"
            'provider = "openai"\n'
            f'base_url = "{server.base_url}"\n'
            'api_key_env = "SOONG_TEST_KEY"\n'
            'name = "fake-model"\n'
            "[model.retry]\ninitial_backoff_ms = 10\n"
            "[workers]\nheartbeat_ms = 200\nlease_timeout_ms = 1500\n"
            '[permissions]\nmode = "bypass"\n' + PRICE + POOL + storage
        )
        yield world


@pytest.fixture
def workers(world: CliWorld) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=WAIT_S)


def start_solo(world: CliWorld, workers: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    """One worker process serving one run at a time."""
    worker = subprocess.Popen(
        [str(CLI), "worker", "--project", str(world.project), "--id", "solo", "--concurrency", "1"],
        env=world.env,
        cwd=world.project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    workers.append(worker)
    return worker


def call(call_id: str, name: str, **args: object) -> tuple[str, str, str]:
    return (call_id, name, json.dumps(args))


def test_an_orchestrators_workers_are_queued_runs_that_one_worker_process_serves(
    world: CliWorld, workers: list[subprocess.Popen[str]]
) -> None:
    server = world.server
    assert isinstance(server, RoutedOpenAIServer)
    server.route("first job", text_response("one", prompt_tokens=10, completion_tokens=1))
    server.route("second job", text_response("two", prompt_tokens=20, completion_tokens=2))
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
        text_response("all built", prompt_tokens=100, completion_tokens=10),
    )
    done = world.run("run", "--detach", "--orchestrator", "build it all")
    assert done.returncode == 0, done.stderr
    ids = dict(line.split(": ", 1) for line in done.stdout.strip().splitlines())
    lead, run = ids["session"], ids["run"]
    # one worker process serving one run at a time: the orchestrator waits for its workers
    # without holding that slot, so the same process runs them
    worker = start_solo(world, workers)
    waited = world.run("runs", "wait", run, "--timeout", str(WAIT_S))
    assert waited.returncode == 0, waited.stdout + waited.stderr
    rows = [
        json.loads(line) for line in world.run("runs", "list", "-o", "json").stdout.splitlines()
    ]
    assert len(rows) == 3 and {r["status"] for r in rows} == {"completed"}, rows
    children = {r["message"]: r for r in rows if r["run_id"] != run}
    assert set(children) == {"first job", "second job"}
    assert {r["worker"] for r in rows} == {"solo"}
    # the orchestrator got both answers back as its tool results
    last = server.requests_for("build it all")[-1].json["messages"]
    results = sorted(m["content"] for m in last if m["role"] == "tool")
    assert any("one" in r for r in results) and any("two" in r for r in results), results
    # linked as in-process workers are: the children, workers and pools of the lead session
    shown = world.run("sessions", "show", lead, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    obj = json.loads(shown.stdout)
    assert {c["session_id"] for c in obj["children"]} == {
        r["session_id"] for r in children.values()
    }
    assert {c["kind"] for c in obj["children"]} == {"worker"}
    assert [(w["worker"], w["tasks"]) for w in obj["workers"]] == [("w1", 1), ("w2", 1)]
    assert obj["pools"][0]["cost_usd"] == pytest.approx(0.012 + 0.024)
    child = json.loads(
        world.run("sessions", "show", children["first job"]["session_id"], "-o", "json").stdout
    )
    assert child["parent_session_id"] == lead
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=WAIT_S) == 0


def test_a_queued_leads_teammate_runs_are_queued_runs_and_the_lead_ends_after_them(
    world: CliWorld, workers: list[subprocess.Popen[str]]
) -> None:
    server = world.server
    assert isinstance(server, RoutedOpenAIServer)
    spawn = {"definition": "default_worker_agent", "name": "alice", "prompt": "alice: say hi"}
    server.route(
        "alice: say hi",
        tool_call_response(
            [call("c1", "send_message", to="lead", body="hi lead, alice here")],
            prompt_tokens=100,
            completion_tokens=10,
        ),
        text_response("said hi", prompt_tokens=100, completion_tokens=10),
    )
    server.route(
        "start the team",
        tool_call_response([("c2", "spawn_teammate", json.dumps(spawn))]),
        text_response("team started"),
    )
    done = world.run("run", "--detach", "--orchestrator", "start the team")
    assert done.returncode == 0, done.stderr
    ids = dict(line.split(": ", 1) for line in done.stdout.strip().splitlines())
    lead, run = ids["session"], ids["run"]
    worker = start_solo(world, workers)
    waited = world.run("runs", "wait", run, "--timeout", str(WAIT_S))
    assert waited.returncode == 0, waited.stdout + waited.stderr
    # as `run --orchestrator` does, the lead's run ended after its teammate's work was done
    assert server.served["alice: say hi"] == 2
    rows = [
        json.loads(line) for line in world.run("runs", "list", "-o", "json").stdout.splitlines()
    ]
    assert {r["status"] for r in rows} == {"completed"}, rows
    alices = [r for r in rows if r["run_id"] != run]
    assert len(alices) == 1 and "alice: say hi" in alices[0]["message"]
    assert alices[0]["worker"] == "solo"
    shown = world.run("team", "show", lead)
    assert shown.returncode == 0, shown.stderr
    assert "alice (default_worker_agent): idle" in shown.stdout
    assert "$0.2400" in shown.stdout  # alice's two calls, counted in the lead's team
    assert "lead: 1 unread mail" in shown.stdout
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=WAIT_S) == 0
