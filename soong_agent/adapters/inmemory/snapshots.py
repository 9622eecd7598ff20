"""Work-tree snapshots in memory, for tests: the files of an `InMemoryFileSystem` as trees.

It answers as `GitSnapshots` does (the shared contract suite runs on both): None for a folder
that is not a work tree (`work_tree=False`, or a folder other than the file system's root),
only what is under the root, exclusions in the pathspec forms the runtime passes
(``:(exclude,top,glob)PATTERN``, ``:(exclude,top,literal)PATH``, ``:(exclude,literal)PATH``),
files bigger than `max_file_bytes` left out and named, `SnapshotError` for an unknown tree or
object. Every file is a regular one (mode ``100644``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from soong_agent.adapters.inmemory.filesystem import InMemoryFileSystem
from soong_agent.domain.permissions.targets import glob_regex
from soong_agent.ports.snapshots import (
    REGULAR,
    SnapshotError,
    TreeChange,
    TreeEntry,
    TreeSnapshot,
)

_EXCLUDE = re.compile(r":\((?P<magic>[a-z,]+)\)(?P<pattern>.*)", re.DOTALL)


class InMemorySnapshots:
    """Snapshots of `fs`'s project files (keys relative to its root; default: an empty
    `InMemoryFileSystem`). `trees` and `blobs` hold what was taken."""

    def __init__(
        self,
        fs: InMemoryFileSystem | None = None,
        *,
        work_tree: bool = True,
        max_file_bytes: int = 10 * 1024 * 1024,
    ) -> None:
        self._fs = fs if fs is not None else InMemoryFileSystem()
        self.work_tree = work_tree
        self._max = max_file_bytes
        self.trees: dict[str, dict[str, str]] = {}
        self.blobs: dict[str, bytes] = {}

    async def take(self, root: str, *, exclude: Sequence[str] = ()) -> TreeSnapshot | None:
        if not self.work_tree or root != self._fs.root:
            return None
        dropped = [_excluded(spec) for spec in exclude]
        files: dict[str, str] = {}
        skipped: list[str] = []
        for key, data in sorted(self._fs.files.items()):
            if key.startswith("/") or any(match.fullmatch(key) for match in dropped):
                continue
            if len(data) > self._max:
                skipped.append(key)
                continue
            blob = hashlib.sha1(b"blob " + data).hexdigest()
            self.blobs[blob] = bytes(data)
            files[key] = blob
        tree = hashlib.sha1(repr(sorted(files.items())).encode()).hexdigest()
        self.trees[tree] = files
        return TreeSnapshot(tree=tree, skipped=tuple(skipped))

    async def changes(self, root: str, before: str, after: str) -> list[TreeChange]:
        old, new = self._tree(before), self._tree(after)
        out: list[TreeChange] = []
        for path in sorted(set(old) | set(new)):
            if old.get(path) == new.get(path):
                continue
            out.append(TreeChange(path, _entry(path, old.get(path)), _entry(path, new.get(path))))
        return out

    async def entries(self, root: str, tree: str, paths: Sequence[str]) -> dict[str, TreeEntry]:
        files = self._tree(tree)
        return {p: TreeEntry(p, REGULAR, files[p]) for p in paths if p in files}

    async def read(self, root: str, blob: str) -> bytes:
        if blob not in self.blobs:
            raise SnapshotError(f"no object {blob}")
        return self.blobs[blob]

    def _tree(self, tree: str) -> dict[str, str]:
        if tree not in self.trees:
            raise SnapshotError(f"no tree {tree}")
        return self.trees[tree]


def _entry(path: str, blob: str | None) -> TreeEntry | None:
    return None if blob is None else TreeEntry(path, REGULAR, blob)


def _excluded(spec: str) -> re.Pattern[str]:
    """What an exclusion pathspec leaves out, as a regular expression over relative paths."""
    found = _EXCLUDE.fullmatch(spec)
    if found is None or "exclude" not in found.group("magic").split(","):
        raise ValueError(f"not an exclusion pathspec: {spec!r}")
    pattern = found.group("pattern")
    if "glob" in found.group("magic").split(","):
        return glob_regex(pattern)
    return re.compile(re.escape(pattern.rstrip("/")) + r"(?:/.*)?", re.DOTALL)
