"""Memory end to end (MEM-3, MEM-4): the installed CLI against the loopback OpenAI server, which
plays both the main model and the memory model (a second profile, `memory-model`, on the same
server). One session says "I always use tabs, never spaces"; the extraction job writes a `user/`
memory before the CLI exits; a new session's first request holds that memory."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import CANARY, CliWorld
from tests.support.fake_openai import text_response

pytestmark = pytest.mark.e2e

TABS = "I always use tabs, never spaces"
BODY = "The user always indents with tabs, never with spaces."
MEMORY_CONFIG = """
[model_overrides.memory]
name = "memory-model"

[memory]
extract_every_messages = 1
recall_model_profile = "memory"
extract_model_profile = "memory"
"""


def add_config(world: CliWorld, text: str) -> None:
    config = world.home / "config.toml"
    config.write_text(config.read_text(encoding="utf-8") + text, encoding="utf-8")


def operations(*ops: dict[str, Any]) -> str:
    return json.dumps({"operations": list(ops)})


def events_of(world: CliWorld, kind: str) -> list[dict[str, Any]]:
    with sqlite3.connect(world.home / "sessions.sqlite") as db:
        rows = db.execute("SELECT payload FROM events WHERE type = ? ORDER BY id", (kind,))
        return [json.loads(row[0]) for row in rows]


def system_text(body: dict[str, Any]) -> str:
    return "\n".join(
        m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
        for m in body["messages"]
        if m["role"] == "system"
    )


def test_a_preference_said_in_one_session_reaches_the_next_sessions_first_request(
    world: CliWorld,
) -> None:
    add_config(world, MEMORY_CONFIG)
    prefer_tabs = {
        "op": "create",
        "name": "prefer_tabs",
        "category": "user",
        "description": "The user indents with tabs, never spaces",
        "body": BODY,
    }
    world.server.enqueue(
        text_response("Noted: tabs."),  # session 1: the run
        text_response(operations(prefer_tabs)),  # session 1: extraction, before the CLI exits
        text_response('["prefer_tabs"]'),  # session 2: recall
        text_response("Here is hello.py, indented with tabs."),  # session 2: the run
        text_response(operations()),  # session 2: extraction, nothing new
    )
    first = world.run("run", TABS)
    assert first.returncode == 0, first.stderr
    memory_file = world.home / "memory" / "user" / "prefer_tabs.md"
    assert memory_file.is_file(), first.stderr
    assert BODY in memory_file.read_text(encoding="utf-8")
    assert "prefer_tabs" in (world.home / "memory" / "MEMORY.md").read_text(encoding="utf-8")

    second = world.run("run", "write hello.py that prints hello")
    assert second.returncode == 0, second.stderr
    requests = [r.json for r in world.server.requests]
    assert [r["model"] for r in requests] == [
        "fake-model",
        "memory-model",
        "memory-model",
        "fake-model",
        "memory-model",
    ]
    extraction = requests[1]["messages"][-1]["content"]
    assert TABS in extraction
    recall = requests[2]["messages"][-1]["content"]
    assert "- prefer_tabs [user]:" in recall and "write hello.py" in recall
    assert BODY in system_text(requests[3])  # the new session's first request
    assert BODY not in system_text(requests[0])
    (recalled,) = events_of(world, "memory_recalled")
    assert recalled["method"] == "model" and recalled["names"] == ["prefer_tabs"]
    assert world.server.pending == 0


def test_a_proposed_key_or_listing_is_refused_and_nothing_is_written(world: CliWorld) -> None:
    add_config(world, MEMORY_CONFIG)
    key = {
        "op": "create",
        "name": "api_key",
        "category": "reference",
        "description": "The user's API key",
        "body": f"The key is {CANARY}",
    }
    listing = {
        "op": "create",
        "name": "layout",
        "category": "reference",
        "description": "Where the code is",
        "body": "src/main.py\nsrc/util.py\ntests/test_main.py\n",
    }
    world.server.enqueue(text_response("ok"), text_response(operations(key, listing)))
    result = world.run("run", f"my key is {CANARY}; the code is in src/")
    assert result.returncode == 0, result.stderr
    assert not (world.home / "memory").exists() or not any(
        p.suffix == ".md" and p.name != "MEMORY.md" for p in (world.home / "memory").rglob("*")
    )
    assert "memory 'api_key' not kept" in result.stderr
    assert "memory 'layout' not kept" in result.stderr
    assert CANARY not in result.stderr and CANARY not in result.stdout
    sent = world.server.requests[1].json["messages"][-1]["content"]
    assert CANARY not in sent  # scrubbed before the memory model saw it
    assert world.server.pending == 0


def test_memory_disabled_asks_no_memory_model(world: CliWorld, tmp_path: Path) -> None:
    add_config(world, "[memory]\nenabled = false\nextract_every_messages = 1\n")
    world.server.enqueue(text_response("ok"))
    result = world.run("run", TABS)
    assert result.returncode == 0, result.stderr
    assert len(world.server.requests) == 1
