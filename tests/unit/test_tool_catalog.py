"""tools.disabled and tools.overrides apply to every tool (TOOL-3), built-in ones included."""

from __future__ import annotations

import dataclasses

from soong_agent.application.tools.base import Tool
from soong_agent.application.tools.catalog import apply_tool_config, effective_timeout_ms
from soong_agent.application.tools.files import file_tools
from soong_agent.domain.config.schema import ToolOverride, ToolsConfig


def names(tools: list[Tool]) -> list[str]:
    return [t.name for t in tools]


def test_defaults_change_nothing() -> None:
    tools = file_tools()
    kept, warnings = apply_tool_config(tools, ToolsConfig())
    assert kept == tools
    assert warnings == []


def test_disabled_built_in_tools_are_dropped_in_order() -> None:
    kept, warnings = apply_tool_config(file_tools(), ToolsConfig(disabled=["write_file", "grep"]))
    assert names(kept) == ["read_file", "list_dir", "glob", "edit_file"]
    assert warnings == []


def test_overrides_replace_description_and_permission_class() -> None:
    config = ToolsConfig(
        overrides={
            "read_file": ToolOverride(description="Read a file (custom)."),
            "edit_file": ToolOverride(permission_class="exec"),
        }
    )
    original = {t.name: t for t in file_tools()}
    kept, warnings = apply_tool_config(list(original.values()), config)
    by_name = {t.name: t for t in kept}
    assert warnings == []
    assert by_name["read_file"].description == "Read a file (custom)."
    assert by_name["read_file"].spec.description == "Read a file (custom)."
    assert by_name["read_file"].permission_class == "read_only"
    assert by_name["edit_file"].permission_class == "exec"
    assert by_name["edit_file"].description == original["edit_file"].description
    assert by_name["edit_file"].handler is original["edit_file"].handler
    assert by_name["glob"] is original["glob"]


def test_unknown_names_are_warnings_with_a_hint() -> None:
    config = ToolsConfig(
        disabled=["write_fil", "nothing_like_it"],
        overrides={"reed_file": ToolOverride(description="x")},
    )
    kept, warnings = apply_tool_config(file_tools(), config)
    assert names(kept) == names(file_tools())
    assert warnings[0] == "tools.disabled: no tool is named 'write_fil'; did you mean 'write_file'?"
    assert warnings[1].startswith("tools.disabled: no tool is named 'nothing_like_it' (tools: ")
    assert "read_file" in warnings[1]
    assert warnings[2] == (
        "tools.overrides.reed_file: no tool is named 'reed_file'; did you mean 'read_file'?"
    )


def test_timeout_override_on_a_tool_without_timeout_is_reported() -> None:
    config = ToolsConfig(overrides={"grep": ToolOverride(timeout_ms=5_000)})
    kept, warnings = apply_tool_config(file_tools(), config)
    assert names(kept) == names(file_tools())
    assert warnings == ["tools.overrides.grep.timeout_ms: grep takes no timeout; ignored"]


def test_timeout_override_on_a_tool_with_timeout_is_silent() -> None:
    timed = dataclasses.replace(file_tools()[0], name="slow", timeout_ms=1_000)
    config = ToolsConfig(overrides={"slow": ToolOverride(timeout_ms=5_000)})
    kept, warnings = apply_tool_config([timed], config)
    assert warnings == []
    assert kept[0].timeout_ms == 1_000  # the builder applies it (effective_timeout_ms)


def test_overriding_a_disabled_tool_is_no_warning() -> None:
    config = ToolsConfig(disabled=["grep"], overrides={"grep": ToolOverride(description="x")})
    kept, warnings = apply_tool_config(file_tools(), config)
    assert "grep" not in names(kept)
    assert warnings == []


def test_effective_timeout_prefers_override_then_own_then_default_capped() -> None:
    config = ToolsConfig(default_timeout_ms=120_000, max_timeout_ms=600_000)
    assert effective_timeout_ms("t", None, config) == 120_000
    assert effective_timeout_ms("t", 3_000, config) == 3_000
    assert effective_timeout_ms("t", 900_000, config) == 600_000
    config = ToolsConfig(overrides={"t": ToolOverride(timeout_ms=7_000)})
    assert effective_timeout_ms("t", 3_000, config) == 7_000
    assert effective_timeout_ms("other", 3_000, config) == 3_000
    config = ToolsConfig(max_timeout_ms=10_000, overrides={"t": ToolOverride(timeout_ms=70_000)})
    assert effective_timeout_ms("t", None, config) == 10_000
    config = ToolsConfig(overrides={"t": ToolOverride(description="only text")})
    assert effective_timeout_ms("t", 3_000, config) == 3_000


def test_run_command_takes_its_timeout_from_overrides() -> None:
    from soong_agent.application.tools.shell import run_command_tool
    from soong_agent.domain.config.schema import ToolOverride, ToolsConfig

    config = ToolsConfig(overrides={"run_command": ToolOverride(timeout_ms=5_000)})
    tool = run_command_tool(runner=None, project="/tmp", tools=config, base_env={})  # type: ignore[arg-type]
    assert tool.timeout_ms == 5_000
    assert "5 s" in tool.description or "5.0 s" in tool.description
    capped = ToolsConfig(
        max_timeout_ms=1_000, overrides={"run_command": ToolOverride(timeout_ms=9_000)}
    )
    tool = run_command_tool(runner=None, project="/tmp", tools=capped, base_env={})  # type: ignore[arg-type]
    assert tool.timeout_ms == 1_000


def test_tools_added_to_runs_later_are_known_names_not_mistakes() -> None:
    later = ["compact", "tool_search", "dispatch_worker", "spawn_teammate", "accept_worktree"]
    config = ToolsConfig(
        disabled=later,
        overrides={
            "send_message": ToolOverride(description="Mail a teammate (custom)."),
            "compact": ToolOverride(timeout_ms=5_000),
        },
    )
    kept, warnings = apply_tool_config(file_tools(), config)
    assert names(kept) == names(file_tools())
    assert warnings == ["tools.overrides.compact.timeout_ms: compact takes no timeout; ignored"]


def test_the_later_names_are_the_names_of_the_tools_added_later() -> None:
    from soong_agent.application.mcp.tools import TOOL_SEARCH
    from soong_agent.application.tools.agents import dispatch_worker_tool
    from soong_agent.application.tools.catalog import ADDED_LATER
    from soong_agent.application.tools.compact import compact_tool
    from soong_agent.application.tools.team import lead_tools, send_message_tool

    made = [
        compact_tool(lambda: None),
        dispatch_worker_tool(""),
        *lead_tools(),
        send_message_tool(),
    ]
    assert {*names(made), TOOL_SEARCH} == ADDED_LATER
    assert all(t.timeout_ms is None for t in made)


def test_a_tool_added_later_is_disabled_or_overridden_where_it_is_added() -> None:
    from soong_agent.application.tools.team import lead_tools

    config = ToolsConfig(
        disabled=["write_file", "spawn_teammate"],
        overrides={"team_wait": ToolOverride(description="Wait (custom).")},
    )
    kept, _ = apply_tool_config(lead_tools(), config)
    assert "spawn_teammate" not in names(kept)
    assert next(t for t in kept if t.name == "team_wait").description == "Wait (custom)."
