"""The config schema, placeholder expansion, profile layering, error lines, sources and report."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from soong_agent.domain.config.report import render_config_report
from soong_agent.domain.config.resolve import (
    ResolvedProfile,
    expand_placeholders,
    resolve_all_profiles,
    resolve_paths,
    resolve_profile,
)
from soong_agent.domain.config.schema import (
    ModelConfig,
    ModelOverride,
    RetryConfig,
    SoongConfig,
)
from soong_agent.domain.config.sources import ConfigValue, value_sources
from soong_agent.domain.config.validation_messages import format_key_path, format_validation_error
from soong_agent.ports.errors import ConfigError

HOME = "/users/ann/.soong-agent"
PROJECT = "/work/proj"
FILE = "/users/ann/.soong-agent/config.toml"


def error_line(raw: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        SoongConfig.model_validate(raw)
    line = format_validation_error(info.value, file=FILE)
    assert "\n" not in line
    return line


# --- schema ----------------------------------------------------------------------------------


class TestSchema:
    def test_empty_document_gives_seed_defaults(self) -> None:
        config = SoongConfig.model_validate({})
        assert config.runtime.cancel_timeout_ms == 10_000
        assert config.context.session_db_path == "${SOONG_AGENT_HOME}/sessions.sqlite"
        assert config.task.task_board_token_budget == 1200
        assert config.memory.memory_dir == "${SOONG_AGENT_HOME}/memory"
        assert config.agents.child_cancel_timeout_ms == 30_000
        assert config.agents.worker_pools == []
        assert config.plan.default_dir == "<project>/.soong-agent/plans"
        assert config.task.wal_dir == "<project>/.soong-agent/tasks"
        assert config.task.step_lease_timeout_ms == 300_000
        assert config.permissions.readonly_default == "allow"
        assert config.permissions.write_without_callback == "deny"
        assert config.tools.default_timeout_ms == 120_000
        assert config.tools.max_timeout_ms == 600_000
        assert config.tools.allowed_write_roots == ["<project>"]

    def test_toml_integer_is_accepted_for_a_float(self) -> None:
        config = SoongConfig.model_validate({"model": {"temperature": 1}})
        assert config.model.temperature == 1.0

    def test_strings_are_not_coerced_to_integers(self) -> None:
        with pytest.raises(ValidationError):
            SoongConfig.model_validate({"model": {"timeout_ms": "5"}})

    def test_booleans_are_not_integers(self) -> None:
        with pytest.raises(ValidationError):
            SoongConfig.model_validate({"runtime": {"max_turns": True}})

    def test_config_is_frozen(self) -> None:
        config = SoongConfig()
        with pytest.raises(ValidationError):
            config.runtime.max_turns = 3  # type: ignore[misc]


# --- placeholders ----------------------------------------------------------------------------


class TestPlaceholders:
    def test_expands_home_and_project(self) -> None:
        assert expand_placeholders("${SOONG_AGENT_HOME}/m", home=HOME, project=PROJECT) == (
            f"{HOME}/m"
        )
        assert expand_placeholders("<project>/.soong-agent/plans", home=HOME, project=PROJECT) == (
            f"{PROJECT}/.soong-agent/plans"
        )
        assert expand_placeholders("<project>", home=HOME, project=PROJECT) == PROJECT

    @pytest.mark.parametrize(
        "text",
        ["$HOME/x", "~/x", "${PATH}/x", "${HOME}", "$SOONG_AGENT_HOME/x", "%APPDATA%", "<home>"],
    )
    def test_everything_else_stays_literal(self, text: str) -> None:
        assert expand_placeholders(text, home=HOME, project=PROJECT) == text

    def test_single_pass_does_not_expand_inside_substituted_text(self) -> None:
        out = expand_placeholders("${SOONG_AGENT_HOME}/a", home="/odd/<project>", project="/p")
        assert out == "/odd/<project>/a"

    def test_trailing_slash_of_home_is_not_doubled(self) -> None:
        assert expand_placeholders("${SOONG_AGENT_HOME}/x", home="/h/", project="/p") == "/h/x"

    def test_resolve_paths_expands_every_path_field(self) -> None:
        config = SoongConfig.model_validate(
            {
                "tools": {
                    "allowed_write_roots": ["<project>", "${SOONG_AGENT_HOME}/scratch", "/tmp/x"],
                    "sensitive_paths": ["~/.ssh", "<project>/.env", "$HOME/.aws"],
                },
            }
        )
        resolved = resolve_paths(config, home=HOME, project=PROJECT)
        assert resolved.context.session_db_path == f"{HOME}/sessions.sqlite"
        assert resolved.memory.memory_dir == f"{HOME}/memory"
        assert resolved.plan.default_dir == f"{PROJECT}/.soong-agent/plans"
        assert resolved.task.wal_dir == f"{PROJECT}/.soong-agent/tasks"
        assert resolved.tools.allowed_write_roots == [PROJECT, f"{HOME}/scratch", "/tmp/x"]
        assert resolved.tools.sensitive_paths == ["~/.ssh", f"{PROJECT}/.env", "$HOME/.aws"]
        # the input is untouched and the result is still frozen
        assert config.context.session_db_path == "${SOONG_AGENT_HOME}/sessions.sqlite"
        with pytest.raises(ValidationError):
            resolved.plan.default_dir = "x"  # type: ignore[misc]

    def test_resolve_paths_expands_default_sensitive_paths(self) -> None:
        resolved = resolve_paths(SoongConfig(), home=HOME, project=PROJECT)
        assert f"{HOME}/config.toml" in resolved.tools.sensitive_paths
        assert "~/.ssh" in resolved.tools.sensitive_paths

    def test_non_path_fields_are_not_expanded(self) -> None:
        config = SoongConfig.model_validate({"plan": {"template_name": "<project>"}})
        resolved = resolve_paths(config, home=HOME, project=PROJECT)
        assert resolved.plan.template_name == "<project>"


# --- model profiles --------------------------------------------------------------------------


def config_with(raw: dict[str, Any]) -> SoongConfig:
    return SoongConfig.model_validate(raw)


MAIN_MODEL = {
    "provider": "openai",
    "base_url": "https://gateway.example/v1",
    "api_key_env": "GATEWAY_KEY",
    "name": "big-model",
    "temperature": 0.2,
    "retry": {"max_attempts": 7, "initial_backoff_ms": 100},
}


class TestProfiles:
    def test_named_profile_overrides_only_the_keys_it_sets(self) -> None:
        config = config_with(
            {
                "model": MAIN_MODEL,
                "model_overrides": {"small": {"name": "small-model", "max_output_tokens": 1000}},
            }
        )
        profile = resolve_profile(
            config, "small", purpose="compact", source="config.toml: compact.model_profile"
        )
        assert profile.name == "small"
        assert profile.purpose == "compact"
        assert profile.model.name == "small-model"
        assert profile.model.max_output_tokens == 1000
        assert profile.model.base_url == "https://gateway.example/v1"
        assert profile.model.api_key_env == "GATEWAY_KEY"
        assert profile.model.temperature == 0.2
        assert profile.model.retry.max_attempts == 7
        assert "[model_overrides.small]" in profile.source

    def test_inline_profile_is_layered_over_main(self) -> None:
        config = config_with(
            {"model": MAIN_MODEL, "memory": {"extract_model_profile": {"name": "cheap"}}}
        )
        ref = config.memory.extract_model_profile
        assert isinstance(ref, ModelOverride)
        profile = resolve_profile(
            config,
            ref,
            purpose="memory_extract",
            source="config.toml: memory.extract_model_profile",
        )
        assert profile.name == "inline"
        assert profile.model.name == "cheap"
        assert profile.model.api_key_env == "GATEWAY_KEY"
        assert "memory.extract_model_profile" in profile.source

    def test_retry_table_is_replaced_wholesale(self) -> None:
        config = config_with(
            {
                "model": MAIN_MODEL,
                "model_overrides": {"compact": {"retry": {"max_backoff_ms": 5}}},
            }
        )
        profile = resolve_profile(config, "compact", purpose="compact", source="c: x")
        assert profile.model.retry == RetryConfig(max_backoff_ms=5)
        assert profile.model.retry.max_attempts == 4  # the default, not the main model's 7

    def test_missing_compact_ref_uses_model_overrides_compact(self) -> None:
        config = config_with(
            {"model": MAIN_MODEL, "model_overrides": {"compact": {"name": "summariser"}}}
        )
        profile = resolve_profile(
            config, None, purpose="compact", source="config.toml: compact.model_profile"
        )
        assert profile.name == "compact"
        assert profile.model.name == "summariser"

    def test_missing_compact_ref_without_compact_profile_is_main(self) -> None:
        config = config_with({"model": MAIN_MODEL})
        profile = resolve_profile(
            config, None, purpose="compact", source="config.toml: compact.model_profile"
        )
        assert profile.name == "main"
        assert profile.model == config.model

    def test_memory_purposes_fall_back_to_main_not_to_compact(self) -> None:
        config = config_with({"model": MAIN_MODEL, "model_overrides": {"compact": {"name": "s"}}})
        profile = resolve_profile(config, None, purpose="memory_recall", source="c: x")
        assert profile.model == config.model

    def test_unknown_name_names_it_the_source_and_the_known_names(self) -> None:
        config = config_with({"model_overrides": {"small": {}, "fast": {"name": "f"}}})
        with pytest.raises(ConfigError) as info:
            resolve_profile(
                config, "tiny", purpose="compact", source="config.toml: compact.model_profile"
            )
        message = str(info.value)
        assert "'tiny'" in message
        assert "config.toml: compact.model_profile" in message
        assert "fast, small" in message

    def test_unknown_name_with_no_profiles(self) -> None:
        with pytest.raises(ConfigError, match="defines no profiles"):
            resolve_profile(SoongConfig(), "x", purpose="compact", source="config.toml: a.b")

    def test_switching_provider_drops_the_other_providers_endpoint_and_key(self) -> None:
        config = config_with(
            {
                "model": MAIN_MODEL,
                "model_overrides": {"claude": {"provider": "anthropic", "name": "c"}},
            }
        )
        model = resolve_profile(config, "claude", purpose="x", source="c: y").model
        assert model.base_url is None
        assert model.resolved_base_url == "https://api.anthropic.com"
        assert model.resolved_key_env == "ANTHROPIC_API_KEY"

    def test_explicit_none_in_sdk_override_resets_optional_keys_only(self) -> None:
        base = ModelConfig(name="m", temperature=0.5)
        override = ModelOverride(temperature=None, name=None)
        config = SoongConfig(model=base, model_overrides={"p": override})
        model = resolve_profile(config, "p", purpose="x", source="c: y").model
        assert model.temperature is None
        assert model.name == "m"

    def test_resolve_all_profiles(self) -> None:
        config = config_with(
            {
                "model": MAIN_MODEL,
                "model_overrides": {"small": {"name": "s"}},
                "memory": {"recall_model_profile": "small"},
            }
        )
        profiles = resolve_all_profiles(config)
        assert [p.purpose for p in profiles] == [
            "main",
            "compact",
            "memory_extract",
            "memory_recall",
            "mcp_sampling",
        ]
        by_purpose = {p.purpose: p for p in profiles}
        assert by_purpose["main"].model == config.model
        assert by_purpose["compact"].name == "main"
        assert by_purpose["memory_recall"].model.name == "s"
        assert by_purpose["main"].source == "config.toml: [model]"

    def test_resolve_all_profiles_fails_on_a_bad_reference(self) -> None:
        config = config_with({"memory": {"extract_model_profile": "nope"}})
        with pytest.raises(ConfigError, match=r"memory\.extract_model_profile.*'nope'"):
            resolve_all_profiles(config)


# --- error lines -----------------------------------------------------------------------------


class TestFormatValidationError:
    def test_wrong_type(self) -> None:
        assert error_line({"model": {"timeout_ms": "abc"}}) == (
            f"{FILE}: model.timeout_ms: expected an integer ≥ 1, found 'abc' (string)"
        )

    def test_float_for_integer(self) -> None:
        line = error_line({"runtime": {"max_turns": 1.5}})
        assert line == f"{FILE}: runtime.max_turns: expected an integer ≥ 1, found 1.5 (float)"

    def test_boolean_expected(self) -> None:
        line = error_line({"compact": {"enabled": "yes"}})
        assert line.endswith("compact.enabled: expected true or false, found 'yes' (string)")

    def test_range(self) -> None:
        line = error_line({"model": {"retry": {"max_attempts": 0}}})
        assert "model.retry.max_attempts: expected an integer from 1 to 20, found 0 (integer)" in (
            line
        )

    def test_unknown_top_level_key(self) -> None:
        line = error_line({"modle": {}})
        assert line.startswith(f"{FILE}: modle: unknown key (known top-level sections: runtime, ")
        assert "did you mean 'model'?" in line

    def test_unknown_nested_key(self) -> None:
        line = error_line({"model": {"timeout": 5}})
        assert line.startswith(
            f"{FILE}: model.timeout: unknown key (known keys of [model]: provider, base_url,"
        )
        assert "did you mean 'timeout_ms'?" in line

    def test_unknown_key_value_is_never_shown(self) -> None:
        line = error_line({"model": {"api_key": "sk-live-123456"}})
        assert "sk-live" not in line
        assert "model.api_key: unknown key" in line
        assert "api_key_env" in line

    def test_unknown_key_in_a_named_profile(self) -> None:
        line = error_line({"model_overrides": {"compact": {"nmae": "x"}}})
        expected = (
            "model_overrides.compact.nmae: unknown key (known keys of [model_overrides.compact]"
        )
        assert expected in line

    def test_bad_enum(self) -> None:
        line = error_line({"model": {"provider": "gemini"}})
        assert line == (
            f"{FILE}: model.provider: expected one of 'openai', 'anthropic', 'ollama', "
            "found 'gemini' (string)"
        )

    def test_bad_nested_list_item(self) -> None:
        raw = {
            "agents": {
                "worker_pools": [
                    {
                        "pool_id": "p",
                        "workers": [{"agent_definition_id": "a"}, {"agent_definition_id": 7}],
                    }
                ]
            }
        }
        assert error_line(raw) == (
            f"{FILE}: agents.worker_pools[0].workers[1].agent_definition_id: "
            "expected a string, found 7 (integer)"
        )

    def test_missing_required_key(self) -> None:
        line = error_line({"agents": {"worker_pools": [{"workers": []}]}})
        assert line == f"{FILE}: agents.worker_pools[0].pool_id: is required (expected a string)"

    def test_duplicate_worker_ids(self) -> None:
        workers = [
            {"worker_id": "w", "agent_definition_id": "a"},
            {"worker_id": "w", "agent_definition_id": "b"},
        ]
        line = error_line({"agents": {"worker_pools": [{"pool_id": "p", "workers": workers}]}})
        assert line == f"{FILE}: agents.worker_pools[0]: worker_id 'w' appears twice in pool 'p'"

    def test_several_problems(self) -> None:
        line = error_line({"model": {"provider": "x", "timeout_ms": 0, "bogus": 1}})
        assert line.startswith(f"{FILE}: model.provider: expected one of")
        assert line.endswith(" (and 2 more problems)")

    def test_table_expected(self) -> None:
        assert error_line({"model": "gpt"}) == (
            f"{FILE}: model: expected a table, found 'gpt' (string)"
        )

    def test_list_expected(self) -> None:
        line = error_line({"tools": {"disabled": "bash"}})
        assert line == f"{FILE}: tools.disabled: expected a list of strings, found 'bash' (string)"

    def test_profile_reference_of_the_wrong_type_is_one_problem(self) -> None:
        line = error_line({"compact": {"model_profile": 5}})
        assert line == (
            f"{FILE}: compact.model_profile: expected a profile name from [model_overrides] "
            "(a string) or an inline table, found 5 (integer)"
        )

    def test_errors_inside_an_inline_profile_report_the_table_branch(self) -> None:
        line = error_line({"compact": {"model_profile": {"name": 3}}})
        assert line == f"{FILE}: compact.model_profile.name: expected a string, found 3 (integer)"

    def test_quoted_keys_in_the_path(self) -> None:
        line = error_line({"tools": {"overrides": {"mcp.tool": {"timeout_ms": "x"}}}})
        assert 'tools.overrides."mcp.tool".timeout_ms: expected an integer ≥ 1' in line

    def test_secret_looking_key_values_are_hidden(self) -> None:
        line = error_line({"model": {"name": {"api_key": "sk-live-1"}}})
        assert "sk-live" not in line

    def test_format_key_path(self) -> None:
        assert format_key_path(["a", "b", 0, "c", 1]) == "a.b[0].c[1]"
        assert format_key_path(["x", "with space"]) == 'x."with space"'


# --- sources and report ----------------------------------------------------------------------


def sources_of(raw: dict[str, Any]) -> dict[str, ConfigValue]:
    config = resolve_paths(SoongConfig.model_validate(raw), home=HOME, project=PROJECT)
    return {v.path: v for v in value_sources(raw, config)}


class TestValueSources:
    def test_default_file_and_placeholder(self) -> None:
        raw = {
            "model": {"name": "gpt-x", "api_key_env": "MY_KEY"},
            "plan": {"default_dir": "<project>/plans"},
            "task": {"wal_dir": "/abs/tasks"},
        }
        by_path = sources_of(raw)
        assert by_path["model.name"].source == "file"
        assert by_path["model.name"].value == "gpt-x"
        assert by_path["model.provider"].source == "default"
        assert by_path["runtime.cancel_timeout_ms"].source == "default"
        assert by_path["task.wal_dir"].source == "file"
        plan = by_path["plan.default_dir"]
        assert plan.source == "placeholder"
        assert plan.value == f"{PROJECT}/plans"
        assert plan.unexpanded == "<project>/plans"
        assert plan.in_file
        db = by_path["context.session_db_path"]
        assert db.source == "placeholder"
        assert db.value == f"{HOME}/sessions.sqlite"
        assert not db.in_file
        assert by_path["tools.allowed_write_roots"].source == "placeholder"

    def test_every_leaf_is_listed(self) -> None:
        by_path = sources_of({})
        assert "model.retry.max_attempts" in by_path
        assert "tools.network.allowed_hosts" in by_path
        assert "tools.mcp.discovery_cache_ttl_ms" in by_path
        assert by_path["agents.worker_pools"].value == []
        assert by_path["model_overrides"].value == {}
        assert by_path["model.base_url"].value is None

    def test_partial_profiles_list_only_their_keys(self) -> None:
        raw = {
            "model_overrides": {"compact": {"name": "s"}},
            "agents": {
                "worker_pools": [{"pool_id": "p", "workers": [{"agent_definition_id": "a"}]}]
            },
        }
        by_path = sources_of(raw)
        assert by_path["model_overrides.compact.name"].source == "file"
        assert "model_overrides.compact.provider" not in by_path
        assert by_path["agents.worker_pools[0].workers[0].agent_definition_id"].source == "file"
        assert by_path["agents.worker_pools[0].workers[0].worker_id"].source == "default"

    def test_literal_lookalikes_are_not_placeholders(self) -> None:
        by_path = sources_of({"tools": {"sensitive_paths": ["~/.ssh", "$HOME/x"]}})
        assert by_path["tools.sensitive_paths"].source == "file"


class TestReport:
    def render(self, raw: dict[str, Any]) -> str:
        config = resolve_paths(SoongConfig.model_validate(raw), home=HOME, project=PROJECT)
        return render_config_report(
            config_path=FILE,
            home=HOME,
            project=PROJECT,
            config=config,
            raw=raw,
            profiles=resolve_all_profiles(config),
        )

    def test_report_shows_header_sections_sources_and_profiles(self) -> None:
        raw = {
            "model": {"provider": "openai", "name": "gpt-x", "api_key_env": "MY_KEY"},
            "model_overrides": {"compact": {"name": "small"}},
        }
        text = self.render(raw)
        assert f"config file: {FILE}" in text
        assert f"home:        {HOME}" in text
        assert f"project:     {PROJECT}" in text
        assert "[model]" in text
        lines = text.splitlines()
        name_line = next(line for line in lines if line.startswith('name = "gpt-x"'))
        assert name_line.endswith("# file")
        turns = next(line for line in lines if line.startswith("max_turns = 100"))
        assert turns.endswith("# default")
        db = next(line for line in lines if line.startswith("session_db_path = "))
        assert f'"{HOME}/sessions.sqlite"' in db
        assert "# placeholder, default" in db
        assert "[profile compact]" in text
        assert "[profile memory_recall]" in text
        assert "[model_overrides.compact]" in text
        assert 'api_key_env = "MY_KEY"' in text

    def test_report_never_contains_secret_values(self) -> None:
        text = self.render({"model": {"base_url": "https://u:hunter2@gw.example/v1"}})
        assert "hunter2" not in text
        assert 'api_key_env = "OPENAI_API_KEY"' in text

    def test_profile_purposes_are_shown_with_their_source(self) -> None:
        text = self.render({"memory": {"extract_model_profile": {"name": "cheap"}}})
        assert "[profile memory_extract]    # 'inline' from config.toml: memory." in text

    def test_profiles_are_listed_in_the_order_given(self) -> None:
        config = SoongConfig()
        profiles = [
            ResolvedProfile(purpose="agent:x", name="main", model=ModelConfig(), source="s")
        ]
        text = render_config_report(
            config_path=FILE, home=HOME, project=PROJECT, config=config, raw={}, profiles=profiles
        )
        assert "[profile agent:x]    # 'main' from s" in text
        assert "not set: model calls will fail" in text
