"""Settings that would do nothing are refused with a message naming them (issue 31): the keys
of `RETIRED_KEYS`, the single-valued keys, and the `config_change` hook type."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from soong_agent.adapters.config.hooks_loader import load_hooks
from soong_agent.domain.config.retired import FIXED_VALUE_REASONS, RETIRED_KEYS
from soong_agent.domain.config.schema import SoongConfig
from soong_agent.domain.config.validation_messages import format_validation_error
from soong_agent.domain.hooks import HOOK_TYPES
from soong_agent.ports.errors import ConfigError
from soong_agent.ports.events import RUN_EVENT


def nested(path: str, value: object) -> dict[str, object]:
    out: object = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return out  # type: ignore[return-value]


def error_line(raw: dict[str, object]) -> str:
    with pytest.raises(ValidationError) as info:
        SoongConfig.model_validate(raw)
    return format_validation_error(info.value, file="config.toml")


def test_a_task_board_key_in_context_says_it_lives_in_task() -> None:
    assert error_line(nested("context.task_recent_changes_limit", 5)) == (
        "config.toml: context.task_recent_changes_limit: not a key of [context]: the task "
        "board's settings live in [task]; write `task_recent_changes_limit = …` under [task] "
        "instead"
    )


def test_the_fork_definition_key_says_why_there_is_none() -> None:
    line = error_line(nested("agents.default_fork_agent_definition", "default_fork_agent"))
    assert line.startswith(
        "config.toml: agents.default_fork_agent_definition: not a setting: a fork "
        "(`fork_agent`) always keeps its parent's system prompt and tools"
    )


@pytest.mark.parametrize("key", sorted(RETIRED_KEYS))
def test_every_retired_key_is_refused_with_its_reason(key: str) -> None:
    assert error_line(nested(key, 1)) == f"config.toml: {key}: {RETIRED_KEYS[key]}"


def test_active_path_only_false_is_refused_saying_what_is_sent() -> None:
    assert error_line(nested("context.active_path_only", False)) == (
        "config.toml: context.active_path_only: expected true (the only supported value), "
        "found false (boolean): only the active branch of a session (root to the current "
        "message) is ever sent to the model; the other branches stay in the session store"
    )


@pytest.mark.parametrize("key", sorted(FIXED_VALUE_REASONS))
def test_each_single_valued_key_keeps_its_default_and_says_why(key: str) -> None:
    section, name = key.split(".")
    default = getattr(getattr(SoongConfig(), section), name)
    assert SoongConfig.model_validate(nested(key, default)) == SoongConfig()
    other = "other" if isinstance(default, str) else not default
    assert error_line(nested(key, other)).endswith(f": {FIXED_VALUE_REASONS[key]}")


def test_an_unknown_key_still_gets_the_known_keys_and_a_suggestion() -> None:
    assert error_line(nested("context.reserve_output_token", 1)).endswith(
        "— did you mean 'reserve_output_tokens'?"
    )


def test_a_config_change_hook_is_refused_naming_the_file_and_why(tmp_path: Path) -> None:
    hooks = {"hooks": {"config_change": [{"command": "true"}]}}
    (tmp_path / "hooks.json").write_text(json.dumps(hooks), encoding="utf-8")
    with pytest.raises(ConfigError) as refused:
        load_hooks(tmp_path)
    assert str(refused.value) == (
        f"{tmp_path / 'hooks.json'}: hooks: hook type 'config_change' is not supported: "
        "config.toml is read once, when the runtime starts, and never reloaded, so nothing "
        "could fire it"
    )
    assert "config_change" not in HOOK_TYPES


def test_the_never_emitted_child_agent_event_type_is_gone() -> None:
    with pytest.raises(ValidationError, match="'child_agent' found using 'type' does not match"):
        RUN_EVENT.validate_python(
            {"type": "child_agent", "seq": 1, "at": 0.0, "run_id": "r", "session_id": "s"}
        )
