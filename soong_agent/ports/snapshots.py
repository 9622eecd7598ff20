"""The work-tree snapshots port (RWD-1): a git work tree as a tree object, so that a rewind can
put back what commands changed.

A snapshot is written through a temporary index (``GIT_INDEX_FILE``): tracked and untracked
files, those git ignores left out, go into the repository's object store as a tree that no
branch, tag, stash or index refers to. The user's index, branches and stash are never touched.
Paths crossing this port are relative to the folder the caller names (`root`), with ``/``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from soong_agent.ports.errors import RunError

REGULAR = "100644"
EXECUTABLE = "100755"
SYMLINK = "120000"
SUBMODULE = "160000"


class SnapshotError(RunError):
    """A snapshot could not be taken or read (git failed, timed out, or is missing while the
    folder is a work tree); the message is one line."""


@dataclass(frozen=True, slots=True)
class TreeSnapshot:
    """A snapshot: the tree's object id, and the untracked files left out of it (too big)."""

    tree: str
    skipped: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """One file of a tree: its path (relative to the root), its git mode (`REGULAR`,
    `EXECUTABLE`, `SYMLINK`, `SUBMODULE`) and its object id."""

    path: str
    mode: str
    blob: str


@dataclass(frozen=True, slots=True)
class TreeChange:
    """A file that differs between two trees: its entry in each (None: not in that tree)."""

    path: str
    before: TreeEntry | None
    after: TreeEntry | None


@runtime_checkable
class WorkTreeSnapshots(Protocol):
    """Snapshots of the git work tree a folder is in, limited to that folder."""

    async def take(self, root: str, *, exclude: Sequence[str] = ()) -> TreeSnapshot | None:
        """A snapshot of the files under `root` as they are now; None when `root` is not in a
        git work tree (or git is not installed).

        Args:
            root: the folder (absolute); only what is under it is taken.
            exclude: git pathspecs of files to leave out (``:(exclude,top,glob)**/.env``):
                sensitive files never reach the object store.

        Raises:
            SnapshotError: git failed.
        """
        ...

    async def changes(self, root: str, before: str, after: str) -> list[TreeChange]:
        """The files under `root` that differ between the trees `before` and `after`, sorted
        by path. SnapshotError for an unknown tree."""
        ...

    async def entries(self, root: str, tree: str, paths: Sequence[str]) -> dict[str, TreeEntry]:
        """The entries of `tree` for these files under `root` (a path not in the tree is left
        out)."""
        ...

    async def read(self, root: str, blob: str) -> bytes:
        """The bytes of a file's object, exactly. SnapshotError for an unknown object."""
        ...
