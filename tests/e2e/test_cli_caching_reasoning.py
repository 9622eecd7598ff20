"""The installed CLI with PROV-7's settings: an Anthropic session whose second run reads its
first run's prefix from the (modelled) prompt cache, and `[model] reasoning_effort` on the wire
of an OpenAI-compatible server."""

from __future__ import annotations

import itertools
import json

from tests.e2e.conftest import CliWorld
from tests.support import fake_anthropic, fake_openai
from tests.support.fake_anthropic import FakeAnthropicServer


def test_a_resumed_anthropic_session_reads_its_prefix_from_the_cache(world: CliWorld) -> None:
    (world.project / "notes.txt").write_text("alpha\n" * 400, encoding="utf-8")
    with FakeAnthropicServer(prompt_cache=True) as server:
        world.write_config(
            "[model]\n"
            'provider = "anthropic"\n'
            f'base_url = "{server.base_url}"\n'
            'api_key_env = ""\n'
            'name = "claude-sonnet-4-5"\n'
        )
        server.enqueue(
            fake_anthropic.tool_call_response(
                [("toolu_1", "read_file", json.dumps({"path": "notes.txt"}))]
            ),
            fake_anthropic.text_response("It is all alpha."),
            fake_anthropic.text_response("Still alpha."),
        )
        first = world.run("run", "-o", "json", "what is in notes.txt?")
        assert first.returncode == 0, first.stderr
        session = next(
            json.loads(line)["session_id"]
            for line in first.stdout.splitlines()
            if json.loads(line).get("type") == "run_started"
        )
        second = world.run("run", "-o", "json", "-s", session, "and now?")
        assert second.returncode == 0, second.stderr
        assert server.rejections == []
        bodies = [r.json for r in server.requests]
    usages = [
        json.loads(line)["usage"]
        for out in (first.stdout, second.stdout)
        for line in out.splitlines()
        if json.loads(line).get("type") == "usage"
    ]
    assert len(usages) == len(bodies) == 3
    for earlier, later in itertools.pairwise(usages):
        # each request, the resumed run's first included, reads what the one before wrote
        assert later["cache_read_tokens"] == (
            earlier["cache_read_tokens"] + earlier["cache_write_tokens"]
        )
    assert usages[-1]["cache_read_tokens"] > usages[-1]["input_tokens"]
    last = bodies[-1]["messages"]
    marked = [m for m in last if "cache_control" in m["content"][-1]]
    assert [m["role"] for m in marked] == ["user", "user"] and marked[-1] is last[-1]


def test_reasoning_effort_reaches_the_server(world: CliWorld) -> None:
    world.write_config(
        "[model]\n"
        'provider = "openai"\n'
        f'base_url = "{world.server.base_url}"\n'
        'api_key_env = "SOONG_TEST_KEY"\n'
        'name = "o4-mini"\n'
        'reasoning_effort = "high"\n'
    )
    world.server.enqueue(fake_openai.text_response("Thought hard.", reasoning="Let me see."))
    done = world.run("run", "think about it")
    assert done.returncode == 0, done.stderr
    assert world.server.rejections == []  # strict: no max_tokens beside reasoning_effort
    [body] = [r.json for r in world.server.requests]
    assert body["reasoning_effort"] == "high"
    assert body["max_completion_tokens"] == 8192 and "max_tokens" not in body
    assert "Thought hard." in done.stdout
