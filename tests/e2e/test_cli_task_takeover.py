"""Crash takeover through the Task WAL (TASK-1): a CLI run claims a step and is killed with
SIGKILL; once its lease has expired, the next run of the session claims the same step and
completes it. The WAL shows both claims and one completion."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from tests.e2e.conftest import CLI, CliWorld
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e


def call(call_id: str, name: str, args: dict[str, object]) -> object:
    return tool_call_response([(call_id, name, json.dumps(args))])


def test_a_killed_runs_step_is_taken_over_after_its_lease(world: CliWorld) -> None:
    config = world.home / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8")
        + '[permissions]\nmode = "bypass"\n'
        + "[tools]\ndefer_threshold = 100\n"
        + "[task]\nstep_lease_timeout_ms = 1500\n",
        encoding="utf-8",
    )
    world.server.enqueue(
        call("c1", "task_create", {"name": "release", "title": "Ship it"}),
        call("c2", "task_add_step", {"task": "release", "step_id": "build", "title": "Build"}),
        call("c3", "task_claim", {"task": "release", "step_id": "build"}),
        call("c4", "run_command", {"command": "sleep 60"}),  # the run dies in here
    )
    first = subprocess.Popen(
        [str(CLI), "run", "ship the release"],
        env=world.env,
        cwd=world.project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while len(world.server.requests) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(world.server.requests) >= 4, "the first run never reached its command"
    time.sleep(0.3)  # the command is running
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=10)
    sessions = list((world.project / ".soong-agent" / "tasks").iterdir())
    assert len(sessions) == 1
    session_id = sessions[0].name
    wal = sessions[0] / "release.wal.jsonl"
    claims = [r for r in map(json.loads, wal.read_text().splitlines()) if "claim" in r["kind"]]
    assert len(claims) == 1

    time.sleep(1.6)  # the lease runs out
    world.server.enqueue(
        call("d1", "task_claim", {"task": "release"}),  # the next ready step: the same one
        call("d2", "task_complete", {"task": "release", "step_id": "build", "summary": "built"}),
        text_response("Release built."),
    )
    second = world.run("run", "--session-id", session_id, "carry on with the release")
    assert second.returncode == 0, second.stderr
    assert "Release built." in second.stdout
    records = [json.loads(line) for line in wal.read_text().splitlines()]
    kinds = [r["kind"] for r in records]
    assert kinds.count("step_claimed") == 2 and kinds.count("step_completed") == 1
    owners = [r.get("owner") or r.get("actor") for r in records if r["kind"] == "step_claimed"]
    assert owners[0] != owners[1]  # taken over by the second run
    claimed = world.server.requests[5].json["messages"][-1]["content"]
    assert re.search(r"build", claimed)
    # the resumed run's prompt shows the board: the task, its step and the expired claim
    system = world.server.requests[4].json["messages"][0]["content"]
    assert "release" in system and "build" in system
