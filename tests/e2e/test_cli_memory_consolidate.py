"""`soong-agent memory consolidate` (seed 002 "Dream", issue 15 item 7) through the installed
CLI: the loopback server plays the memory model; duplicates are merged into one memory file,
the dry run writes nothing."""

from __future__ import annotations

import json

import pytest

from soong_agent.adapters.memory import FileMemoryStore
from soong_agent.ports.memory import Memory
from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response

pytestmark = pytest.mark.e2e

MERGE = {
    "operations": [
        {
            "op": "merge",
            "name": "prefer-tabs",
            "sources": ["tabs-please"],
            "description": "The user indents with tabs",
            "body": "The user indents with tabs, never spaces.",
        }
    ]
}


def test_consolidate_merges_duplicates_and_the_dry_run_writes_nothing(world: CliWorld) -> None:
    store = FileMemoryStore(world.home / "memory")
    store.write(Memory("prefer-tabs", "The user indents with tabs", "user", "Tabs."))
    store.write(Memory("tabs-please", "Tabs, not spaces, for the user", "user", "No spaces."))
    world.server.enqueue(text_response(json.dumps(MERGE)), text_response(json.dumps(MERGE)))

    dry = world.run("memory", "consolidate", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "tabs-please" in dry.stdout and "dry run" in dry.stdout
    assert (world.home / "memory" / "user" / "tabs-please.md").exists()

    done = world.run("memory", "consolidate")
    assert done.returncode == 0, done.stderr
    assert not (world.home / "memory" / "user" / "tabs-please.md").exists()
    merged = (world.home / "memory" / "user" / "prefer-tabs.md").read_text(encoding="utf-8")
    assert "never spaces" in merged
    listed = world.run("memory", "list")
    assert "prefer-tabs" in listed.stdout and "tabs-please" not in listed.stdout
