"""PLAN-1: the session's active plan is part of what compaction carries over (with the todo
list and the task board): the plan the session wrote last, by name and path, and its first
lines; another session's plan is not."""

from __future__ import annotations

import os
from pathlib import Path

from soong_agent.entrypoints.factories import ACTIVE_PLAN_LINES, active_plan_reader
from soong_agent.entrypoints.sdk import load
from soong_agent.testing import write_minimal_config


def plan(folder: Path, name: str, session: str, body: str, mtime: float) -> Path:
    path = folder / f"{name}.md"
    path.write_text(f"<!-- soong-agent plan; session: {session} -->\n{body}", encoding="utf-8")
    os.utime(path, (mtime, mtime))
    return path


def test_the_latest_plan_of_the_session_is_carried_over(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    write_minimal_config(home)
    loaded = load(project, home)
    folder = Path(loaded.config.plan.default_dir)
    folder.mkdir(parents=True)
    plan(folder, "old", "ses_a", "# Old plan\n- done long ago", 1_000)
    long_body = "# Ship\n" + "".join(f"- step {i}\n" for i in range(60))
    path = plan(folder, "ship", "ses_a", long_body, 2_000)
    plan(folder, "theirs", "ses_b", "# Not ours", 3_000)
    read = active_plan_reader(loaded)
    text = read("ses_a")
    assert text.startswith(f"Active plan 'ship' ({path}):")
    assert "- step 0" in text and f"- step {ACTIVE_PLAN_LINES - 2}" in text
    assert "- step 59" not in text and "more lines in the file" in text
    assert "Not ours" not in text and "Old plan" not in text
    assert read("ses_c") == ""


def test_a_plan_reached_through_a_link_of_the_project_is_never_carried_over(
    tmp_path: Path,
) -> None:
    """A repository that ships its plans folder, or a plan file, as a link to somewhere else
    (a file that carries the session's marker by design) gets nothing read through it."""
    home, project, elsewhere = tmp_path / "home", tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    write_minimal_config(home)
    loaded = load(project, home)
    plan(elsewhere, "outside", "ses_a", "# From outside the project", 2_000)
    (project / ".soong-agent").mkdir()
    Path(loaded.config.plan.default_dir).symlink_to(elsewhere)  # the whole folder a link
    assert active_plan_reader(loaded)("ses_a") == ""

    Path(loaded.config.plan.default_dir).unlink()
    folder = Path(loaded.config.plan.default_dir)
    folder.mkdir()
    (folder / "linked.md").symlink_to(elsewhere / "outside.md")  # one file a link
    assert active_plan_reader(loaded)("ses_a") == ""
    plan(folder, "real", "ses_a", "# The real one", 1_000)
    assert "The real one" in active_plan_reader(loaded)("ses_a")
