"""The installed CLI with `[storage] url = "postgresql://…"` (STORE-1, issue 33): every piece of
state a session keeps — sessions, runs, messages, events, artifacts, the Task WAL and the teams'
mailboxes — goes to one real PostgreSQL database (a fresh one per test, `postgres_url`), and a
second process sees what the first wrote. No `sessions.sqlite` is made under the home.

One loopback OpenAI-style server plays the model (`RoutedOpenAIServer`: by route when several
conversations talk at once, else in order)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import CANARY, CLI, CliWorld
from tests.support.fake_openai import text_response, tool_call_response
from tests.support.routed_openai import RoutedOpenAIServer

pytestmark = pytest.mark.e2e


@pytest.fixture
def world(tmp_path: Path, postgres_url: str) -> Iterator[CliWorld]:
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
        w = CliWorld(server=server, home=home, project=project, env=env)
        configure(w, postgres_url)
        yield w


@pytest.fixture
def server(world: CliWorld) -> RoutedOpenAIServer:
    assert isinstance(world.server, RoutedOpenAIServer)
    return world.server


def configure(world: CliWorld, url: str, extra: str = "") -> None:
    world.write_config(
        "[model]\n"
        'provider = "openai"\n'
        f'base_url = "{world.server.base_url}"\n'
        'api_key_env = "SOONG_TEST_KEY"\n'
        'name = "fake-model"\n'
        "[model.retry]\n"
        "initial_backoff_ms = 10\n"
        "[storage]\n"
        f'url = "{url}"\n' + extra
    )


def call(call_id: str, tool: str, **args: object) -> Any:
    return tool_call_response([(call_id, tool, json.dumps(args))])


def session_id_of(output: str) -> str:
    match = re.search(r"session:? (ses_\w+)", output)
    assert match, output
    return match.group(1)


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result


def sent_users(world: CliWorld, request: int = -1) -> list[str]:
    """The user messages of a chat request the model received."""
    messages = world.server.requests[request].json["messages"]
    return [m["content"] for m in messages if m["role"] == "user"]


def rows(url: str, sql: str, *params: object) -> list[tuple[Any, ...]]:
    """What a query of the test's database returns (read straight from PostgreSQL)."""
    import psycopg

    with psycopg.connect(url) as conn:
        return list(conn.execute(sql, params).fetchall())


def no_local_state(home: Path) -> None:
    """No SQLite file anywhere under the home, nothing under its `sessions` folder (artifacts)."""
    found = [p for p in home.rglob("*") if ".sqlite" in p.name]
    assert found == [], found
    artifacts = home / "sessions"
    assert not artifacts.exists() or not any(p.is_file() for p in artifacts.rglob("*"))


def test_run_resume_branch_and_sessions_read_from_postgres(
    world: CliWorld, postgres_url: str
) -> None:
    world.server.enqueue(text_response("first answer"))
    first = ok(world.run("run", "remember alpha"))
    assert "first answer" in first.stdout
    sid = session_id_of(first.stdout + first.stderr)

    world.server.enqueue(text_response("second answer"))
    second = ok(world.run("run", "--session-id", sid, "and beta"))
    assert "second answer" in second.stdout
    assert sent_users(world) == ["remember alpha", "and beta"]

    shown = ok(world.run("sessions", "show", sid))
    ids = re.findall(r"── ([\w ()]+?) ── (msg_\w+)", shown.stdout)
    assert [label for label, _ in ids] == ["user", "assistant", "user", "assistant"]
    assert "remember alpha" in shown.stdout and "second answer" in shown.stdout

    # a branch from the second user message: the model sees the first turn only
    world.server.enqueue(text_response("branch answer"))
    ok(world.run("run", "--session-id", sid, "--from-message", ids[2][1], "and gamma instead"))
    assert sent_users(world) == ["remember alpha", "and gamma instead"]
    shown = ok(world.run("sessions", "show", sid))
    assert "and gamma instead" in shown.stdout and "branch answer" in shown.stdout

    listed = ok(world.run("sessions", "list"))
    assert sid in listed.stdout
    assert rows(postgres_url, "SELECT id FROM soong_agent.sessions") == [(sid,)]
    no_local_state(world.home)

    # another home (another host's) pointed at the same database sees the same session
    other = world.home.parent / "other-home"
    other.mkdir()
    (other / "config.toml").write_text((world.home / "config.toml").read_text())
    elsewhere = CliWorld(
        world.server, other, world.project, {**world.env, "SOONG_AGENT_HOME": str(other)}
    )
    assert sid in ok(elsewhere.run("sessions", "list")).stdout
    assert "branch answer" in ok(elsewhere.run("sessions", "show", sid)).stdout
    no_local_state(other)


