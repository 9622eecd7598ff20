"""The WorkTreeSnapshots contract (RWD-1), run against the InMemorySnapshots fake and GitSnapshots
on a real git repository: no snapshot outside a work tree, the changes between two snapshots,
exact bytes back, entries by path, sensitive exclusions, big untracked files left out and named,
unknown trees and objects refused; and, for git, the user's index, branches and stash untouched
and a project that is a subfolder of its repository."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from soong_agent.adapters.worktrees.snapshots import GitSnapshots
from soong_agent.ports.snapshots import REGULAR, SnapshotError, TreeChange, WorkTreeSnapshots
from soong_agent.testing import InMemoryFileSystem, InMemorySnapshots

ENV_EXCLUDES = (":(exclude,top,glob)**/.env", ":(exclude,top,glob)**/.env/**")
START = {"app.py": b"print(1)\n", "docs/a.md": b"# a\n", "data.bin": b"\x00\xff\x80"}


@dataclass
class Backend:
    snapshots: WorkTreeSnapshots
    root: str
    write: Callable[[str, bytes], None]
    remove: Callable[[str], None]
    outside: str  # a folder that is in no work tree


def fake_backend(tmp_path: Path, max_file_bytes: int) -> Backend:
    fs = InMemoryFileSystem(dict(START))
    return Backend(
        InMemorySnapshots(fs, max_file_bytes=max_file_bytes),
        fs.root,
        fs.files.__setitem__,
        fs.files.__delitem__,
        "/elsewhere",
    )


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def git_backend(tmp_path: Path, max_file_bytes: int, *, subfolder: str = "") -> Backend:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    root = repo / subfolder if subfolder else repo
    root.mkdir(parents=True)
    git(repo, "init", "-q")
    for name, data in START.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    (repo / "README").write_text("the repository's own\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "start")
    outside = tmp_path / "plain"
    outside.mkdir()

    def write(path: str, data: bytes) -> None:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)

    return Backend(
        GitSnapshots(max_file_bytes=max_file_bytes),
        str(root),
        write,
        lambda path: (root / path).unlink(),
        str(outside),
    )


BACKENDS = {"fake": fake_backend, "git": git_backend}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    return BACKENDS[request.param](tmp_path, 1000)


async def take(backend: Backend) -> str:
    taken = await backend.snapshots.take(backend.root, exclude=ENV_EXCLUDES)
    assert taken is not None
    return taken.tree


def summary(changes: list[TreeChange]) -> list[tuple[str, bool, bool]]:
    return [(c.path, c.before is not None, c.after is not None) for c in changes]


async def test_no_snapshot_outside_a_work_tree(backend: Backend) -> None:
    assert await backend.snapshots.take(backend.outside) is None


async def test_changes_between_two_snapshots_relative_to_the_root(backend: Backend) -> None:
    before = await take(backend)
    assert await backend.snapshots.changes(backend.root, before, before) == []
    backend.write("app.py", b"print(2)\n")
    backend.remove("docs/a.md")
    backend.write("new/b.txt", b"new")
    after = await take(backend)
    changes = await backend.snapshots.changes(backend.root, before, after)
    assert summary(changes) == [
        ("app.py", True, True),
        ("docs/a.md", True, False),
        ("new/b.txt", False, True),
    ]
    assert changes[0].before is not None and changes[0].before.mode == REGULAR


async def test_read_gives_the_exact_bytes_back(backend: Backend) -> None:
    tree = await take(backend)
    backend.write("data.bin", b"changed")
    found = await backend.snapshots.entries(backend.root, tree, ["data.bin", "app.py", "nope"])
    assert sorted(found) == ["app.py", "data.bin"]
    assert await backend.snapshots.read(backend.root, found["data.bin"].blob) == START["data.bin"]


async def test_sensitive_files_are_left_out(backend: Backend) -> None:
    backend.write(".env", b"TOKEN=secret")
    backend.write("conf/.env", b"TOKEN=secret")
    tree = await take(backend)
    assert await backend.snapshots.entries(backend.root, tree, [".env", "conf/.env"]) == {}


async def test_big_untracked_files_are_left_out_and_named(backend: Backend) -> None:
    backend.write("big.dat", b"x" * 2000)
    backend.write("small.dat", b"x" * 10)
    taken = await backend.snapshots.take(backend.root, exclude=ENV_EXCLUDES)
    assert taken is not None and taken.skipped == ("big.dat",)
    found = await backend.snapshots.entries(backend.root, taken.tree, ["big.dat", "small.dat"])
    assert sorted(found) == ["small.dat"]


async def test_unknown_trees_and_objects_are_refused(backend: Backend) -> None:
    tree = await take(backend)
    with pytest.raises(SnapshotError):
        await backend.snapshots.changes(backend.root, tree, "0" * 39 + "1")
    with pytest.raises(SnapshotError):
        await backend.snapshots.read(backend.root, "0" * 39 + "1")


async def test_git_leaves_the_index_branches_stash_and_files_alone(tmp_path: Path) -> None:
    backend = git_backend(tmp_path, 1000)
    repo = Path(backend.root)
    backend.write("app.py", b"staged\n")
    git(repo, "add", "app.py")
    backend.write("app.py", b"unstaged on top\n")
    backend.write("untracked.txt", b"u")
    index = (repo / ".git" / "index").read_bytes()
    status, refs = git(repo, "status", "--porcelain"), git(repo, "for-each-ref")
    tree = await take(backend)
    assert (repo / ".git" / "index").read_bytes() == index
    assert git(repo, "status", "--porcelain") == status
    assert git(repo, "for-each-ref") == refs and git(repo, "stash", "list") == ""
    found = await backend.snapshots.entries(backend.root, tree, ["app.py", "untracked.txt"])
    assert await backend.snapshots.read(backend.root, found["app.py"].blob) == b"unstaged on top\n"
    assert sorted(found) == ["app.py", "untracked.txt"]  # the work tree, not the index


async def test_git_project_in_a_subfolder_sees_only_its_own_files(tmp_path: Path) -> None:
    backend = git_backend(tmp_path, 1000, subfolder="services/api")
    before = await take(backend)
    backend.write("app.py", b"print(3)\n")
    (tmp_path / "repo" / "README").write_text("changed outside the project\n")
    after = await take(backend)
    changes = await backend.snapshots.changes(backend.root, before, after)
    assert summary(changes) == [("app.py", True, True)]
    assert sorted(await backend.snapshots.entries(backend.root, after, ["app.py", "README"])) == [
        "app.py"
    ]
