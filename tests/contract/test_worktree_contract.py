"""The Worktrees contract, run against the InMemoryWorktrees fake and GitWorktrees on a real git
repository: names and branches, idempotent create (also from a new instance, as after a
restart), the diff of a member's work, accept (merged, then a conflict that leaves the main tree
as it was), reject, remove (refused while work is unaccepted), refused names, and a project
that is not a repository."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from soong_agent.adapters.worktrees import GitWorktrees
from soong_agent.ports.worktrees import MergeOutcome, Worktree, WorktreeError, Worktrees
from soong_agent.testing import InMemoryWorktrees

TEAM = "ses_1"
GIT_ID = ["-c", "user.name=Test", "-c", "user.email=test@example.com"]


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *GIT_ID, *args], cwd=repo, capture_output=True, text=True, check=True
    )
    return done.stdout


class Backend:
    """One implementation, and what a member's tools and the main tree's user would do."""

    worktrees: Worktrees
    restart: Callable[[], Worktrees]
    write: Callable[[Worktree, str, str], None]
    main_file: Callable[[str], str | None]
    head: Callable[[], str]


def fake_backend(tmp_path: Path) -> Backend:
    fake = InMemoryWorktrees({"README.md": "hello\n", "app.py": "x = 1\n"})
    backend = Backend()
    backend.worktrees = fake
    backend.restart = lambda: fake
    backend.write = lambda tree, path, text: fake.write(tree.member, path, text)
    backend.main_file = fake.main_file
    backend.head = lambda: fake.head
    return backend


def git_backend(tmp_path: Path) -> Backend:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("hello\n", encoding="utf-8")
    (repo / "app.py").write_text("x = 1\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")

    def write(tree: Worktree, path: str, text: str) -> None:
        target = Path(tree.path) / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")

    def main_file(path: str) -> str | None:
        target = repo / path
        return target.read_text(encoding="utf-8") if target.is_file() else None

    backend = Backend()
    backend.worktrees = GitWorktrees(repo)
    backend.restart = lambda: GitWorktrees(repo)
    backend.write = write
    backend.main_file = main_file
    backend.head = lambda: git(repo, "rev-parse", "HEAD").strip()
    return backend


@pytest.fixture(params=[fake_backend, git_backend], ids=["InMemoryWorktrees", "GitWorktrees"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    factory: Callable[[Path], Backend] = request.param
    return factory(tmp_path)


def test_both_implement_the_port(backend: Backend) -> None:
    assert isinstance(backend.worktrees, Worktrees)
    assert backend.worktrees.available()


def test_create_names_the_branch_and_folder_and_starts_at_head(backend: Backend) -> None:
    head = backend.head()
    tree = backend.worktrees.create(TEAM, "alice")
    assert tree.member == "alice"
    assert tree.branch == "soong/ses_1/alice"
    assert tree.path.endswith("/.soong-agent/worktrees/alice")
    assert tree.base == head
    assert backend.worktrees.get("alice") == tree
    assert backend.worktrees.get("bob") is None


def test_create_is_idempotent_also_after_a_restart(backend: Backend) -> None:
    tree = backend.worktrees.create(TEAM, "alice")
    backend.write(tree, "app.py", "x = 2\n")
    assert backend.worktrees.create(TEAM, "alice") == tree
    again = backend.restart()
    assert again.create(TEAM, "alice") == tree
    assert "+x = 2" in again.diff("alice")


def test_a_member_of_another_team_with_the_same_name_is_refused(backend: Backend) -> None:
    backend.worktrees.create(TEAM, "alice")
    with pytest.raises(WorktreeError, match="alice"):
        backend.worktrees.create("ses_2", "alice")


def test_list_is_sorted_by_member(backend: Backend) -> None:
    for member in ("carol", "alice", "bob"):
        backend.worktrees.create(TEAM, member)
    assert [t.member for t in backend.worktrees.list()] == ["alice", "bob", "carol"]


@pytest.mark.parametrize("member", ["", "Alice", "-x", "a/b", "..", "a_b", "a.b", "x" * 65])
def test_bad_member_names_are_refused(backend: Backend, member: str) -> None:
    with pytest.raises(WorktreeError, match="member name"):
        backend.worktrees.create(TEAM, member)
    with pytest.raises(WorktreeError, match="member name"):
        backend.worktrees.get(member)


@pytest.mark.parametrize("team", ["", "a/b", "a..b", "-x", "a b"])
def test_bad_team_names_are_refused(backend: Backend, team: str) -> None:
    with pytest.raises(WorktreeError, match="team name"):
        backend.worktrees.create(team, "alice")


def test_the_diff_shows_the_members_changes_and_only_them(backend: Backend) -> None:
    tree = backend.worktrees.create(TEAM, "alice")
    assert backend.worktrees.diff("alice") == ""
    backend.write(tree, "app.py", "x = 2\n")
    backend.write(tree, "notes/new.txt", "brand new\n")
    diff = backend.worktrees.diff("alice")
    assert "a/app.py" in diff and "-x = 1" in diff and "+x = 2" in diff
    assert "b/notes/new.txt" in diff and "+brand new" in diff
    assert "README.md" not in diff


def test_the_main_tree_sees_nothing_until_accept(backend: Backend) -> None:
    tree = backend.worktrees.create(TEAM, "alice")
    backend.write(tree, "app.py", "x = 2\n")
    backend.write(tree, "extra.txt", "more\n")
    backend.worktrees.diff("alice")
    assert backend.main_file("app.py") == "x = 1\n"
    assert backend.main_file("extra.txt") is None
    outcome = backend.worktrees.accept("alice", "alice's change")
    assert outcome.merged and outcome.commit is not None and outcome.conflict == ""
    assert backend.main_file("app.py") == "x = 2\n"
    assert backend.main_file("extra.txt") == "more\n"
    assert backend.head() == outcome.commit


def test_two_members_on_one_file_one_merges_the_other_conflicts(backend: Backend) -> None:
    alice = backend.worktrees.create(TEAM, "alice")
    bob = backend.worktrees.create(TEAM, "bob")
    backend.write(alice, "app.py", "x = 'alice'\n")
    backend.write(bob, "app.py", "x = 'bob'\n")
    assert backend.worktrees.accept("alice", "alice").merged
    head = backend.head()
    outcome = backend.worktrees.accept("bob", "bob")
    assert not outcome.merged and outcome.commit is None
    assert "app.py" in outcome.conflict and "CONFLICT" in outcome.conflict
    assert backend.main_file("app.py") == "x = 'alice'\n"
    assert backend.head() == head
    assert "+x = 'bob'" in backend.worktrees.diff("bob")  # bob's work is kept for review


def test_accept_with_nothing_to_merge_merges_nothing(backend: Backend) -> None:
    backend.worktrees.create(TEAM, "alice")
    head = backend.head()
    assert backend.worktrees.accept("alice", "nothing") == MergeOutcome(True, None)
    assert backend.head() == head


def test_after_accept_the_diff_starts_again_from_the_merged_work(backend: Backend) -> None:
    tree = backend.worktrees.create(TEAM, "alice")
    backend.write(tree, "app.py", "x = 2\n")
    assert backend.worktrees.accept("alice", "one").merged
    assert backend.worktrees.diff("alice") == ""
    backend.write(tree, "app.py", "x = 3\n")
    diff = backend.worktrees.diff("alice")
    assert "-x = 2" in diff and "+x = 3" in diff
    assert backend.worktrees.accept("alice", "two").merged
    assert backend.main_file("app.py") == "x = 3\n"


def test_reject_discards_the_work_and_the_worktree(backend: Backend) -> None:
    tree = backend.worktrees.create(TEAM, "alice")
    backend.write(tree, "app.py", "x = 2\n")
    backend.worktrees.reject("alice")
    assert backend.worktrees.get("alice") is None
    assert backend.worktrees.list() == []
    assert backend.main_file("app.py") == "x = 1\n"
    with pytest.raises(WorktreeError, match="alice"):
        backend.worktrees.reject("alice")
    fresh = backend.worktrees.create(TEAM, "alice")  # the name can be used again
    assert backend.worktrees.diff("alice") == ""
    assert fresh.base == backend.head()


def test_remove_cleans_up_accepted_work_and_refuses_unaccepted(backend: Backend) -> None:
    tree = backend.worktrees.create(TEAM, "alice")
    backend.write(tree, "app.py", "x = 2\n")
    with pytest.raises(WorktreeError, match=r"alice.*not accepted"):
        backend.worktrees.remove("alice")
    assert backend.worktrees.get("alice") == tree
    assert backend.worktrees.accept("alice", "done").merged
    backend.worktrees.remove("alice")
    assert backend.worktrees.get("alice") is None
    backend.worktrees.remove("alice")  # nothing left: nothing to do
    assert backend.main_file("app.py") == "x = 2\n"


def test_an_unknown_member_is_an_error(backend: Backend) -> None:
    with pytest.raises(WorktreeError, match="'ghost' has no worktree"):
        backend.worktrees.diff("ghost")
    with pytest.raises(WorktreeError, match="'ghost' has no worktree"):
        backend.worktrees.accept("ghost", "x")


def not_a_repository(kind: str, tmp_path: Path) -> Worktrees:
    if kind == "fake":
        return InMemoryWorktrees(available=False)
    plain = tmp_path / "plain"
    plain.mkdir()
    return GitWorktrees(plain, env={**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path)})


@pytest.mark.parametrize("kind", ["fake", "git"])
def test_a_project_that_is_not_a_repository(kind: str, tmp_path: Path) -> None:
    worktrees = not_a_repository(kind, tmp_path)
    assert not worktrees.available()
    with pytest.raises(WorktreeError, match="not a git repository"):
        worktrees.create(TEAM, "alice")
    assert worktrees.get("alice") is None
    assert worktrees.list() == []
