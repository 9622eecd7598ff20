"""The installed CLI against servers that never finish, or send what does not fit (issue 39).

A server that keeps the connection alive with SSE comments forever is stopped by
`[model] timeout_ms`; one that sends its headers and then nothing, by `idle_timeout_ms`; a
chunk whose `delta.tool_calls` is a number is a protocol error. Each run exits non-zero with a
one-line reason naming the setting or the field, no traceback, the run is recorded with its
final status, and the session resumes with the next run.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import ScriptedResponse, raw_sse_response, text_response

pytestmark = pytest.mark.e2e

SSE = [("Content-Type", "text/event-stream")]


def configure(world: CliWorld, model: str, retry: str = "") -> None:
    config = world.home / "config.toml"
    text = config.read_text(encoding="utf-8")
    text = text.replace('name = "fake-model"\n', f'name = "fake-model"\n{model}\n')
    text = text.replace("[model.retry]\n", f"[model.retry]\n{retry}\n")
    config.write_text(text, encoding="utf-8")


def session_of(output: str) -> str:
    found = re.search(r"session: (ses_\w+)", output)
    assert found, output
    return found.group(1)


def last_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    line = stderr.strip().splitlines()[-1]
    assert line.startswith("soong-agent: error:"), stderr
    return line


def assert_recorded_and_resumes(world: CliWorld, session: str, reason: str) -> None:
    shown = world.run("sessions", "show", session)
    assert shown.returncode == 0, shown.stderr
    assert re.search(rf"run run_\w+: failed \([^\n]*{re.escape(reason)}", shown.stdout), (
        shown.stdout
    )
    world.server.enqueue(text_response("picked up again"))
    again = world.run("run", "--session-id", session, "try again")
    assert again.returncode == 0, again.stderr
    assert "picked up again" in again.stdout
    users = [
        m["content"] for m in world.server.requests[-1].json["messages"] if m["role"] == "user"
    ]
    assert users[-1] == "try again"


def test_a_server_that_sends_keep_alives_forever_is_stopped_by_timeout_ms(
    world: CliWorld,
) -> None:
    configure(world, "timeout_ms = 1500\nidle_timeout_ms = 1000")
    # a comment every 0.2 s for a minute: each read gets bytes, the answer never comes
    world.server.enqueue(
        ScriptedResponse(headers=SSE, chunks=[b": keep-alive\n\n"] * 300, delay_s=0.2)
    )
    result = world.run("run", "answer me", timeout=40)
    assert result.returncode != 0
    line = last_line(result.stderr)
    assert "timeout" in line and "model.timeout_ms = 1500" in line, line
    assert len(world.server.requests) == 1  # not retried: it would last as long again
    assert_recorded_and_resumes(world, session_of(result.stdout), "model.timeout_ms")


def test_a_server_that_goes_silent_is_stopped_by_idle_timeout_ms(world: CliWorld) -> None:
    configure(world, "idle_timeout_ms = 500", retry="max_attempts = 2")
    silent = ScriptedResponse(headers=SSE, chunks=[b"", b": too late\n\n"], delay_s=30)
    world.server.enqueue(silent, silent)
    result = world.run("run", "answer me", timeout=40)
    assert result.returncode != 0
    line = last_line(result.stderr)
    assert "timeout" in line and "model.idle_timeout_ms = 500" in line, line
    assert len(world.server.requests) == 2  # a stall is retried, per [model.retry]
    assert_recorded_and_resumes(world, session_of(result.stdout), "model.idle_timeout_ms")


def test_a_chunk_of_the_wrong_shape_ends_the_run_naming_the_field(world: CliWorld) -> None:
    bad = 'data: {"choices":[{"index":0,"delta":{"tool_calls":5}}]}'
    world.server.enqueue(raw_sse_response([bad, "", "data: [DONE]"]))
    result = world.run("run", "answer me")
    assert result.returncode != 0
    line = last_line(result.stderr)
    assert "protocol" in line and "choices[0].delta.tool_calls" in line, line
    assert "expected a list, found an integer (5)" in line, line
    assert_recorded_and_resumes(world, session_of(result.stdout), "choices[0].delta.tool_calls")
