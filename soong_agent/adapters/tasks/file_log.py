"""`FileTaskLog`: task WALs as append-only JSON-lines files (TASK-1).

An append takes an exclusive `fcntl.flock` on the log file itself (held by the open file
description, so it excludes other processes and other threads alike), re-reads what other
writers appended since this process last looked, folds it, checks the new record, writes the
whole line with one `write` loop, fsyncs and unlocks by closing. A torn last line (a writer
killed mid-write) is cut off before the new line is written; a corrupt line before the end
refuses every append (TaskLogCorrupt), since the log no longer folds.

What a process has folded is cached by file identity and length, so appending costs the new
lines, not the whole log. The cache trusts that nobody rewrites the log in place (a log edited
by hand is replaced: a new inode).

The folders are opened without following a symbolic link (`StateDir`): a project that ships
``.soong-agent/tasks`` as a link to a folder elsewhere gets `SandboxViolation` naming it, and
nothing is read or written there; a log file that is a link is never opened either.
"""

from __future__ import annotations

import builtins
import fcntl
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from soong_agent.adapters.durable_files import read_all, write_all
from soong_agent.adapters.state_dirs import StateDir, open_listed
from soong_agent.domain.tasks.names import WAL_SUFFIX, name_problem, session_problem
from soong_agent.domain.tasks.state import TaskState, check, fold_into
from soong_agent.domain.tasks.wal import encode, parse
from soong_agent.ports.tasks import (
    TaskLogCorrupt,
    TaskNameRefused,
    TaskRecord,
    TaskRef,
    TaskTransitionRefused,
    WalRead,
)


@dataclass(slots=True)
class _Folded:
    """The state of a log's first `length` bytes (`lines` whole lines), for one inode."""

    device: int
    inode: int
    length: int
    lines: int
    state: TaskState


class FileTaskLog:
    """Every task WAL under `wal_dir` (created on first append).

    `project`: the project folder; when `wal_dir` lies inside it, every folder from the project
    down is opened without following a link. Without it, the same holds from the folder that
    holds the path's ``.soong-agent`` folder (see `StateDir`).
    """

    def __init__(
        self, wal_dir: str | os.PathLike[str], *, project: str | os.PathLike[str] | None = None
    ) -> None:
        self._root = Path(wal_dir)
        self._dir = StateDir(wal_dir, what="its task logs", project=project)
        self._cache: dict[Path, _Folded] = {}
        self._cache_lock = threading.Lock()

    @property
    def root(self) -> Path:
        return self._root

    def path(self, session_id: str, name: str) -> Path:
        """Where the log of `session_id`/`name` is; TaskNameRefused for a name that is not a
        slug or a session id that is not one of ours."""
        problem = session_problem(session_id)
        if problem is not None:
            raise TaskNameRefused(session_id, problem)
        problem = name_problem(name)
        if problem is not None:
            raise TaskNameRefused(name, problem)
        return self._root / session_id / f"{name}{WAL_SUFFIX}"

    def read(self, session_id: str, name: str) -> WalRead:
        path = self.path(session_id, name)
        folder = self._dir.open(session_id, create=False)
        if folder is None:
            return WalRead([], [])
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
        except FileNotFoundError:
            return WalRead([], [])
        finally:
            os.close(folder)
        try:
            data = read_all(fd)
        finally:
            os.close(fd)
        parsed = parse(data)
        return WalRead(parsed.records, list(parsed.problems))

    def append(self, session_id: str, name: str, record: TaskRecord) -> TaskRecord:
        path = self.path(session_id, name)
        ref = f"{session_id}/{name}"
        folder = self._dir.open(session_id, create=True)
        assert folder is not None  # made when missing
        try:
            flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(path.name, flags, 0o644, dir_fd=folder)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                state = self._fold_locked(fd, path, ref)
                stored = record.model_copy(update={"seq": state.state.last_seq + 1})
                reason = check(state.state, stored, stored.at)
                if reason is not None:
                    raise TaskTransitionRefused(reason)
                line = encode(stored)
                write_all(fd, line)
                os.fsync(fd)
                with self._cache_lock:
                    fold_into(state.state, [stored], first_line=state.lines + 1)
                    state.length += len(line)
                    state.lines += 1
                    self._cache[path] = state
            finally:
                os.close(fd)  # releases the lock
            if state.lines == 1:  # a new file: its entry made durable
                os.fsync(folder)
        finally:
            os.close(folder)
        return stored

    def list(self, session_id: str | None = None) -> builtins.list[TaskRef]:
        if session_id is not None and session_problem(session_id) is not None:
            return []
        root = self._dir.open(create=False)
        if root is None:
            return []
        refs: builtins.list[TaskRef] = []
        try:
            if session_id is not None:
                sessions = [session_id]
            else:
                with os.scandir(root) as entries:
                    sessions = sorted(e.name for e in entries if session_problem(e.name) is None)
            for session in sessions:
                folder = open_listed(root, session)  # a link or a file: no logs there
                if folder is None:
                    continue
                try:
                    with os.scandir(folder) as entries:
                        files = sorted(e.name for e in entries if e.is_file(follow_symlinks=False))
                finally:
                    os.close(folder)
                for file in files:
                    name = file[: -len(WAL_SUFFIX)]
                    if file.endswith(WAL_SUFFIX) and name_problem(name) is None:
                        refs.append(TaskRef(session, name))
        finally:
            os.close(root)
        return refs

    def _fold_locked(self, fd: int, path: Path, ref: str) -> _Folded:
        """The folded state of the whole log (the lock held): the cached prefix, then what
        was appended since; a torn tail is cut off."""
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TaskLogCorrupt(ref, "not a regular file")
        with self._cache_lock:
            cached = self._cache.get(path)
        if (
            cached is None
            or (cached.device, cached.inode) != (info.st_dev, info.st_ino)
            or info.st_size < cached.length
        ):
            cached = _Folded(info.st_dev, info.st_ino, 0, 0, TaskState())
        else:
            cached = _Folded(
                cached.device, cached.inode, cached.length, cached.lines, cached.state.copy()
            )
        tail = os.pread(fd, info.st_size - cached.length, cached.length)
        parsed = parse(tail, first_line=cached.lines + 1)
        if parsed.corrupt_line is not None:
            raise TaskLogCorrupt(ref, parsed.problems[0])
        problem = fold_into(cached.state, parsed.records, first_line=cached.lines + 1)
        if problem is not None:
            raise TaskLogCorrupt(ref, problem)
        cached.length += parsed.valid_bytes
        cached.lines += len(parsed.records)
        if parsed.torn:
            os.ftruncate(fd, cached.length)
            os.fsync(fd)
        return cached