def test_an_artifact_and_a_compaction_are_kept_in_postgres(
    world: CliWorld, server: RoutedOpenAIServer, postgres_url: str
) -> None:
    configure(
        world,
        postgres_url,
        '[permissions]\nmode = "bypass"\n[tools]\nmax_result_chars = 2000\n'
        "[compact]\nkeep_recent_tokens = 0\nauto_background = false\n",
    )
    lines = [f"line {i}: the quick brown fox\n" for i in range(400)]
    lines[200] = "THE MIDDLE MARK\n"
    big = "".join(lines)
    (world.project / "big.log").write_text(big, encoding="utf-8")
    world.server.enqueue(call("c1", "read_file", path="big.log"), text_response("it is long"))
    first = ok(world.run("run", "read big.log"))
    sid = session_id_of(first.stdout + first.stderr)
    stored = world.server.requests[1].json["messages"][-1]["content"]
    artifact = re.search(r"art_\w+", stored)
    assert artifact, stored
    assert "THE MIDDLE MARK" not in stored  # cut: the middle is in the artifact only
    assert rows(postgres_url, "SELECT count(*) FROM soong_agent.artifacts") == [(1,)]
    no_local_state(world.home)  # the artifact's content is in the database

    # a second process reads the artifact back, then compacts the context
    server.route(
        "Summarise this part", text_response("SUMMARY: read big.log, a mark in its middle")
    )
    world.server.enqueue(
        call(
            "c2",
            "read_artifact",
            artifact_id=artifact.group(0),
            offset=big.index("THE MIDDLE MARK"),
        ),
        call("c3", "compact"),
        text_response("compacted and done"),
    )
    second = ok(world.run("run", "--session-id", sid, "what is in its middle?"))
    assert "compacted and done" in second.stdout
    read_back = [
        m["content"]
        for r in world.server.requests
        for m in r.json["messages"]
        if m.get("tool_call_id") == "c2"
    ]
    assert read_back and "THE MIDDLE MARK" in read_back[0]
    # the summary took the place of the older messages in the next request
    last = world.server.requests[-1].json["messages"]
    assert "SUMMARY: read big.log" in json.dumps(last)
    assert not any(m.get("tool_call_id") == "c1" for m in last)
    assert server.served["Summarise this part"] == 1
    types = [t for (t,) in rows(postgres_url, "SELECT type FROM soong_agent.events")]
    assert "compaction" in types
    shown = ok(world.run("sessions", "show", sid))
    assert "SUMMARY: read big.log" in shown.stdout
    no_local_state(world.home)


POOL = (
    '[[agents.worker_pools]]\npool_id = "p"\n'
    '[[agents.worker_pools.workers]]\nagent_definition_id = "default_worker_agent"\n'
)


def test_a_teammates_mail_goes_through_postgres_and_team_show_reads_it(
    world: CliWorld, server: RoutedOpenAIServer, postgres_url: str
) -> None:
    configure(world, postgres_url, POOL)
    spawn = {"definition": "default_worker_agent", "name": "alice", "prompt": "alice: say hi"}
    server.route(
        "alice: say hi",
        call("c1", "send_message", to="lead", body="hi lead, alice here"),
        text_response("said hi"),
    )
    server.route(
        "start the team",
        tool_call_response([("c2", "spawn_teammate", json.dumps(spawn))]),
        text_response("team started"),
    )
    started = ok(world.run("run", "--orchestrator", "start the team"))
    lead = session_id_of(started.stdout + started.stderr)
    assert server.served["alice: say hi"] == 2
    mail = rows(postgres_url, "SELECT member, line FROM soong_agent.inbox_lines")
    assert any("hi lead, alice here" in line for _, line in mail), mail
    assert not (world.project / ".soong-agent" / "teams").exists()

    shown = ok(world.run("team", "show", lead))
    assert "alice (default_worker_agent): idle" in shown.stdout
    assert "lead: 1 unread mail" in shown.stdout

    server.route("from alice, message", text_response("thanks, alice"))
    again = ok(world.run("run", "-s", lead, "anything new?"))
    assert "thanks, alice" in again.stdout
    (asked,) = server.requests_for("from alice, message")
    assert "hi lead, alice here" in asked.body.decode("utf-8")
    assert "unread" not in ok(world.run("team", "show", lead)).stdout
    no_local_state(world.home)


def wait_for(
    what: str, done: Callable[[], bool], proc: subprocess.Popen[str] | None = None
) -> None:
    """Until `done()` (and while `proc` runs: once it ended, nothing more will happen)."""
    deadline = time.monotonic() + 60  # a bound on a hang, not a timing of the test
    while not done():
        if proc is not None:
            assert proc.poll() is None, f"the process ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.02)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """The CLI processes a test starts; any still running at its end is killed (by its pid)."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def advisory_locks(url: str) -> list[tuple[Any, ...]]:
    """The advisory locks held in the test's database (runs and session claims)."""
    return rows(
        url,
        "SELECT l.pid FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
        " WHERE l.locktype = 'advisory' AND d.datname = current_database()",
    )


