"""A small context window (a local model's 8192 tokens) needs the system prompt's exact size
before the first request. The first run in a home counts it with the tokenizer; later runs
know it from the count kept under `${SOONG_AGENT_HOME}/cache` and send their first request
without loading the tokenizer (issue 32: a faster first answer)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response

pytestmark = pytest.mark.e2e


def first_context(world: CliWorld, message: str) -> dict[str, object]:
    world.server.enqueue(text_response("ok"))
    result = world.run("run", "-o", "json", message)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines()]
    context: dict[str, object] = next(e for e in events if e["type"] == "context")
    return context


def test_a_later_run_knows_its_prompts_size_without_the_tokenizer(world: CliWorld) -> None:
    config = world.home / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8").replace(
            'name = "fake-model"\n', 'name = "fake-model"\ncontext_window = 8192\n'
        ),
        encoding="utf-8",
    )
    first = first_context(world, "hello")
    assert first["exact"] is True  # counted with the tokenizer, loaded for it
    assert (world.home / "cache" / "o200k-counts.json").exists()
    second = first_context(world, "hello again")
    assert second["system_tokens"] == first["system_tokens"]  # the exact size, kept
    assert second["exact"] is False  # the short message is only bounded: nothing was loaded
