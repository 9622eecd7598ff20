"""GitWorktrees on real git repositories (TEAM-4): what only git shows — merge commits and their
parents, the main tree's status and files untouched by a conflict (also on the fallback without
``git merge-tree``), a main tree whose changes stand in the way, the ignore file, a worktree
removed by hand, a machine without a git identity, no shell, timeouts, threads."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from soong_agent.adapters.worktrees import GitWorktrees
from soong_agent.adapters.worktrees import git_cli as git_module
from soong_agent.ports.worktrees import WorktreeError

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

TEAM = "ses_1"
GIT_ID = ["-c", "user.name=Test", "-c", "user.email=test@example.com"]


def git(repo: Path, *args: str, check: bool = True) -> str:
    done = subprocess.run(
        ["git", *GIT_ID, *args], cwd=repo, capture_output=True, text=True, check=check
    )
    return done.stdout


def status(repo: Path) -> str:
    return git(repo, "status", "--porcelain", "--untracked-files=all")


def branches(repo: Path) -> list[str]:
    return git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/soong/").split()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    (project / "app.py").write_text("def f():\n    return 1\n", encoding="utf-8")
    (project / "README.md").write_text("hello\n", encoding="utf-8")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "init")
    return project


@pytest.fixture
def no_identity(tmp_path: Path) -> dict[str, str]:
    """An environment where git knows no user name or email (no global or system config)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
    )
    return env


def test_two_members_one_accepted_with_a_merge_commit_the_other_conflicts_then_rejected(
    repo: Path, no_identity: dict[str, str]
) -> None:
    worktrees = GitWorktrees(repo, env=no_identity)
    alice = worktrees.create(TEAM, "alice")
    bob = worktrees.create(TEAM, "bob")
    (Path(alice.path) / "app.py").write_text("def f():\n    return 'alice'\n", encoding="utf-8")
    (Path(bob.path) / "app.py").write_text("def f():\n    return 'bob'\n", encoding="utf-8")
    assert status(repo) == ""  # the worktrees are invisible to the main tree
    assert (repo / "app.py").read_text(encoding="utf-8") == "def f():\n    return 1\n"

    outcome = worktrees.accept("alice", "alice: return her name")
    assert outcome.merged and outcome.commit == git(repo, "rev-parse", "HEAD").strip()
    parents = git(repo, "rev-list", "--parents", "-n", "1", "HEAD").split()
    assert len(parents) == 3  # a merge commit: itself and two parents
    assert git(repo, "log", "-1", "--format=%an <%ae>|%s", parents[2]).strip() == (
        "soong-agent <soong-agent@localhost>|alice: return her name"
    )
    assert git(repo, "log", "-1", "--format=%s", "HEAD").strip() == "Merge soong/ses_1/alice"
    assert "'alice'" in (repo / "app.py").read_text(encoding="utf-8")
    assert git(repo, "branch", "--show-current").strip() == "main"

    head = git(repo, "rev-parse", "HEAD").strip()
    before = (repo / "app.py").stat().st_mtime_ns
    conflict = worktrees.accept("bob", "bob: return his name")
    assert not conflict.merged and conflict.commit is None
    assert conflict.conflict.startswith("merge conflict in app.py: CONFLICT (content)")
    assert status(repo) == ""
    assert git(repo, "rev-parse", "HEAD").strip() == head
    text = (repo / "app.py").read_text(encoding="utf-8")
    assert "<<<<<<<" not in text and "'alice'" in text
    assert (repo / "app.py").stat().st_mtime_ns == before  # not even rewritten
    assert not (repo / ".git" / "MERGE_HEAD").exists()

    worktrees.reject("bob")
    assert not Path(bob.path).exists()
    assert branches(repo) == ["soong/ses_1/alice"]
    assert "bob" not in git(repo, "worktree", "list", "--porcelain")
    assert git(repo, "config", "--get-regexp", "soongbase", check=False).count("bob") == 0

    worktrees.remove("alice")
    assert not Path(alice.path).exists()
    assert branches(repo) == []
    assert status(repo) == ""


