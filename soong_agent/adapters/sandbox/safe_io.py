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
from collections.abc import Sequence

from soong_agent.ports.errors import SandboxViolation

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK  # O_NONBLOCK: a FIFO never blocks the open
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK  # truncation waits for the checks


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
