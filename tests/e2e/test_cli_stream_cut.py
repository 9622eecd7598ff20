"""A reply stream cut off part-way is sent again (issue 12, LOOP): the installed CLI against the
loopback OpenAI server, which closes the connection in the middle of a chunked body."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import cut_stream_response, text_response, tool_call_response

pytestmark = pytest.mark.e2e


def configure(world: CliWorld, retry: str = "") -> None:
    config = world.home / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8").replace(
            "[model.retry]\n", f"[model.retry]\n{retry}\n" if retry else "[model.retry]\n"
        )
        + '[permissions]\nmode = "bypass"\n',
        encoding="utf-8",
    )


def session_of(output: str) -> str:
    found = re.search(r"session: (ses_\w+)", output)
    assert found, output
    return found.group(1)


def test_a_cut_answer_is_asked_again_and_only_the_whole_one_is_kept(world: CliWorld) -> None:
    configure(world)
    world.server.enqueue(
        cut_stream_response("Draft words that never finish"), text_response("Final answer.")
    )
    result = world.run("run", "answer me")
    assert result.returncode == 0, result.stderr
    assert "Final answer." in result.stdout
    assert "the answer was cut off" in result.stderr
    assert "discarded" in result.stderr
    assert len(world.server.requests) == 2
    shown = world.run("sessions", "show", session_of(result.stdout))
    assert shown.returncode == 0, shown.stderr
    assert "Final answer." in shown.stdout
    assert "Draft" not in shown.stdout  # the cut part is not in the stored history


def test_a_cut_inside_tool_arguments_runs_each_call_once(world: CliWorld) -> None:
    configure(world)
    calls = [
        ("c1", "run_command", json.dumps({"command": "echo a >> log.txt"})),
        ("c2", "run_command", json.dumps({"command": "echo b >> log.txt"})),
    ]
    whole = tool_call_response(calls, fragments=4)
    # cut in the middle of the second call's arguments (after 7 of its chunks)
    cut = dataclasses.replace(whole, cut_after=len(whole.chunks) - 4)
    world.server.enqueue(cut, whole, text_response("done"))
    result = world.run("run", "log twice")
    assert result.returncode == 0, result.stderr
    assert (world.project / "log.txt").read_text(encoding="utf-8") == "a\nb\n"
    assert len(world.server.requests) == 3
    # the retried request is the same request; the next one carries each result once
    assert world.server.requests[0].body == world.server.requests[1].body
    answered = [m for m in world.server.requests[2].json["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in answered] == ["c1", "c2"]


def test_when_stream_retries_run_out_the_run_fails_clearly_and_resumes(world: CliWorld) -> None:
    configure(world, "stream_max_retries = 1")
    world.server.enqueue(
        cut_stream_response("first part"),
        cut_stream_response("second part"),
        text_response("after resume"),
    )
    result = world.run("run", "answer me")
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("soong-agent: error:"), result.stderr
    assert "transport" in last or "ended" in last or "connection" in last, last
    assert "Traceback" not in result.stderr
    again = world.run("run", "--session-id", session_of(result.stdout), "try again")
    assert again.returncode == 0, again.stderr
    assert "after resume" in again.stdout
