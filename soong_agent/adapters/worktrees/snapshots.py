"""`GitSnapshots`: the `WorkTreeSnapshots` port over the real ``git`` binary (RWD-1).

A snapshot is taken the way a commit's tree would be, but through an index of its own: a copy
of the repository's index (so git's stat cache spares re-reading unchanged files; without one,
``git read-tree HEAD``) in a temporary folder named by ``GIT_INDEX_FILE``, then ``git add -A``
of the folder asked for and ``git write-tree``. The tree and its blobs land in the object store,
referenced by nothing (``git gc`` prunes them in time); the user's index, branches, stash and
work tree are left as they were. Untracked files bigger than `max_file_bytes` are left out
(named in the snapshot), as are the caller's exclusions (sensitive files).

Every call is an argv list (never a shell) with a timeout, stdin closed, ``LC_ALL=C``, no
terminal prompt, the caller's ``GIT_DIR`` / ``GIT_INDEX_FILE`` & co dropped (`git_cli`); the
work runs on a worker thread.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from soong_agent.adapters.worktrees.git_cli import DROPPED_ENV, one_line
from soong_agent.ports.snapshots import SnapshotError, TreeChange, TreeEntry, TreeSnapshot

MAX_FILE_BYTES = 10 * 1024 * 1024
"""Untracked files bigger than this are left out of a snapshot (a dataset, a build output)."""
_PATHS_PER_CALL = 200


class GitSnapshots:
    """Snapshots of the git work tree a folder is in.

    `git` is the binary (a name on PATH or a path), `timeout_s` bounds each git call, `env` the
    environment git runs with (default: this process's)."""

    def __init__(
        self,
        *,
        git: str = "git",
        timeout_s: float = 120.0,
        max_file_bytes: int = MAX_FILE_BYTES,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._git = git
        self._timeout_s = timeout_s
        self._max_file_bytes = max_file_bytes
        base = dict(os.environ if env is None else env)
        for name in DROPPED_ENV:
            base.pop(name, None)
        base.update({"GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", "LANGUAGE": "C"})
        self._env = base

    # --- the port --------------------------------------------------------------------------

    async def take(self, root: str, *, exclude: Sequence[str] = ()) -> TreeSnapshot | None:
        return await asyncio.to_thread(self._take, root, tuple(exclude))

    async def changes(self, root: str, before: str, after: str) -> list[TreeChange]:
        return await asyncio.to_thread(self._changes, root, before, after)

    async def entries(self, root: str, tree: str, paths: Sequence[str]) -> dict[str, TreeEntry]:
        return await asyncio.to_thread(self._entries, root, tree, tuple(paths))

    async def read(self, root: str, blob: str) -> bytes:
        return await asyncio.to_thread(self._read, root, blob)

    # --- the work, on a worker thread ----------------------------------------------------------

    def _take(self, root: str, exclude: tuple[str, ...]) -> TreeSnapshot | None:
        if not os.path.isdir(root):
            return None
        try:
            inside = self._run(root, ["rev-parse", "--is-inside-work-tree"])
        except SnapshotError:
            if shutil.which(self._git, path=self._env.get("PATH")) is None:
                return None  # no git here: nothing can be a work tree
            raise
        if inside[0] != 0 or inside[1].strip() != b"true":
            return None
        index = self._text(root, ["rev-parse", "--git-path", "index"]).strip()
        with tempfile.TemporaryDirectory(prefix="soong-snapshot-") as folder:
            env = {"GIT_INDEX_FILE": os.path.join(folder, "index")}
            real = Path(root, index)
            if real.is_file():
                shutil.copyfile(real, env["GIT_INDEX_FILE"])
            elif self._run(root, ["rev-parse", "--verify", "--quiet", "HEAD"])[0] == 0:
                self._text(root, ["read-tree", "HEAD"], env)
            skipped = self._too_big(root, exclude, env)
            leave_out = [f":(exclude,literal){name}" for name in skipped]
            self._text(root, ["add", "-A", "--", ".", *exclude, *leave_out], env)
            tree = self._text(root, ["write-tree"], env).strip()
        return TreeSnapshot(tree=tree, skipped=tuple(skipped))

    def _too_big(self, root: str, exclude: tuple[str, ...], env: Mapping[str, str]) -> list[str]:
        """The untracked files under `root` bigger than the limit (paths relative to it)."""
        listed = self._text(
            root, ["ls-files", "-z", "--others", "--exclude-standard", "--", ".", *exclude], env
        )
        out: list[str] = []
        for name in filter(None, listed.split("\0")):
            try:
                size = os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue  # gone meanwhile: git add will not find it either
            if size > self._max_file_bytes:
                out.append(name)
        return out

    def _changes(self, root: str, before: str, after: str) -> list[TreeChange]:
        prefix = self._prefix(root)
        raw = self._text(root, ["diff-tree", "-r", "-z", "--no-renames", before, after, "--", "."])
        fields = raw.split("\0")
        out: list[TreeChange] = []
        for head, path in zip(fields[0::2], fields[1::2], strict=False):
            if not head.startswith(":"):
                continue
            old_mode, new_mode, old_id, new_id, _status = head[1:].split(" ")
            name = path[len(prefix) :] if path.startswith(prefix) else path
            out.append(
                TreeChange(
                    path=name,
                    before=None if _absent(old_mode) else TreeEntry(name, old_mode, old_id),
                    after=None if _absent(new_mode) else TreeEntry(name, new_mode, new_id),
                )
            )
        out.sort(key=lambda change: change.path)
        return out

    def _entries(self, root: str, tree: str, paths: tuple[str, ...]) -> dict[str, TreeEntry]:
        prefix = self._prefix(root)
        out: dict[str, TreeEntry] = {}
        for start in range(0, len(paths), _PATHS_PER_CALL):
            chunk = [prefix + p for p in paths[start : start + _PATHS_PER_CALL]]
            listed = self._text(root, ["ls-tree", "-z", "--full-tree", tree, "--", *chunk])
            for line in filter(None, listed.split("\0")):
                meta, _, path = line.partition("\t")
                mode, kind, object_id = meta.split(" ")
                name = path[len(prefix) :] if path.startswith(prefix) else path
                if kind != "tree" and name in paths:
                    out[name] = TreeEntry(name, mode, object_id)
        return out

    def _read(self, root: str, blob: str) -> bytes:
        code, out, err = self._run(root, ["cat-file", "blob", blob])
        if code != 0:
            raise SnapshotError(f"git cat-file {blob} failed: {_said(err)}")
        return out

    def _prefix(self, root: str) -> str:
        """Where `root` is in its repository (``sub/dir/``; empty at the top)."""
        return self._text(root, ["rev-parse", "--show-prefix"]).strip("\n")

    def _text(self, root: str, args: Sequence[str], env: Mapping[str, str] | None = None) -> str:
        code, out, err = self._run(root, args, env)
        if code != 0:
            raise SnapshotError(f"git {args[0]} failed (exit {code}) in {root}: {_said(err)}")
        return out.decode("utf-8", "surrogateescape")

    def _run(
        self, root: str, args: Sequence[str], env: Mapping[str, str] | None = None
    ) -> tuple[int, bytes, bytes]:
        try:
            done = subprocess.run(  # an argv list, never a shell
                [self._git, *args],
                cwd=root,
                env={**self._env, **env} if env else self._env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self._timeout_s,
                check=False,
            )
        except FileNotFoundError as exc:
            raise SnapshotError(f"git ({self._git}) is not installed or not on PATH") from exc
        except subprocess.TimeoutExpired as exc:
            raise SnapshotError(
                f"git {args[0]} timed out after {self._timeout_s:g}s in {root}"
            ) from exc
        except OSError as exc:
            raise SnapshotError(f"git could not run in {root}: {exc}") from exc
        return done.returncode, done.stdout, done.stderr


def _absent(mode: str) -> bool:
    return set(mode) == {"0"}


def _said(err: bytes) -> str:
    return one_line(err.decode("utf-8", "replace")) or "no message"
