"""Instruction files linked to secrets never reach the model (PROMPT-2, SBX-1).

A repository whose ``CLAUDE.md`` is a symbolic link to ``~/.ssh/id_rsa``, or whose ``AGENTS.md``
(at the root or in a folder) points to ``.env``, would put that file into the system prompt of
every request with no tool call and no approval. Each test plants such links and asserts the
side effect: no canary in anything the model received, one warning event naming each file left
out, and the rest of the prompt built as usual.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from soong_agent.adapters.system.context_source import FileContextSource
from soong_agent.ports.model import ModelRequest
from tests.security.conftest import Outcome, World

HOME_RULE = "Home rule: answer in one sentence."
PROJECT_RULE = "Project rule: run the tests first."
PKG_RULE = "pkg rule: keep the API stable."


def request_text(request: ModelRequest) -> str:
    """Everything a request carried: its system parts and every message."""
    system = "\n".join(part.text for part in request.system)
    messages = "\n".join(m.model_dump_json() for m in request.messages)
    return f"{system}\n{messages}"


def leaked(world: World, outcome: Outcome, *labels: str) -> list[str]:
    found = []
    for index, request in enumerate(outcome.model.calls):
        text = request_text(request)
        found += [f"{label}: request {index}" for label in labels if world.secret(label) in text]
    return found + world.leaks(outcome, *labels)


def skip_warnings(world: World) -> list[dict[str, Any]]:
    with sqlite3.connect(world.home / "sessions.sqlite") as db:
        rows = db.execute("SELECT payload FROM events WHERE type = 'error' ORDER BY seq")
        payloads = [json.loads(row[0]) for row in rows]
    return [p for p in payloads if p["kind"] == "instructions_skipped"]


async def test_root_and_folder_files_linked_to_secrets_are_left_out_with_one_warning_each(
    world: World,
) -> None:
    project = world.project
    (world.home / "CLAUDE.md").write_text(HOME_RULE, encoding="utf-8")
    (project / "CLAUDE.md").symlink_to(world.user_home / ".ssh" / "id_rsa")
    (project / "AGENTS.md").symlink_to(project / ".env")
    (project / "pkg").mkdir()
    (project / "pkg" / "x.py").write_text("x = 1\n", encoding="utf-8")
    (project / "pkg" / "CLAUDE.md").symlink_to(world.outside_file)
    (project / "pkg" / "AGENTS.md").symlink_to(Path("..") / ".env.local")
    (project / "docs").mkdir()
    (project / "docs" / "AGENTS.md").write_text(PKG_RULE, encoding="utf-8")

    outcome = await world.run(
        ("read_file", {"path": "pkg/x.py"}),
        ("read_file", {"path": "pkg/x.py"}),
        ("list_dir", {"path": "docs"}),
    )

    assert leaked(world, outcome, "ssh", "env", "env_local", "outside") == []
    first, last = (request_text(outcome.model.calls[i]) for i in (0, -1))
    assert HOME_RULE in first  # the rest of the chain is built as usual
    assert PKG_RULE in last  # and a folder's real file still joins it
    warned = [w["message"] for w in skip_warnings(world)]
    assert len(warned) == 4  # one each, though pkg was worked in twice
    for label, why in [
        ("<project>/CLAUDE.md", "sensitive path (tools.sensitive_paths: ~/.ssh)"),
        ("<project>/AGENTS.md", "sensitive path (tools.sensitive_paths: .env)"),
        ("<project>/pkg/CLAUDE.md", "outside the project"),
        ("<project>/pkg/AGENTS.md", "sensitive path (tools.sensitive_paths: .env.*)"),
    ]:
        (message,) = [m for m in warned if m.startswith(f"{label} ")]
        assert "was left out of the instructions" in message and why in message
    assert all(not w["fatal"] for w in skip_warnings(world))


async def test_in_the_users_home_a_link_to_the_key_inside_the_project_is_left_out(
    home_world: World,
) -> None:
    world = home_world  # ~/.ssh lies inside the project: only the sensitive paths keep it
    (world.project / "CLAUDE.md").symlink_to(Path(".ssh") / "id_rsa")
    outcome = await world.run(("list_dir", {"path": "."}))
    assert leaked(world, outcome, "ssh") == []
    (warning,) = skip_warnings(world)
    assert warning["message"].startswith("<project>/CLAUDE.md was left out")


async def test_a_link_to_an_ordinary_file_of_the_project_is_read(world: World) -> None:
    (world.project / "docs").mkdir()
    (world.project / "docs" / "RULES.md").write_text(PROJECT_RULE, encoding="utf-8")
    (world.project / "AGENTS.md").write_text(PKG_RULE, encoding="utf-8")
    (world.project / "CLAUDE.md").symlink_to("AGENTS.md")  # a common layout
    (world.project / "docs" / "AGENTS.md").symlink_to("RULES.md")
    outcome = await world.run(("list_dir", {"path": "docs"}))
    assert PKG_RULE in request_text(outcome.model.calls[0])
    assert PROJECT_RULE in request_text(outcome.model.calls[1])
    assert skip_warnings(world) == []


async def test_the_runtime_hands_the_configured_sensitive_paths_to_the_instruction_reader(
    world: World,
) -> None:
    """`tools.sensitive_paths` from config.toml decides for instruction files as it does for
    the file tools: a project file the user marked sensitive never reaches the prompt through
    a link, even one inside the project."""
    world.plant("notes", world.project / "private" / "notes.md")
    (world.project / "AGENTS.md").symlink_to(Path("private") / "notes.md")
    sensitive = '[tools]\nsensitive_paths = ["<project>/private"]\n'
    outcome = await world.run(("list_dir", {"path": "."}), config=sensitive)
    assert leaked(world, outcome, "notes") == []
    (warning,) = skip_warnings(world)
    assert "<project>/AGENTS.md" in warning["message"]


# --- the adapter ----------------------------------------------------------------------------


def test_the_configured_sensitive_paths_decide_and_home_files_are_the_users_own(
    tmp_path: Path,
) -> None:
    home, project, elsewhere = tmp_path / "home", tmp_path / "project", tmp_path / "elsewhere"
    for folder in (home, project / "private", elsewhere):
        folder.mkdir(parents=True)
    (project / "private" / "notes.md").write_text("private notes", encoding="utf-8")
    (project / "AGENTS.md").symlink_to(project / "private" / "notes.md")
    (elsewhere / "mine.md").write_text("the user's own rules", encoding="utf-8")
    (home / "CLAUDE.md").symlink_to(elsewhere / "mine.md")

    strict = FileContextSource(home=home, project=project, sensitive=["private"])
    assert [d.text for d in strict.instructions()] == ["the user's own rules"]
    (skip,) = strict.skipped()
    assert skip.source == "<project>/AGENTS.md" and "private" in skip.reason

    default = FileContextSource(home=home, project=project)
    assert [d.text for d in default.instructions()] == ["the user's own rules", "private notes"]
    assert default.skipped() == []


def test_a_file_that_turns_into_a_link_is_left_out_the_next_time(tmp_path: Path) -> None:
    home, project, outside = tmp_path / "home", tmp_path / "project", tmp_path / "outside"
    for folder in (home, project, outside):
        folder.mkdir()
    (outside / "secret.txt").write_text("outside secret", encoding="utf-8")
    agents = project / "AGENTS.md"
    agents.write_text(PROJECT_RULE, encoding="utf-8")
    source = FileContextSource(home=home, project=project)
    assert [d.text for d in source.instructions()] == [PROJECT_RULE]
    agents.unlink()
    agents.symlink_to(outside / "secret.txt")
    assert source.instructions() == []
    (skip,) = source.skipped()
    assert "outside the project" in skip.reason
    agents.unlink()
    assert source.instructions() == [] and source.skipped() == []


def test_the_git_head_is_read_as_a_branch_or_a_commit_never_through_a_link(
    tmp_path: Path,
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    home.mkdir()
    head = project / ".git" / "HEAD"
    head.write_text("ref: refs/heads/feature/x\n", encoding="utf-8")
    source = FileContextSource(home=home, project=project)
    assert source.environment().git == f"git repository at {project}, on feature/x"
    head.write_text("0123456789abcdef0123456789abcdef01234567\n", encoding="utf-8")
    assert source.environment().git == f"git repository at {project}, on 0123456789ab"

    (project / ".env").write_text("TOKEN=abcdefghijkl-secret\n", encoding="utf-8")
    head.unlink()
    head.symlink_to(project / ".env")  # shipped in an archive: the first 12 bytes were shown
    assert source.environment().git is None
    head.unlink()
    head.write_text("TOKEN=abcdefghijkl-secret\n", encoding="utf-8")  # not a ref either
    assert source.environment().git is None
