"""What a new user meets in the first hour with a local model, through the installed CLI.

Small context windows, a session that must exist from the first moment, `base_url` mistakes,
a closed port, a server that sends no usage, and a missing API key.
"""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import CLI, CliWorld
from tests.support.fake_openai import error_response, text_response

pytestmark = pytest.mark.e2e


def config(world: CliWorld, *lines: str, base_url: str | None = None) -> None:
    url = world.server.base_url if base_url is None else base_url
    world.write_config(
        "[model]\n"
        'provider = "openai"\n'
        f'base_url = "{url}"\n'
        'api_key_env = "SOONG_TEST_KEY"\n'
        'name = "fake-model"\n' + "".join(line + "\n" for line in lines) + "[model.retry]\n"
        "initial_backoff_ms = 10\n"
    )


def event_types(world: CliWorld) -> list[str]:
    with sqlite3.connect(world.home / "sessions.sqlite") as db:
        return [row[0] for row in db.execute("SELECT type FROM events ORDER BY id")]


@pytest.mark.parametrize("window", [4_096, 8_192, 16_384, 32_768])
def test_a_short_first_message_reaches_the_model_unchanged_on_small_windows(
    world: CliWorld, window: int
) -> None:
    config(world, f"context_window = {window}")
    world.server.enqueue(text_response("hi there"))
    result = world.run("run", "say hello to the new user")
    assert result.returncode == 0, result.stderr
    assert "hi there" in result.stdout
    messages = world.server.requests[0].json["messages"]
    assert messages[-1] == {"role": "user", "content": "say hello to the new user"}
    assert [m["role"] for m in messages] == ["system", "user"]
    types = event_types(world)
    assert "context" in types
    assert "compaction" not in types


def test_a_window_that_cannot_work_is_refused_by_check_and_run(world: CliWorld) -> None:
    config(world, "context_window = 2048")
    check = world.run("config", "check")
    assert check.returncode == 2
    assert "cannot work" in check.stderr and "2048" in check.stderr
    assert "config OK" not in check.stdout
    run = world.run("run", "hello")
    assert run.returncode == 2
    assert "cannot work" in run.stderr
    assert world.server.requests == []  # nothing was sent


def test_config_check_prints_the_effective_budget_of_each_profile(world: CliWorld) -> None:
    config(world, "context_window = 8192")
    check = world.run("config", "check")
    assert check.returncode == 0, check.stderr
    main = next(line for line in check.stdout.splitlines() if line.startswith("main: window"))
    assert "window 8192" in main and "compaction at" in main and "scaled by" in main
    assert "system prompt measured at" in main
    assert re.search(r"^compact: window 8192", check.stdout, re.MULTILINE)


def test_two_quick_interrupts_leave_a_listed_showable_session(world: CliWorld) -> None:
    config(world)
    world.server.enqueue(text_response("a slow answer", pieces=5).with_delay(1.0))
    proc = subprocess.Popen(
        [str(CLI), "run", "remember this request"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=world.env,
        cwd=world.project,
    )
    deadline = time.monotonic() + 30
    while not world.server.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert world.server.requests, "the request never arrived"
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    match = re.search(r"session (ses_\w+)", err)
    assert match, err
    shown = world.run("sessions", "show", match.group(1))
    assert shown.returncode == 0, shown.stderr
    assert "remember this request" in shown.stdout
    listed = world.run("sessions", "list")
    assert match.group(1) in listed.stdout


def test_base_url_without_a_scheme_is_a_config_error(world: CliWorld) -> None:
    bare = world.server.base_url.removeprefix("http://")
    config(world, base_url=bare)
    for args in (("config", "check"), ("run", "hello")):
        result = world.run(*args)
        assert result.returncode == 2, result.stderr
        assert "model.base_url" in result.stderr
        assert f"http://{bare}" in result.stderr  # the likely fix
    assert world.server.requests == []


def test_a_404_names_the_missing_v1(world: CliWorld) -> None:
    config(world, base_url=world.server.base_url.removesuffix("/v1"))
    world.server.enqueue(error_response(404, message="Not Found"))
    result = world.run("run", "hello")
    assert result.returncode == 1
    assert "not_found" in result.stderr
    assert "/v1" in result.stderr and "base_url" in result.stderr
    assert len(world.server.requests) == 1  # a 404 is not retried


def test_a_closed_port_fails_fast_after_one_reported_retry(world: CliWorld) -> None:
    with socket_on_free_port() as port:
        pass  # closed again: nothing listens there now
    config(world, base_url=f"http://127.0.0.1:{port}/v1")
    started = time.monotonic()
    result = world.run("run", "hello")
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    assert "cannot connect" in result.stderr
    retries = [line for line in result.stderr.splitlines() if "retrying in" in line]
    assert len(retries) == 1, result.stderr
    assert "attempt 2 of 2" in retries[0] and "transport" in retries[0]
    assert elapsed < 3.0, f"a refused connection took {elapsed:.1f} s to report"


def test_usage_is_estimated_and_marked_when_the_server_sends_none(world: CliWorld) -> None:
    config(world)
    world.server.enqueue(text_response("no usage here", usage=False))
    result = world.run("run", "hello")
    assert result.returncode == 0, result.stderr
    summary = next(line for line in result.stderr.splitlines() if line.startswith("[completed"))
    assert re.search(r"~\d+ in / ~\d+ out tokens \(estimated", summary), summary
    with sqlite3.connect(world.home / "sessions.sqlite") as db:
        payloads = [r[0] for r in db.execute("SELECT payload FROM events WHERE type = 'usage'")]
    assert payloads and all('"estimated":true' in p for p in payloads)


def test_reported_usage_is_not_marked_estimated(world: CliWorld) -> None:
    config(world)
    world.server.enqueue(text_response("with usage", prompt_tokens=42, completion_tokens=5))
    result = world.run("run", "hello")
    summary = next(line for line in result.stderr.splitlines() if line.startswith("[completed"))
    assert "42 in / 5 out tokens" in summary and "estimated" not in summary


def test_a_missing_api_key_counts_no_model_call(world: CliWorld) -> None:
    config(world)
    del world.env["SOONG_TEST_KEY"]
    result = world.run("run", "hello")
    assert result.returncode == 2
    assert "SOONG_TEST_KEY" in result.stderr
    assert "0 model call(s)" in result.stderr
    assert "1 model call" not in result.stderr
    assert world.server.requests == []


class socket_on_free_port:
    """A port that was free a moment ago: bound while inside the block, closed after it."""

    def __enter__(self) -> int:
        import socket

        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        return int(self._sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._sock.close()


def test_the_session_is_durable_before_the_first_request(world: CliWorld, tmp_path: Path) -> None:
    """The session row and the message are on disk while the request is still in flight."""
    config(world)
    world.server.enqueue(text_response("slow", pieces=3).with_delay(1.0))
    proc = subprocess.Popen(
        [str(CLI), "run", "durable from the start"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=world.env,
        cwd=world.project,
    )
    try:
        deadline = time.monotonic() + 30
        while not world.server.requests and time.monotonic() < deadline:
            time.sleep(0.01)
        assert world.server.requests
        with sqlite3.connect(world.home / "sessions.sqlite") as db:
            contents = [r[0] for r in db.execute("SELECT content FROM messages")]
        assert any("durable from the start" in c for c in contents)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
