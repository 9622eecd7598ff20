"""Low-level file access that cannot be redirected by symlinks swapped in after a check.

A checked path is opened one component at a time from its root folder, each folder with
``O_NOFOLLOW | O_DIRECTORY`` relative to the descriptor of the one before (``openat``), and the
last component with ``O_NOFOLLOW``. If any component has become a symlink since the check, the
open fails and `SandboxViolation` is raised; nothing outside the root is ever touched.
POSIX only (Linux, macOS).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass

from soong_agent.ports.errors import SandboxViolation

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK  # O_NONBLOCK: a FIFO never blocks the open
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK  # truncation waits for the checks
SKIPPED_DIRS = frozenset({".git", "node_modules", ".venv", "__pycache__"})
_CHUNK = 1 << 20


def swapped_error(display: str) -> SandboxViolation:
    return SandboxViolation(
        f"access to {display!r} refused: a component of the path is a symbolic link that "
        "cannot be followed safely (swapped in after the path was checked, or a loop)"
    )


def _is_symlink_at(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_at(dir_fd: int, name: str, flags: int, mode: int, display: str) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as exc:
        # O_NOFOLLOW on a symlink fails with ELOOP; with O_DIRECTORY, Linux says ENOTDIR.
        if exc.errno == errno.ELOOP or (
            exc.errno == errno.ENOTDIR and _is_symlink_at(dir_fd, name)
        ):
            raise swapped_error(display) from None
        raise


def _open_dir_at(dir_fd: int, name: str, *, make: bool, display: str) -> int:
    try:
        return _open_at(dir_fd, name, DIR_FLAGS, 0, display)
    except FileNotFoundError:
        if not make:
            raise
    # FileExistsError: made by someone else meanwhile; the open below checks whatever it is.
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o777, dir_fd=dir_fd)
    return _open_at(dir_fd, name, DIR_FLAGS, 0, display)


def open_root(root: str) -> int:
    """A descriptor for a (resolved) root folder."""
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def open_beneath(
    root: str,
    parts: Sequence[str],
    flags: int,
    *,
    display: str,
    mode: int = 0o666,
    make_parents: bool = False,
) -> int:
    """Open ``root/parts...`` without following a symlink anywhere below `root`.

    `make_parents` creates missing folders on the way (``mkdirat``, so they land below `root`).
    Raises SandboxViolation when a component is a symlink, else the usual OSError.
    """
    if not parts:
        raise ValueError("open_beneath needs at least one path component below the root")
    fd = open_root(root)
    try:
        for part in parts[:-1]:
            next_fd = _open_dir_at(fd, part, make=make_parents, display=display)
            os.close(fd)
            fd = next_fd
        return _open_at(fd, parts[-1], flags, mode, display)
    finally:
        os.close(fd)


def read_all(fd: int, max_bytes: int | None = None) -> bytes:
    """Read to the end of `fd`, or its first `max_bytes` bytes."""
    chunks: list[bytes] = []
    remaining = max_bytes
    while remaining is None or remaining > 0:
        size = _CHUNK if remaining is None else min(_CHUNK, remaining)
        chunk = os.read(fd, size)
        if not chunk:
            break
        chunks.append(chunk)
        if remaining is not None:
            remaining -= len(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd`."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


@dataclass(frozen=True, slots=True)
class WalkedFile:
    """A file met by `walk_files`; `dir_fd` (its folder) is valid only until the walk moves on."""

    rel: str
    name: str
    dir_fd: int
    is_symlink: bool


def _sorted_entries(fd: int) -> list[tuple[str, bool, bool]]:
    """(name, is_dir, is_symlink) of regular files, symlinks and folders; path order."""
    out: list[tuple[str, bool, bool]] = []
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                is_link = entry.is_symlink()
                if is_dir or is_link or entry.is_file(follow_symlinks=False):
                    out.append((entry.name, is_dir, is_link))
            except OSError:
                continue
    # "a.py" sorts before "a/x.py" in full paths because "." < "/": sorting folders as
    # "name/" makes the depth-first walk yield paths in plain lexicographic order.
    out.sort(key=lambda item: item[0] + "/" if item[1] else item[0])
    return out


def walk_files(
    top: str,
    *,
    prune: Callable[[str, str], bool],
    max_depth: int | None = None,
    stop: threading.Event | None = None,
) -> Generator[WalkedFile, None, None]:
    """Regular files and symlinks below the folder `top`, in lexicographic order of their paths.

    Folders are opened with ``O_NOFOLLOW`` relative to their parent, so symlinked folders are
    never entered; `SKIPPED_DIRS` are not entered either. ``prune(abs_path, name)`` returning
    True hides an entry (and, for a folder, everything below it). `max_depth` counts segments
    below `top`; `stop` ends the walk early when set.
    """
    top_fd = os.open(top, DIR_FLAGS)
    stack: list[tuple[int, str, Iterator[tuple[str, bool, bool]], int]] = []
    try:
        stack.append((top_fd, "", iter(_sorted_entries(top_fd)), 1))
    except OSError:
        os.close(top_fd)
        raise
    try:
        while stack:
            if stop is not None and stop.is_set():
                return
            fd, prefix, entries, depth = stack[-1]
            item = next(entries, None)
            if item is None:
                os.close(fd)
                stack.pop()
                continue
            name, is_dir, is_link = item
            rel = prefix + name
            if prune(f"{top.rstrip('/')}/{rel}", name):
                continue
            if not is_dir:
                yield WalkedFile(rel=rel, name=name, dir_fd=fd, is_symlink=is_link)
                continue
            if name in SKIPPED_DIRS or (max_depth is not None and depth >= max_depth):
                continue
            try:
                sub_fd = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError:  # vanished, unreadable or swapped for a symlink: skip it
                continue
            try:
                children = _sorted_entries(sub_fd)
            except OSError:
                os.close(sub_fd)
                continue
            stack.append((sub_fd, rel + "/", iter(children), depth + 1))
    finally:
        for fd, *_ in stack:
            os.close(fd)
