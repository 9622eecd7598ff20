"""No state folder leads out of the project through a link (AGT-1, PLAN-2, TEAM-4, SBX-1).

A repository may ship ``.soong-agent`` or one of its folders (``tasks``, ``teams``,
``worktrees``, ``plans``) as a symbolic link to a folder elsewhere. Each test plants such a link
and asserts the side effect: nothing was created where it points, the error names the link, and
what a user set up outside the project in their own config still works.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from soong_agent.adapters.mailbox import FileMailbox
from soong_agent.adapters.tasks import FileTaskLog
from soong_agent.adapters.worktrees import GitWorktrees
from soong_agent.ports.errors import SandboxViolation
from soong_agent.ports.mailbox import Mail
from soong_agent.ports.tasks import TaskCreated
from soong_agent.ports.worktrees import WorktreeError
from tests.security.conftest import ALLOW, World

SES = "ses_1"
T0 = 1_767_225_600.0
GIT_ID = ["-c", "user.name=t", "-c", "user.email=t@example.com"]


def created(actor: str = "run_a") -> TaskCreated:
    return TaskCreated(seq=0, at=T0, actor=actor, title="Build it")


def mail(n: int = 1) -> Mail:
    return Mail(id=f"m{n}", at=T0, sender="lead", to="alice", kind="message", body="hi")


def everything_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def link(at: Path, to: Path) -> None:
    at.parent.mkdir(parents=True, exist_ok=True)
    to.mkdir(parents=True, exist_ok=True)
    at.symlink_to(to, target_is_directory=True)


# --- task logs, through the runtime -----------------------------------------------------------


@pytest.mark.parametrize("linked", [".soong-agent", ".soong-agent/tasks"])
async def test_task_create_writes_nothing_through_a_linked_state_folder(
    world: World, linked: str
) -> None:
    target = world.outside / "state"
    link(world.project / linked, target)
    outcome = await world.run(("task_create", {"name": "ship", "title": "Ship it"}), approval=ALLOW)
    (result,) = outcome.tool_results
    assert result.is_error
    assert f"{world.project / linked} is a symbolic link" in result.content
    assert "remove the link" in result.content
    assert everything_under(target) == []  # not a folder, not a log
    assert everything_under(world.outside) == ["outside.txt", "state"]


async def test_task_create_works_in_a_real_state_folder(world: World) -> None:
    outcome = await world.run(("task_create", {"name": "ship", "title": "Ship it"}))
    (result,) = outcome.tool_results
    assert not result.is_error, result.content
    (log,) = (world.project / ".soong-agent" / "tasks").glob("*/ship.wal.jsonl")
    assert not log.is_symlink() and b"Ship it" in log.read_bytes()


# --- task logs, the adapter -------------------------------------------------------------------


@pytest.mark.parametrize("with_project", [True, False])
def test_the_task_log_refuses_a_linked_folder_at_every_level(
    tmp_path: Path, with_project: bool
) -> None:
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    outside.mkdir()
    wal_dir = project / ".soong-agent" / "tasks"
    log = FileTaskLog(wal_dir, project=project if with_project else None)
    link(wal_dir / SES, outside / "session")  # the session folder itself a link
    with pytest.raises(SandboxViolation, match=f"{wal_dir / SES} is a symbolic link"):
        log.append(SES, "ship", created())
    with pytest.raises(SandboxViolation):
        log.read(SES, "ship")
    assert log.list(SES) == []  # a link is never listed
    assert everything_under(outside) == ["session"]


def test_a_task_log_file_that_is_a_link_is_never_written_through(tmp_path: Path) -> None:
    project, outside = tmp_path / "project", tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("keep me\n", encoding="utf-8")
    log = FileTaskLog(project / ".soong-agent" / "tasks", project=project)
    (project / ".soong-agent" / "tasks" / SES).mkdir(parents=True)
    log.path(SES, "ship").symlink_to(victim)
    with pytest.raises(OSError):
        log.append(SES, "ship", created())
    with pytest.raises(OSError):
        log.read(SES, "ship")
    assert victim.read_text(encoding="utf-8") == "keep me\n"
    assert log.list(SES) == []


def test_a_wal_dir_the_user_put_outside_the_project_through_their_own_link_works(
    tmp_path: Path,
) -> None:
    project, elsewhere = tmp_path / "project", tmp_path / "disk" / "logs"
    project.mkdir()
    elsewhere.mkdir(parents=True)
    (tmp_path / "mine").symlink_to(tmp_path / "disk", target_is_directory=True)
    for log in (
        FileTaskLog(tmp_path / "mine" / "logs", project=project),
        FileTaskLog(tmp_path / "mine" / "logs"),
    ):
        log.append(SES, f"t{id(log)}", created())
    assert len(list((elsewhere / SES).glob("*.wal.jsonl"))) == 2


# --- mailboxes --------------------------------------------------------------------------------


@pytest.mark.parametrize("linked", [".soong-agent", ".soong-agent/teams", ".soong-agent/teams/t1"])
@pytest.mark.parametrize("with_project", [True, False])
def test_the_mailbox_refuses_a_linked_folder(
    tmp_path: Path, linked: str, with_project: bool
) -> None:
    project, target = tmp_path / "project", tmp_path / "outside" / "mail"
    project.mkdir()
    link(project / linked, target)
    box = FileMailbox(project / ".soong-agent" / "teams", project=project if with_project else None)
    with pytest.raises(SandboxViolation, match=f"{project / linked} is a symbolic link"):
        box.send("t1", mail())
    with pytest.raises(SandboxViolation):
        box.unread("t1", "alice")
    with pytest.raises(SandboxViolation):
        box.members("t1")
    assert everything_under(target) == []


def test_an_inbox_file_that_is_a_link_is_never_written_through(tmp_path: Path) -> None:
    project, victim = tmp_path / "project", tmp_path / "victim.txt"
    victim.write_text("keep me\n", encoding="utf-8")
    box = FileMailbox(project / ".soong-agent" / "teams", project=project)
    (project / ".soong-agent" / "teams" / "t1").mkdir(parents=True)
    box.path("t1", "alice").symlink_to(victim)
    with pytest.raises(OSError):
        box.send("t1", mail())
    with pytest.raises(OSError):
        box.mark_read("t1", "alice", 1)
    assert victim.read_text(encoding="utf-8") == "keep me\n"
    assert box.members("t1") == []


# --- worktrees --------------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *GIT_ID, *args], cwd=repo, capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "app.py").write_text("x = 1\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    return repo


@pytest.mark.parametrize(
    "linked", [".soong-agent", ".soong-agent/worktrees", ".soong-agent/worktrees/alice"]
)
def test_no_worktree_is_checked_out_through_a_link(repo: Path, linked: str) -> None:
    target = repo.parent / "outside" / "trees"
    link(repo / linked, target)
    worktrees = GitWorktrees(repo)
    with pytest.raises(WorktreeError, match=f"{repo / linked} is a symbolic link"):
        worktrees.create("t1", "alice")
    assert everything_under(target) == []
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert worktrees.list() == []


def test_the_gitignore_of_the_worktrees_folder_is_never_written_through_a_link(
    repo: Path,
) -> None:
    victim = repo.parent / "victim.txt"  # a dangling link: following it would create the file
    (repo / ".soong-agent" / "worktrees").mkdir(parents=True)
    (repo / ".soong-agent" / "worktrees" / ".gitignore").symlink_to(victim)
    tree = GitWorktrees(repo).create("t1", "alice")
    assert not victim.exists()
    assert Path(tree.path) == repo / ".soong-agent" / "worktrees" / "alice"
    assert os.path.realpath(tree.path) == tree.path


# --- plans, through the runtime ---------------------------------------------------------------


@pytest.mark.parametrize("linked", [".soong-agent", ".soong-agent/plans"])
async def test_plan_write_writes_nothing_through_a_linked_plans_folder(
    world: World, linked: str
) -> None:
    target = world.outside  # a folder the sandbox would refuse anyway: the link is named first
    link(world.project / linked, target / "plans-here")
    outcome = await world.run(
        ("plan_write", {"name": "refactor", "content": "# Plan\n"}), approval=ALLOW
    )
    (result,) = outcome.tool_results
    assert result.is_error
    assert f"{linked} is a symbolic link" in result.content
    assert everything_under(target / "plans-here") == []


async def test_a_plan_file_linked_to_a_project_file_is_not_overwritten_in_plan_mode(
    world: World,
) -> None:
    plans = world.project / ".soong-agent" / "plans"
    plans.mkdir(parents=True)
    (plans / "refactor.md").symlink_to(world.project / "readme.txt")
    before = (world.project / "readme.txt").read_bytes()
    outcome = await world.run(
        ("plan_write", {"name": "refactor", "content": "# Plan\n", "overwrite": True}),
        ("plan_read", {"name": "refactor"}),
        approval=ALLOW,
        mode="plan",
    )
    written, read = outcome.tool_results
    assert written.is_error and read.is_error
    assert ".soong-agent/plans/refactor.md is a symbolic link" in written.content
    assert (world.project / "readme.txt").read_bytes() == before