def task_records(url: str) -> list[dict[str, Any]]:
    lines = rows(url, "SELECT line FROM soong_agent.task_lines ORDER BY name, seq")
    return [json.loads(line) for (line,) in lines]


def test_a_killed_run_is_interrupted_its_step_taken_over_and_a_second_resumer_refused(
    world: CliWorld, postgres_url: str, processes: list[subprocess.Popen[str]]
) -> None:
    # a lease of 1 ms has run out when the next process asks: a takeover without a wait
    configure(
        world,
        postgres_url,
        '[permissions]\nmode = "bypass"\n[task]\nstep_lease_timeout_ms = 1\n',
    )
    started = world.project / "started"
    world.server.enqueue(
        call("c1", "task_create", name="release", title="Ship it"),
        call("c2", "task_add_step", task="release", step_id="build", title="Build"),
        call("c3", "task_claim", task="release", step_id="build"),
        call("c4", "run_command", command=f"touch {started} && sleep 60"),  # killed in here
    )
    first = subprocess.Popen(
        [str(CLI), "run", "ship the release"],
        env=world.env,
        cwd=world.project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    processes.append(first)
    wait_for("the command started", started.exists, first)
    os.killpg(first.pid, signal.SIGKILL)
    _, said = first.communicate(timeout=30)
    sid = session_id_of(said)
    wait_for(
        "the server let the killed process's locks go", lambda: not advisory_locks(postgres_url)
    )
    claims = [r for r in task_records(postgres_url) if r["kind"] == "step_claimed"]
    assert len(claims) == 1

    shown = ok(world.run("sessions", "show", sid))
    assert re.search(r"run run_\w+: interrupted \(the process running it stopped", shown.stdout)
    assert ": running" not in shown.stdout
    listed = ok(world.run("tasks", "list")).stdout
    assert "1 tasks in postgresql://" in listed
    assert f"{sid}/release  Ship it  [1 ready]" in listed  # the killed run's lease has ended

    # the next process takes the step over, then waits at a question, holding the session
    write = {"path": "built.txt", "content": "built\n"}
    world.server.enqueue(
        call("d1", "task_claim", task="release"),
        call("d2", "task_complete", task="release", step_id="build", summary="built"),
        tool_call_response([("d3", "write_file", json.dumps(write))]),
        text_response("Release built."),
    )
    second = subprocess.Popen(
        [str(CLI), "run", "--permission-mode", "default", "-s", sid, "carry on"],
        env=world.env,
        cwd=world.project,
        stdin=subprocess.PIPE,  # left open: the run waits at the question
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    processes.append(second)
    assert second.stderr is not None
    asked = ""
    while "answer" not in asked:
        piece = second.stderr.read(1)
        assert piece, f"the second run ended before its question: {asked}"
        asked += piece
    resumed = world.server.requests[4].json["messages"]
    calls = [c["function"]["name"] for m in resumed for c in m.get("tool_calls") or []]
    assert calls[:3] == ["task_create", "task_add_step", "task_claim"]  # the earlier turns
    assert [m["content"] for m in resumed if m["role"] == "user"] == [
        "ship the release",
        "carry on",
    ]

    sent = len(world.server.requests)
    third = world.run("run", "-s", sid, "me too")
    assert third.returncode == 2, third.stderr
    (error,) = [line for line in third.stderr.splitlines() if "error" in line]
    assert f"session '{sid}' is in use by pid {second.pid}" in error, third.stderr
    assert "Traceback" not in third.stderr
    assert len(world.server.requests) == sent  # the model was never asked

    out, err = second.communicate("1\n", timeout=60)
    assert second.returncode == 0, err
    assert "Release built." in out
    assert (world.project / "built.txt").read_text() == "built\n"
    records = task_records(postgres_url)
    owners = [r.get("owner") or r.get("actor") for r in records if r["kind"] == "step_claimed"]
    assert len(owners) == 2 and owners[0] != owners[1]  # taken over by the second process
    assert [r["kind"] for r in records].count("step_completed") == 1
    assert f"{sid}/release  Ship it  [1 done]" in ok(world.run("tasks", "list")).stdout
    history = ok(world.run("tasks", "show", f"{sid}/release")).stdout
    claimers = re.findall(r"(run_\w+): claimed build", history)
    assert len(claimers) == 2 and claimers[0] != claimers[1], history
    assert f"{claimers[1]}: completed build: built" in history
    no_local_state(world.home)
    assert not (world.project / ".soong-agent" / "tasks").exists()
