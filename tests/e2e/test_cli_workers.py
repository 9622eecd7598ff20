"""Queued runs and workers through the installed CLI (WORK-1, WORK-2), on the SQLite store and on
a real PostgreSQL: `run --detach` prints the ids at once and nothing runs until a worker serves
the project; `runs show` says why a run waits; two workers complete every run exactly once; a
worker killed with SIGKILL mid-run has its run taken over by another after the lease, which
continues the session (the command that was cut off is not run again); `runs cancel` ends a
queued run at once and `runs wait` says so by its exit code; SIGTERM stops a worker cleanly."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import CLI, CliWorld
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e

WAIT_S = 60.0


@pytest.fixture(params=["sqlite", "postgresql"])
def queue_world(request: pytest.FixtureRequest, world: CliWorld) -> CliWorld:
    extra = (
        '[workers]\nheartbeat_ms = 200\nlease_timeout_ms = 1500\n[permissions]\nmode = "bypass"\n'
    )
    if request.param == "postgresql":
        url = str(request.getfixturevalue("postgres_url"))
        extra += f'[storage]\nurl = "{url}"\n'
    config = world.home / "config.toml"
    config.write_text(config.read_text(encoding="utf-8") + extra, encoding="utf-8")
    return world


def detach(world: CliWorld, *args: str) -> tuple[str, str]:
    done = world.run("run", "--detach", *args)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.strip().splitlines())
    return lines["session"], lines["run"]


@pytest.fixture
def workers(queue_world: CliWorld) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=WAIT_S)


def start_worker(
    world: CliWorld, started: list[subprocess.Popen[str]], name: str
) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [str(CLI), "worker", "--project", str(world.project), "--id", name],
        env=world.env,
        cwd=world.project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    started.append(proc)
    return proc


def read_until(proc: subprocess.Popen[str], text: str, timeout: float) -> list[str]:
    """The worker's stderr lines up to the first holding `text`, its end, or `timeout` (a
    reader thread: a silent worker must fail the test, not hang it)."""
    assert proc.stderr is not None
    stream = proc.stderr
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        seen.append(line)
        if text in line:
            break
    return seen


def test_detached_runs_are_run_once_each_by_two_workers(
    queue_world: CliWorld, workers: list[subprocess.Popen[str]]
) -> None:
    world = queue_world
    ids = [detach(world, f"say hello to person {n}") for n in range(4)]
    listed = world.run("runs", "list")
    assert listed.returncode == 0 and listed.stdout.count(" queued ") == 4
    shown = world.run("runs", "show", ids[0][1])
    assert "status:    queued" in shown.stdout and "waiting:   for a worker" in shown.stdout
    assert world.server.requests == []  # nothing runs without a worker
    world.server.enqueue(*(text_response(f"hello #{n}") for n in range(4)))
    first = start_worker(world, workers, "w1")
    second = start_worker(world, workers, "w2")
    for _session, run in ids:
        waited = world.run("runs", "wait", run, "--timeout", str(WAIT_S))
        assert waited.returncode == 0, waited.stdout + waited.stderr
        assert f"run {run}: completed" in waited.stdout
    assert len(world.server.requests) == 4  # each run asked the model once
    answers = []
    for session, _run in ids:
        shown = world.run("sessions", "show", session)
        answers += [line for line in shown.stdout.splitlines() if "hello #" in line]
    assert len(answers) == 4 and len({a.strip() for a in answers}) == 4
    listed = world.run("runs", "list", "--output", "json")
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert {r["status"] for r in rows} == {"completed"} and {r["attempts"] for r in rows} == {1}
    for proc in (first, second):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=WAIT_S) == 0
    if "postgresql://" in world.home.joinpath("config.toml").read_text():
        assert not list(world.home.rglob("*.sqlite"))  # the queue is in PostgreSQL too


def test_a_killed_workers_run_is_taken_over_and_continued(
    queue_world: CliWorld, workers: list[subprocess.Popen[str]]
) -> None:
    world = queue_world
    _session, run = detach(world, "run the long job")
    world.server.enqueue(
        tool_call_response([("c1", "run_command", json.dumps({"command": "sleep 60"}))])
    )
    doomed = start_worker(world, workers, "doomed")
    deadline = time.monotonic() + WAIT_S
    while not world.server.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert world.server.requests, "the first worker never asked the model"
    time.sleep(0.5)  # the command is running
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait(timeout=WAIT_S)
    world.server.enqueue(text_response("The job was cut off; I stopped there."))
    start_worker(world, workers, "rescuer")
    waited = world.run("runs", "wait", run, "--timeout", str(WAIT_S))
    assert waited.returncode == 0, waited.stdout + waited.stderr
    shown = world.run("runs", "show", run, "--output", "json")
    doc = json.loads(shown.stdout)
    assert doc["attempts"] == 2 and doc["worker"] == "rescuer"
    # the takeover continued the session from its last committed turn (the turn cut off by
    # the kill was not committed: its command did not complete) and asked the model to carry
    # on with the original request, which it still sees
    last = world.server.requests[-1].json["messages"]
    assert last[1] == {"role": "user", "content": "run the long job"}
    assert "stopped before it finished" in last[-1]["content"]
    assert len(world.server.requests) == 2


def test_a_queued_run_is_cancelled_at_once(queue_world: CliWorld) -> None:
    world = queue_world
    _session, run = detach(world, "never mind")
    cancelled = world.run("runs", "cancel", run)
    assert cancelled.returncode == 0 and f"run {run}: cancelled" in cancelled.stdout
    waited = world.run("runs", "wait", run, "--timeout", "5")
    assert waited.returncode == 130
    unknown = world.run("runs", "show", "run_nope")
    assert unknown.returncode == 2 and "no queued run 'run_nope'" in unknown.stderr
    timeout = world.run("runs", "wait", detach(world, "later")[1], "--timeout", "0.2")
    assert timeout.returncode == 124


def test_a_frozen_workers_run_is_taken_over_and_the_old_worker_writes_nothing_more(
    queue_world: CliWorld, workers: list[subprocess.Popen[str]]
) -> None:
    world = queue_world
    session, run = detach(world, "run the slow job")
    world.server.enqueue(
        tool_call_response([("c1", "run_command", json.dumps({"command": "sleep 1"}))])
    )
    frozen = start_worker(world, workers, "frozen")
    deadline = time.monotonic() + WAIT_S
    while not world.server.requests and time.monotonic() < deadline:
        time.sleep(0.02)
    assert world.server.requests, "the first worker never asked the model"
    os.killpg(frozen.pid, signal.SIGSTOP)  # frozen mid-run, its lease and claims held
    try:
        world.server.enqueue(text_response("done by the rescuer"))
        start_worker(world, workers, "rescuer")
        waited = world.run("runs", "wait", run, "--timeout", str(WAIT_S))
        assert waited.returncode == 0, waited.stdout + waited.stderr
        world.server.enqueue(text_response("STALE: written by the frozen worker"))
    finally:
        os.killpg(frozen.pid, signal.SIGCONT)
    # woken, the old worker finds its lease taken over and stops the run
    lines = read_until(frozen, "taken over", WAIT_S)
    assert any("taken over" in line for line in lines), "".join(lines)
    frozen.send_signal(signal.SIGTERM)
    frozen.wait(timeout=WAIT_S)
    shown = world.run("sessions", "show", session)
    assert "done by the rescuer" in shown.stdout and "STALE" not in shown.stdout
    doc = json.loads(world.run("runs", "show", run, "--output", "json").stdout)
    assert doc["status"] == "completed" and doc["worker"] == "rescuer" and doc["attempts"] == 2


def test_an_approval_is_answered_from_another_process(
    queue_world: CliWorld, workers: list[subprocess.Popen[str]]
) -> None:
    world = queue_world
    _session, run = detach(world, "write the notes", "--permission-mode", "default")
    world.server.enqueue(
        tool_call_response(
            [("c1", "write_file", json.dumps({"path": "notes.txt", "content": "hello\n"}))]
        ),
        text_response("Notes written."),
    )
    start_worker(world, workers, "w1")
    deadline = time.monotonic() + WAIT_S
    rows: list[dict[str, object]] = []
    while not rows and time.monotonic() < deadline:
        listed = world.run("approvals", "list", "--output", "json")
        assert listed.returncode == 0, listed.stderr
        rows = [json.loads(line) for line in listed.stdout.splitlines()]
        time.sleep(0.1)
    assert rows, "the run never asked"
    [question] = rows
    assert question["tool"] == "write_file" and question["run_id"] == run
    assert "+hello" in str(question["detail"])  # the diff is shown to whoever answers
    assert not (world.project / "notes.txt").exists()  # nothing written before the answer
    answered = world.run("approvals", "answer", str(question["approval_id"]), "allow_once")
    assert answered.returncode == 0, answered.stderr
    waited = world.run("runs", "wait", run, "--timeout", str(WAIT_S))
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert (world.project / "notes.txt").read_text() == "hello\n"
    again = world.run("approvals", "answer", str(question["approval_id"]), "deny")
    assert again.returncode == 2 and "answered already" in again.stderr
    assert world.run("approvals", "list").stdout.strip() == "no pending approvals"