def test_a_conflict_is_aborted_when_git_has_no_merge_tree(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_run = subprocess.run

    def old_git(argv: list[str], **kwargs: Any) -> Any:
        if "merge-tree" in argv:  # git < 2.38: an unknown option
            return subprocess.CompletedProcess(argv, 129, b"", b"usage: git merge-tree")
        return real_run(argv, **kwargs)

    monkeypatch.setattr(git_module.subprocess, "run", old_git)
    worktrees = GitWorktrees(repo)
    alice = worktrees.create(TEAM, "alice")
    bob = worktrees.create(TEAM, "bob")
    (Path(alice.path) / "app.py").write_text("a\n", encoding="utf-8")
    (Path(bob.path) / "app.py").write_text("b\n", encoding="utf-8")
    (repo / "README.md").write_text("an unrelated edit of the user\n", encoding="utf-8")
    assert worktrees.accept("alice", "alice").merged
    head = git(repo, "rev-parse", "HEAD").strip()
    outcome = worktrees.accept("bob", "bob")
    assert not outcome.merged and "app.py" in outcome.conflict
    assert "CONFLICT" in outcome.conflict
    assert git(repo, "rev-parse", "HEAD").strip() == head
    assert (repo / "app.py").read_text(encoding="utf-8") == "a\n"
    assert status(repo) == " M README.md\n"  # the user's own edit survives
    assert not (repo / ".git" / "MERGE_HEAD").exists()


def test_the_diff_shows_committed_staged_unstaged_untracked_and_binary_changes(
    repo: Path,
) -> None:
    worktrees = GitWorktrees(repo)
    tree = worktrees.create(TEAM, "alice")
    where = Path(tree.path)
    (where / "README.md").write_text("hello\ncommitted\n", encoding="utf-8")
    git(where, "commit", "-q", "-am", "member commit")
    (where / "staged.txt").write_text("staged\n", encoding="utf-8")
    git(where, "add", "staged.txt")
    (where / "app.py").write_text("def f():\n    return 2\n", encoding="utf-8")
    (where / "untracked.txt").write_text("untracked\n", encoding="utf-8")
    (where / "logo.bin").write_bytes(b"\x00\x01\x02binary")
    (where / ".gitignore").write_text("*.log\n", encoding="utf-8")
    (where / "noise.log").write_text("ignored\n", encoding="utf-8")
    member_status = status(where)

    diff = worktrees.diff("alice")
    assert "+committed" in diff
    assert "+staged" in diff
    assert "-    return 1" in diff and "+    return 2" in diff
    assert "+untracked" in diff
    assert "Binary files /dev/null and b/logo.bin differ" in diff
    assert "noise.log" not in diff
    assert status(where) == member_status  # the member's index is left alone
    assert status(repo) == ""
    assert (repo / "README.md").read_text(encoding="utf-8") == "hello\n"


def test_the_main_tree_in_the_way_is_reported_and_left_alone(repo: Path) -> None:
    worktrees = GitWorktrees(repo)
    tree = worktrees.create(TEAM, "alice")
    (Path(tree.path) / "app.py").write_text("member\n", encoding="utf-8")

    (repo / "app.py").write_text("user's unsaved edit\n", encoding="utf-8")
    outcome = worktrees.accept("alice", "x")
    assert not outcome.merged
    assert outcome.conflict == (
        "the main tree has uncommitted changes to files the merge touches: app.py"
    )
    assert (repo / "app.py").read_text(encoding="utf-8") == "user's unsaved edit\n"

    git(repo, "checkout", "--", "app.py")
    (repo / "README.md").write_text("staged by the user\n", encoding="utf-8")
    git(repo, "add", "README.md")
    outcome = worktrees.accept("alice", "x")
    assert outcome == type(outcome)(False, None, "the main tree has staged changes: README.md")
    git(repo, "reset", "-q", "--hard")

    git(repo, "checkout", "-q", "--detach")
    outcome = worktrees.accept("alice", "x")
    assert not outcome.merged and "detached HEAD" in outcome.conflict
    git(repo, "checkout", "-q", "main")

    (repo / "README.md").write_text("unrelated unsaved edit\n", encoding="utf-8")
    outcome = worktrees.accept("alice", "x")
    assert outcome.merged
    assert (repo / "app.py").read_text(encoding="utf-8") == "member\n"
    assert (repo / "README.md").read_text(encoding="utf-8") == "unrelated unsaved edit\n"


def test_the_main_tree_moved_on_without_conflict_still_merges(repo: Path) -> None:
    worktrees = GitWorktrees(repo)
    tree = worktrees.create(TEAM, "alice")
    (Path(tree.path) / "app.py").write_text("member\n", encoding="utf-8")
    (repo / "README.md").write_text("the user committed this\n", encoding="utf-8")
    git(repo, "commit", "-q", "-am", "user work")
    assert worktrees.accept("alice", "x").merged
    assert (repo / "app.py").read_text(encoding="utf-8") == "member\n"
    assert (repo / "README.md").read_text(encoding="utf-8") == "the user committed this\n"


def test_the_worktrees_folder_is_ignored_by_its_own_gitignore(repo: Path) -> None:
    worktrees = GitWorktrees(repo)
    worktrees.create(TEAM, "alice")
    ignore = repo / ".soong-agent" / "worktrees" / ".gitignore"
    assert ignore.read_text(encoding="utf-8").splitlines()[-1] == "*"
    assert status(repo) == ""
    assert git(repo, "check-ignore", ".soong-agent/worktrees/alice/app.py").strip()
    assert not (repo / ".gitignore").exists()
    exclude = repo / ".git" / "info" / "exclude"
    assert "soong" not in (exclude.read_text(encoding="utf-8") if exclude.exists() else "")


def test_after_a_restart_a_worktree_removed_by_hand_comes_back_from_its_branch(
    repo: Path,
) -> None:
    tree = GitWorktrees(repo).create(TEAM, "alice")
    where = Path(tree.path)
    (where / "app.py").write_text("committed by the member\n", encoding="utf-8")
    git(where, "commit", "-q", "-am", "member commit")
    shutil.rmtree(where)

    restarted = GitWorktrees(repo)
    assert restarted.get("alice") is None  # still registered, but its folder is gone
    again = restarted.create(TEAM, "alice")
    assert again == tree
    assert (where / "app.py").read_text(encoding="utf-8") == "committed by the member\n"
    assert "+committed by the member" in restarted.diff("alice")


def test_a_folder_in_the_way_is_reported(repo: Path) -> None:
    stray = repo / ".soong-agent" / "worktrees" / "alice"
    stray.mkdir(parents=True)
    (stray / "file.txt").write_text("x", encoding="utf-8")
    with pytest.raises(WorktreeError, match=r"member 'alice': .* exists and is not a worktree"):
        GitWorktrees(repo).create(TEAM, "alice")


def test_remove_refuses_commits_that_were_not_merged(repo: Path) -> None:
    worktrees = GitWorktrees(repo)
    tree = worktrees.create(TEAM, "alice")
    (Path(tree.path) / "app.py").write_text("x\n", encoding="utf-8")
    git(Path(tree.path), "commit", "-q", "-am", "member commit")
    with pytest.raises(WorktreeError, match="commits on soong/ses_1/alice that were not merged"):
        worktrees.remove("alice")
    assert Path(tree.path).is_dir()


def test_git_runs_without_a_shell_without_prompts_and_with_an_identity(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[list[str], dict[str, Any]]] = []
    real_run = subprocess.run

    def spy(argv: list[str], **kwargs: Any) -> Any:
        calls.append((list(argv), kwargs))
        return real_run(argv, **kwargs)

    monkeypatch.setattr(git_module.subprocess, "run", spy)
    monkeypatch.setenv("GIT_DIR", "/nonexistent")  # inherited from a hook: must not leak
    worktrees = GitWorktrees(repo)
    tree = worktrees.create(TEAM, "alice")
    (Path(tree.path) / "app.py").write_text("x\n", encoding="utf-8")
    assert worktrees.accept("alice", "x").merged
    assert calls
    for argv, kwargs in calls:
        assert argv[0] == "git" and not kwargs.get("shell")
        assert kwargs["timeout"] > 0
        assert kwargs["env"]["GIT_TERMINAL_PROMPT"] == "0"
        assert "GIT_DIR" not in kwargs["env"]
    commits = [argv for argv, _ in calls if "commit" in argv or "merge" in argv[-7:]]
    assert commits and all("user.name=soong-agent" in argv for argv in commits)


def test_a_git_that_hangs_times_out(tmp_path: Path, repo: Path) -> None:
    slow = tmp_path / "slow-git"
    slow.write_text("#!/bin/sh\nsleep 5\n", encoding="utf-8")
    slow.chmod(0o755)
    worktrees = GitWorktrees(repo, git=str(slow), timeout_s=0.2)
    assert not worktrees.available()
    with pytest.raises(WorktreeError, match=r"timed out after 0\.2s"):
        worktrees.diff("alice")


def test_without_git_nothing_is_available(repo: Path, tmp_path: Path) -> None:
    worktrees = GitWorktrees(repo, git=str(tmp_path / "no-such-git"))
    assert not worktrees.available()
    with pytest.raises(WorktreeError, match="is not installed"):
        worktrees.create(TEAM, "alice")


def test_an_empty_repository_is_not_available(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    worktrees = GitWorktrees(empty)
    assert not worktrees.available()
    with pytest.raises(WorktreeError, match="not a git repository with a commit"):
        worktrees.create(TEAM, "alice")


def test_members_created_from_several_threads(repo: Path) -> None:
    worktrees = GitWorktrees(repo)
    errors: list[BaseException] = []

    def make(member: str) -> None:
        try:
            worktrees.create(TEAM, member)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=make, args=(f"m{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert [t.member for t in worktrees.list()] == [f"m{i}" for i in range(6)]
    assert status(repo) == ""
