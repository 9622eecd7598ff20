"""An MCP server that asks things (MCP-4), through the installed CLI: its question is put on
the terminal field by field (under a real pseudo-terminal), declined when nobody is at a
terminal; its sampling request is asked about like a tool call and answered by the run's
model (over the loopback OpenAI-style server)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import CliWorld
from tests.e2e.test_cli_terminal import Terminal
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e

SERVER = Path(__file__).parents[1] / "support" / "mcp_servers" / "asking_server.py"


def _asking_server(world: CliWorld) -> None:
    servers = {"ask": {"command": sys.executable, "args": [str(SERVER)]}}
    (world.home / "mcp.json").write_text(json.dumps({"mcp_servers": servers}), encoding="utf-8")
    config = world.write_config()
    with config.open("a", encoding="utf-8") as file:
        file.write('[permissions]\nallow = ["mcp__ask__*"]\n')


def _tool_results(world: CliWorld, request: int) -> list[str]:
    messages = world.server.requests[request].json["messages"]
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_a_servers_question_is_asked_field_by_field_on_the_terminal(world: CliWorld) -> None:
    _asking_server(world)
    world.server.enqueue(
        tool_call_response([("c1", "mcp__ask__book", '{"city": "Lyon"}')]),
        text_response("Booked."),
    )
    term = Terminal(world, "run", "book me a room")
    term.read_until(r"answer it\? \[y\]es")
    assert "MCP server 'ask' asks: Booking a room in Lyon: when, and which room?" in term.text
    term.send("y\n")
    term.read_until(r"date \(text; required\) — Arrival date \(YYYY-MM-DD\): ")
    term.send("2026-12-24\n")
    term.read_until(r"nights \(a whole number; ≥ 1; default 1; optional\): ")
    term.send("\n")
    term.read_until(r"breakfast \(yes/no; default yes; optional\): ")
    term.send("maybe\n")
    term.read_until(r"\(answer yes or no\) breakfast: ")
    term.send("no\n")
    term.read_until(r"room \(one of 1\) single, 2\) double; required\): ")
    term.send("3\n")
    term.read_until(r"\('3' is not one of the choices\) room: ")
    term.send("2\n")
    out = term.read_until(r"session: ses_\w+")
    assert term.close() == 0, out
    assert "? mcp ask asked: Booking a room in Lyon" in out and "-> accept" in out
    (result,) = _tool_results(world, 1)
    assert json.loads(result.removeprefix("accept ")) == {
        "date": "2026-12-24",
        "nights": 1,
        "breakfast": False,
        "room": "double",
    }


def test_without_a_terminal_the_question_is_declined(world: CliWorld) -> None:
    _asking_server(world)
    world.server.enqueue(
        tool_call_response([("c1", "mcp__ask__book", '{"city": "Lyon"}')]),
        text_response("Not booked."),
    )
    done = world.run("run", "book me a room", input="y\n")
    assert done.returncode == 0, done.stderr
    assert _tool_results(world, 1) == ["decline null"]
    assert "-> decline (nobody to ask: not an interactive session)" in done.stderr


def test_sampling_is_asked_about_and_answered_by_the_runs_model(world: CliWorld) -> None:
    _asking_server(world)
    world.server.enqueue(
        tool_call_response([("c1", "mcp__ask__summarize", '{"text": "a long text"}')]),
        text_response("It is long."),
        text_response("Summarized."),
    )
    done = world.run("run", "summarize it", input="1\n")  # allow once, from a piped answer
    assert done.returncode == 0, done.stderr
    assert "mcp_sampling__ask wants to let MCP server 'ask' ask the model" in done.stderr
    assert "user: a long text" in done.stderr
    (result,) = _tool_results(world, 2)
    assert result.startswith("sampled by ") and result.endswith(": It is long.")
    sampling = world.server.requests[1].json
    assert "tools" not in sampling or not sampling["tools"]
    assert sampling["messages"][-1]["content"] == "a long text"
    assert "⇄ mcp ask sampling: answered" in done.stderr
