"""PROMPT-2 end to end: a sub-folder's AGENTS.md reaches the model only after the agent worked
in that folder, and again when the session is resumed; the installed CLI against the loopback
OpenAI server."""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e

PKG_RULE = "pkg rule: every public function carries a docstring and type hints."
PROJECT_RULE = "project rule: run the tests before you answer."


def session_id_of(output: str) -> str:
    match = re.search(r"session: (ses_\w+)", output)
    assert match, output
    return match.group(1)


def system_of(world: CliWorld, request: int) -> str:
    messages = world.server.requests[request].json["messages"]
    return "\n".join(m["content"] for m in messages if m["role"] == "system")


def chain_of(system: str) -> str:
    """The instruction chain of a system prompt (without the environment, whose date moves)."""
    start = system.index("Instructions from the user and the project")
    return system[start : system.index("Environment:", start)]


def events_of(world: CliWorld, kind: str) -> list[dict[str, Any]]:
    with sqlite3.connect(world.home / "sessions.sqlite") as db:
        rows = db.execute("SELECT payload FROM events WHERE type = ? ORDER BY seq", (kind,))
        return [json.loads(row[0]) for row in rows]


def test_a_folder_agents_md_arrives_after_a_read_and_again_on_resume(world: CliWorld) -> None:
    (world.project / "AGENTS.md").write_text(PROJECT_RULE + "\n", encoding="utf-8")
    (world.project / "pkg").mkdir()
    (world.project / "pkg" / "AGENTS.md").write_text(PKG_RULE + "\n", encoding="utf-8")
    (world.project / "pkg" / "x.py").write_text("x = 1\n", encoding="utf-8")
    read = json.dumps({"path": "pkg/x.py"})
    world.server.enqueue(
        tool_call_response([("c1", "read_file", read)]),
        text_response("x is 1."),
        text_response("Still 1."),
    )

    first = world.run("run", "what is x in pkg/x.py?")
    assert first.returncode == 0, first.stderr
    assert PROJECT_RULE in system_of(world, 0)
    assert PKG_RULE not in system_of(world, 0)
    second = system_of(world, 1)
    assert PKG_RULE in second
    assert 'source="<project>/pkg/AGENTS.md" folder="pkg"' in second
    assert second.index(PROJECT_RULE) < second.index(PKG_RULE)
    (event,) = events_of(world, "instructions_loaded")
    assert (event["path"], event["folder"]) == ("pkg/AGENTS.md", "pkg")
    assert event["bytes"] == len(PKG_RULE)

    sid = session_id_of(first.stdout)
    resumed = world.run("run", "--session-id", sid, "and now?")
    assert resumed.returncode == 0, resumed.stderr
    assert chain_of(system_of(world, 2)) == chain_of(second)  # as the session ended
    assert len(events_of(world, "instructions_loaded")) == 1
