"""Machine-readable output and CLI conventions (issue 18 items 4 and 5), through the installed
CLI: `run --output json` lines validate against `soong-agent schema events` and match the
events stored for the run; `--approve` modes; sessions as JSON; usage lines, --version, -p/-s."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import jsonschema
import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e


def write_call(path: str) -> object:
    return tool_call_response([("c1", "write_file", json.dumps({"path": path, "content": "x"}))])


def lines_of(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_run_output_json_is_one_valid_object_per_event_then_the_result(world: CliWorld) -> None:
    world.server.enqueue(write_call("a.txt"), text_response("All done."))
    result = world.run("run", "-o", "json", "--approve", "once-per-tool", "write a.txt")
    assert result.returncode == 0, result.stderr
    lines = lines_of(result.stdout)  # every line parses: stdout holds nothing else
    schema = json.loads(world.run("schema", "events").stdout)
    for line in lines:
        jsonschema.validate(line, schema)
    assert all(line["schema_version"] == 1 for line in lines)
    final = lines[-1]
    assert final["type"] == "result" and final["status"] == "completed"
    assert final["final_text"] == "All done."
    assert (world.project / "a.txt").read_text(encoding="utf-8") == "x"
    with sqlite3.connect(world.home / "sessions.sqlite") as db:
        stored = [
            json.loads(row[0])
            for row in db.execute(
                "SELECT payload FROM events WHERE run_id = ? ORDER BY seq", (final["run_id"],)
            )
        ]
    streamed = [{k: v for k, v in line.items() if k != "schema_version"} for line in lines[:-1]]
    assert [e["type"] for e in streamed] == [e["type"] for e in stored]
    assert streamed == stored


def test_approve_never_denies_and_rules_only_follows_the_policy(world: CliWorld) -> None:
    world.server.enqueue(write_call("b.txt"), text_response("ok"))
    never = world.run("run", "--approve", "never", "write b.txt")
    assert never.returncode == 0, never.stderr
    assert not (world.project / "b.txt").exists()
    assert "denied" in never.stderr

    config = world.home / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8") + '[permissions]\nwrite_without_callback = "allow"\n',
        encoding="utf-8",
    )
    world.server.enqueue(write_call("c.txt"), text_response("ok"))
    rules = world.run("run", "--approve", "rules-only", "write c.txt")
    assert rules.returncode == 0, rules.stderr
    assert (world.project / "c.txt").exists()
    bad = world.run("run", "--approve", "maybe", "hi")
    assert bad.returncode == 2 and "--approve" in bad.stderr


def test_once_per_tool_allows_the_first_ask_of_a_tool_only(world: CliWorld) -> None:
    world.server.enqueue(write_call("d.txt"), write_call("e.txt"), text_response("ok"))
    result = world.run("run", "--approve", "once-per-tool", "write two files")
    assert result.returncode == 0, result.stderr
    assert (world.project / "d.txt").exists() and not (world.project / "e.txt").exists()


def test_sessions_as_json(world: CliWorld) -> None:
    world.server.enqueue(text_response("hello there"))
    first = world.run("run", "-o", "json", "say hello")
    session_id = lines_of(first.stdout)[-1]["session_id"]
    listed = lines_of(world.run("sessions", "list", "--output", "json").stdout)
    assert [s["id"] for s in listed] == [session_id]
    assert listed[0]["type"] == "session" and listed[0]["schema_version"] == 1
    shown = world.run("sessions", "show", session_id, "-o", "json")
    assert shown.returncode == 0, shown.stderr
    (obj,) = lines_of(shown.stdout)
    assert obj["id"] == session_id and obj["runs"][0]["status"] == "completed"
    assert [m["role"] for m in obj["messages"]] == ["user", "assistant"]


def test_usage_lines_version_and_short_options(world: CliWorld) -> None:
    usage = world.run("run", "--help").stdout.splitlines()[0]
    assert usage == "Usage: soong-agent run [OPTIONS] [MESSAGE]"
    top = world.run("--help").stdout
    assert "--install-completion" in top and "--show-completion" in top
    version = world.run("--version")
    assert version.returncode == 0 and version.stdout.startswith("soong-agent ")
    world.server.enqueue(text_response("first"), text_response("second"))
    first = world.run("run", "-p", str(world.project), "-o", "json", "one")
    session_id = lines_of(first.stdout)[-1]["session_id"]
    again = world.run("run", "-s", session_id, "two")
    assert again.returncode == 0, again.stderr
    assert "second" in again.stdout and "(resumed)" in again.stderr
