"""The home's agent files (AGT-1) read from a real folder: good files load over the built-ins,
each bad file is one warning naming it and why and is left out, a project's folder is never
read."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from soong_agent.adapters.agents import HomeAgentSource, load_agent_files
from soong_agent.domain.agents import BUILTIN_IDS, MINIMAL
from soong_agent.entrypoints.cli.agents_cmd import agents_list, agents_show
from soong_agent.testing import write_minimal_config

REVIEWER = """---
id: reviewer
description: Reviews a diff.
tools: [read_file, grep, "mcp__git__*"]
model_profile: review
max_turns: 12
permission_mode: plan
skills: [code-review]
---
You review code.
"""


def write(folder: Path, name: str, text: str | bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_a_good_file_loads_over_the_builtins(tmp_path: Path) -> None:
    path = write(tmp_path / "agents", "reviewer.md", REVIEWER)
    source = HomeAgentSource(tmp_path)
    assert source.warnings() == []
    assert [d.id for d in source.definitions()] == sorted({*BUILTIN_IDS, "reviewer"})
    reviewer = source.get("reviewer")
    assert reviewer is not None
    assert reviewer.source == str(path)
    assert reviewer.tools == ("read_file", "grep", "mcp__git__*")
    assert (reviewer.model_profile, reviewer.max_turns, reviewer.permission_mode) == (
        "review",
        12,
        "plan",
    )
    assert reviewer.skills == ("code-review",)
    assert reviewer.prompt == "You review code."
    assert reviewer.content_hash == hashlib.sha256(REVIEWER.encode()).hexdigest()
    assert source.get("nope") is None


def test_no_folder_means_only_the_builtins(tmp_path: Path) -> None:
    source = HomeAgentSource(tmp_path)
    assert {d.id for d in source.definitions()} == BUILTIN_IDS
    assert source.warnings() == []
    write(tmp_path, "agents", "not a folder")
    assert load_agent_files(tmp_path / "agents") == (
        [],
        [f"{tmp_path / 'agents'}: not a folder, so no agent definitions are read from it"],
    )


def test_each_bad_file_is_one_warning_and_left_out(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    write(agents, "reviewer.md", REVIEWER)
    bad: dict[str, str | bytes] = {
        "no-front.md": "just text\n",
        "open.md": "---\nid: open\n",
        "yaml.md": "---\nid: [yaml\n---\nx\n",
        "named.md": REVIEWER,
        "Upper.md": REVIEWER.replace("id: reviewer", "id: Upper"),
        "extra.md": REVIEWER.replace("id: reviewer", "id: extra\ntool: [x]"),
        "mode.md": REVIEWER.replace("id: reviewer", "id: mode").replace("plan", "yolo"),
        "latin.md": b"---\nid: latin\ndescription: caf\xe9\ntools: []\n---\n",
        "default_sub_agent.md": REVIEWER.replace("id: reviewer", "id: default_sub_agent"),
    }
    for name, text in bad.items():
        write(agents, name, text)
    write(agents, "notes.txt", "not an agent")
    write(agents, ".hidden.md", "---\n")
    (agents / "folder.md").mkdir()
    source = HomeAgentSource(tmp_path)
    assert [d.id for d in source.definitions() if not d.builtin] == ["reviewer"]
    warnings = source.warnings()
    assert len(warnings) == len(bad)
    reasons = dict(w.split(": skipped: ", 1) for w in warnings)
    assert sorted(reasons) == sorted(str(agents / name) for name in bad)
    assert "must start with a '---' line" in reasons[str(agents / "no-front.md")]
    assert "not closed" in reasons[str(agents / "open.md")]
    assert "not valid YAML" in reasons[str(agents / "yaml.md")]
    assert "line 2" in reasons[str(agents / "yaml.md")]
    assert "differs from the file's name 'named'" in reasons[str(agents / "named.md")]
    assert "is not an agent id" in reasons[str(agents / "Upper.md")]
    assert "unknown key 'tool'" in reasons[str(agents / "extra.md")]
    assert "'yolo' is not one of" in reasons[str(agents / "mode.md")]
    assert "not UTF-8" in reasons[str(agents / "latin.md")]
    assert "is not an agent id" in reasons[str(agents / "default_sub_agent.md")]
    # the built-in a bad file named is still there, unchanged
    assert source.get("default_sub_agent") is not None
    assert source.get("default_sub_agent").builtin  # type: ignore[union-attr]


def test_a_file_taking_a_presets_id_is_refused_and_the_preset_stays(tmp_path: Path) -> None:
    for preset in ("minimal", "standard", "full"):
        write(
            tmp_path / "agents", f"{preset}.md", REVIEWER.replace("id: reviewer", f"id: {preset}")
        )
    source = HomeAgentSource(tmp_path)
    assert source.get("minimal") == MINIMAL
    assert [d.id for d in source.definitions() if not d.builtin] == []
    assert source.warnings() == [
        f"{tmp_path / 'agents' / f'{preset}.md'}: skipped: frontmatter: id {preset!r} is a "
        f"shipped preset, which a file cannot replace; give yours another id (e.g. "
        f"'my-{preset}' in my-{preset}.md) and choose it with --agent my-{preset}"
        for preset in ("full", "minimal", "standard")
    ]


def test_only_the_home_is_read_and_reload_reads_again(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    write(project / ".soong-agent" / "agents", "reviewer.md", REVIEWER)
    write(project / "agents", "reviewer.md", REVIEWER)
    source = HomeAgentSource(home)
    assert source.get("reviewer") is None
    write(home / "agents", "reviewer.md", REVIEWER)
    assert source.get("reviewer") is None  # read once, then kept
    source.reload()
    assert source.get("reviewer") is not None


def cli_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    write_minimal_config(home)
    monkeypatch.setenv("SOONG_AGENT_HOME", str(home))
    (tmp_path / "project").mkdir()
    return home


def test_agents_list_prints_each_definition_and_warns_on_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = cli_home(tmp_path, monkeypatch)
    project = str(tmp_path / "project")
    write(home / "agents", "reviewer.md", REVIEWER)
    assert agents_list(project) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == f"7 agents (1 from {home / 'agents'}):"
    at = lines.index("reviewer  Reviews a diff.")
    assert lines[at + 1] == f"    source: {home / 'agents' / 'reviewer.md'}"
    assert lines[at + 2] == "    tools: read_file, grep, mcp__git__*"
    assert "    source: built-in" in lines
    write(home / "agents", "broken.md", "no frontmatter")
    write(home / "agents", "standard.md", REVIEWER.replace("id: reviewer", "id: standard"))
    assert agents_list(project) == 1
    out, err = capsys.readouterr()
    assert err == (
        f"soong-agent: warning: {home / 'agents' / 'broken.md'}: skipped: no frontmatter: "
        "the file must start with a '---' line\n"
        f"soong-agent: warning: {home / 'agents' / 'standard.md'}: skipped: frontmatter: id "
        "'standard' is a shipped preset, which a file cannot replace; give yours another id "
        "(e.g. 'my-standard' in my-standard.md) and choose it with --agent my-standard\n"
    )
    assert "broken" not in out
    assert f"{home / 'agents' / 'standard.md'}" not in out


def test_agents_show_prints_the_whole_definition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = cli_home(tmp_path, monkeypatch)
    project = str(tmp_path / "project")
    write(home / "agents", "reviewer.md", REVIEWER)
    assert agents_show("reviewer", project) == 0
    out, err = capsys.readouterr()
    assert err == ""
    digest = hashlib.sha256(REVIEWER.encode()).hexdigest()
    assert out.splitlines() == [
        "id: reviewer",
        "description: Reviews a diff.",
        f"source: {home / 'agents' / 'reviewer.md'}",
        f"content_hash: sha256:{digest}",
        "tools (a ceiling): read_file, grep, mcp__git__*",
        "model_profile: review",
        "max_turns: 12",
        "permission_mode: plan",
        "skills: code-review",
        "prompt:",
        "    You review code.",
    ]
    assert agents_show("full", project) == 0
    out, _ = capsys.readouterr()
    assert "tools (a ceiling): *" in out and "source: built-in" in out


def test_agents_show_of_an_unknown_id_exits_2_listing_the_known_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_home(tmp_path, monkeypatch)
    assert agents_show("nope", str(tmp_path / "project")) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "soong-agent: error: unknown agent 'nope'; known agents: default_fork_agent, "
        "default_sub_agent, default_worker_agent, full, minimal, standard\n"
    )
