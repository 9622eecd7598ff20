"""A `soong-agent run` killed (SIGKILL) mid-run: `sessions show` in the next process reads the run
as `interrupted` (not `running` for ever), and the session resumes (issue 39 item 1)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import pytest

from tests.e2e.conftest import CLI, CliWorld
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e


def test_a_killed_run_shows_interrupted_and_the_session_resumes(world: CliWorld) -> None:
    write = json.dumps({"path": "hello.txt", "content": "hi\n"})
    world.server.enqueue(tool_call_response([("call_1", "write_file", write)]))
    proc = subprocess.Popen(
        [str(CLI), "run", "create hello.txt"],
        stdin=subprocess.PIPE,  # left open: the run waits at the question
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=world.env,
        cwd=world.project,
    )
    assert proc.stderr is not None
    said = ""
    deadline = time.monotonic() + 20
    while "answer" not in said and time.monotonic() < deadline:
        said += proc.stderr.read(1)
    session = re.search(r"session (ses_\w+)", said)
    assert session, said
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.communicate()

    shown = world.run("sessions", "show", session.group(1))
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"run run_\w+: interrupted \(the process running it stopped", shown.stdout)
    assert ": running" not in shown.stdout

    world.server.enqueue(text_response("picked up again"))
    resumed = world.run("run", "--session-id", session.group(1), "go on")
    assert resumed.returncode == 0, resumed.stderr
    assert "picked up again" in resumed.stdout
    # the killed turn was never committed: the session goes on from the user's message
    sent = world.server.requests[-1].json["messages"]
    users = [m["content"] for m in sent if m["role"] == "user"]
    assert users == ["create hello.txt", "go on"]
