"""LOOP steering end to end: the installed CLI stops a run that loops or spends its budget,
says so on stderr, exits non-zero, and keeps the session (config `[runtime]` and flags)."""

from __future__ import annotations

import json
import re

import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e


def configure(world: CliWorld, runtime: str) -> None:
    config = world.home / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8")
        + f'[permissions]\nmode = "bypass"\n[runtime]\n{runtime}\n',
        encoding="utf-8",
    )


def same_read(n: int) -> list[object]:
    args = json.dumps({"path": "notes.txt"})
    return [tool_call_response([(f"c{i}", "read_file", args)]) for i in range(n)]


def test_a_model_repeating_one_call_is_reminded_then_stopped_as_stuck(world: CliWorld) -> None:
    configure(world, "[runtime.stuck]\nsame_call = 3\nmax_interventions = 2")
    (world.project / "notes.txt").write_text("nothing new\n", encoding="utf-8")
    world.server.enqueue(*same_read(12), text_response("unreached"))
    result = world.run("run", "read notes.txt")
    assert result.returncode == 1, result.stderr
    assert "looks stuck (repeated_call" in result.stderr
    assert "reminded the model" in result.stderr
    assert "[stuck:" in result.stderr
    # a reminder reached the model as a message of the conversation
    bodies = [json.dumps(r.json["messages"]) for r in world.server.requests]
    assert any("read_file" in b and "same" in b.lower() for b in bodies[3:])
    assert len(world.server.requests) < 12  # stopped well before the script ran out
    session = re.search(r"session (ses_\w+)", result.stderr)
    assert session, result.stderr
    shown = world.run("sessions", "show", session.group(1))
    assert shown.returncode == 0, shown.stderr
    assert "stuck" in shown.stdout


def test_a_token_budget_from_the_config_ends_the_run_at_a_turn_boundary(
    world: CliWorld,
) -> None:
    configure(world, "max_tokens = 30")
    (world.project / "notes.txt").write_text("a\n", encoding="utf-8")
    world.server.enqueue(*same_read(5), text_response("unreached"))
    result = world.run("run", "read notes.txt")
    assert result.returncode == 1, result.stderr
    assert "token budget reached" in result.stderr
    assert "[budget_exhausted:" in result.stderr
    assert len(world.server.requests) < 5


def test_the_flag_overrides_the_configured_budget(world: CliWorld) -> None:
    configure(world, "max_tokens = 30")
    (world.project / "notes.txt").write_text("a\n", encoding="utf-8")
    world.server.enqueue(*same_read(2), text_response("done"))
    result = world.run("run", "--max-tokens", "100000", "read notes.txt")
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout


def test_a_cost_budget_without_prices_is_a_clear_usage_error(world: CliWorld) -> None:
    configure(world, "max_cost_usd = 0.5")
    result = world.run("run", "hello")
    assert result.returncode == 2, result.stderr
    assert "[model.price]" in result.stderr
    assert world.server.requests == []
