"""Agent definitions (AGT-1): the file rules, the built-ins and presets, the tool ceiling."""

from __future__ import annotations

import dataclasses

import pytest

from soong_agent.domain.agents import (
    BUILTIN_IDS,
    BUILTINS,
    DEFAULT_WORKER_AGENT,
    FULL,
    MINIMAL,
    PRESET_IDS,
    STANDARD,
    AgentDefinition,
    AgentFileError,
    allowed_tools,
    check_definition,
    content_hash,
    definition_from_metadata,
    merge_definitions,
    render_file,
    unknown_agent_message,
)

SOURCE = "/home/u/.soong-agent/agents/reviewer.md"
GOOD: dict[str, object] = {
    "id": "reviewer",
    "description": "Reviews a diff.",
    "tools": ["read_file", "grep", "mcp__git__*"],
}
CORE = [
    "read_file",
    "write_file",
    "edit_file",
    "list_dir",
    "glob",
    "grep",
    "run_command",
    "web_fetch",
    "todo_write",
    "read_artifact",
    "compact",
]


def parse(metadata: object, body: str = "Review.", file_id: str = "reviewer") -> AgentDefinition:
    return definition_from_metadata(metadata, body, file_id=file_id, source=SOURCE, text="T")


def test_a_good_file_gives_every_field() -> None:
    definition = parse(
        {
            **GOOD,
            "description": "Reviews\n  a diff.",
            "model_profile": "review",
            "max_turns": 20,
            "permission_mode": "plan",
            "skills": ["code-review"],
        },
        body="\nYou review code.\n\n",
    )
    assert definition == AgentDefinition(
        id="reviewer",
        description="Reviews a diff.",
        tools=("read_file", "grep", "mcp__git__*"),
        prompt="You review code.",
        source=SOURCE,
        content_hash=content_hash("T"),
        model_profile="review",
        max_turns=20,
        permission_mode="plan",
        skills=("code-review",),
    )
    assert not definition.builtin


def test_optional_keys_default_and_tools_may_be_empty() -> None:
    definition = parse({**GOOD, "tools": []}, body="")
    assert definition.tools == ()
    assert definition.prompt == ""
    assert (definition.model_profile, definition.max_turns, definition.permission_mode) == (
        None,
        None,
        None,
    )
    assert definition.skills == ()


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        (None, "found nothing"),
        (["id"], "found list"),
        ({"description": "d", "tools": []}, "'id' is missing"),
        ({"id": "reviewer", "tools": []}, "'description' is missing"),
        ({"id": "reviewer", "description": "d"}, "'tools' is missing"),
        ({**GOOD, "tool": ["x"]}, "unknown key 'tool'"),
        ({**GOOD, "id": 3}, "'id' must be a string"),
        ({**GOOD, "id": "Reviewer"}, "is not an agent id"),
        ({**GOOD, "id": "re_viewer"}, "is not an agent id"),
        ({**GOOD, "id": "-reviewer"}, "is not an agent id"),
        ({**GOOD, "id": "other"}, "differs from the file's name 'reviewer'"),
        ({**GOOD, "description": "  "}, "'description' is empty"),
        ({**GOOD, "description": "x" * 1025}, "at most 1024"),
        ({**GOOD, "tools": "read_file"}, "'tools' must be a list of strings"),
        ({**GOOD, "tools": ["read file"]}, "is not a tool name or pattern"),
        ({**GOOD, "max_turns": 0}, "at least 1"),
        ({**GOOD, "max_turns": True}, "must be an integer"),
        ({**GOOD, "max_turns": "5"}, "must be an integer"),
        ({**GOOD, "permission_mode": "yolo"}, "default, accept_edits, plan, bypass"),
        ({**GOOD, "model_profile": 3}, "must be a profile name"),
        ({**GOOD, "model_profile": " "}, "'model_profile' is empty"),
        ({**GOOD, "skills": ["Bad Skill"]}, "is not a skill name"),
    ],
)
def test_a_broken_rule_is_one_reason(metadata: object, reason: str) -> None:
    with pytest.raises(AgentFileError, match=None) as caught:
        parse(metadata)
    assert reason in str(caught.value)


def test_the_builtins_and_presets() -> None:
    assert sorted(BUILTIN_IDS) == sorted(
        [
            "default_sub_agent",
            "default_fork_agent",
            "default_worker_agent",
            "minimal",
            "standard",
            "full",
        ]
    )
    assert set(PRESET_IDS) <= BUILTIN_IDS
    assert MINIMAL.tools == ("read_file", "list_dir", "glob", "grep")
    assert MINIMAL.prompt
    assert list(STANDARD.tools) == CORE
    assert FULL.tools == ("*",)
    for definition in BUILTINS:
        assert definition.builtin
        check_definition(definition)
        assert definition.content_hash == content_hash(render_file(definition))


def test_render_file_is_read_back_as_the_same_definition() -> None:
    import yaml  # type: ignore[import-untyped,unused-ignore]

    from soong_agent.domain.skills import split_frontmatter

    original = parse(
        {**GOOD, "description": 'Says "hi": a\\b', "max_turns": 3, "skills": ["a-b"]},
        body="Prompt.",
    )
    text = render_file(original)
    frontmatter, body = split_frontmatter(text)
    again = definition_from_metadata(
        yaml.safe_load(frontmatter), body, file_id="reviewer", source=SOURCE, text=text
    )
    assert again == dataclasses.replace(original, content_hash=content_hash(text))


@pytest.mark.parametrize("preset", PRESET_IDS)
def test_a_file_cannot_take_a_presets_id(preset: str) -> None:
    with pytest.raises(AgentFileError, match=f"id '{preset}' is a shipped preset, which a file"):
        parse({**GOOD, "id": preset}, file_id=preset)


def test_merging_keeps_the_builtins_and_adds_the_files() -> None:
    mine = parse(GOOD)
    merged = merge_definitions(BUILTINS, [mine])
    assert [d.id for d in merged] == sorted({*BUILTIN_IDS, "reviewer"})
    assert next(d for d in merged if d.id == "reviewer") is mine


def test_the_definition_is_a_ceiling() -> None:
    available = [*CORE, "task_claim", "task_complete", "mcp__git__log", "save_memory"]
    assert allowed_tools(MINIMAL, available, []) == ["read_file", "list_dir", "glob", "grep"]
    assert allowed_tools(FULL, available, []) == available
    assert allowed_tools(FULL, available, ["run_command", "mcp__*"]) == [
        n for n in available if n not in ("run_command", "mcp__git__log")
    ]
    assert allowed_tools(DEFAULT_WORKER_AGENT, available, ["write_file"]) == [
        *[n for n in CORE if n != "write_file"],
        "task_claim",
        "task_complete",
    ]


def test_a_listed_tool_that_is_missing_or_disabled_is_ignored_with_a_warning() -> None:
    definition = parse({**GOOD, "tools": ["read_file", "grep", "nope", "mcp__*"]})
    warnings: list[str] = []
    assert allowed_tools(definition, ["read_file", "grep"], ["grep"], warnings=warnings) == [
        "read_file"
    ]
    assert warnings == [
        f"agent 'reviewer' ({SOURCE}): tool 'grep' is disabled (tools.disabled); ignored",
        f"agent 'reviewer' ({SOURCE}): tool 'nope' does not exist; ignored",
    ]


def test_unknown_agent_lists_the_known_ones() -> None:
    assert unknown_agent_message("nope", ["standard", "minimal"]) == (
        "unknown agent 'nope'; known agents: minimal, standard"
    )
