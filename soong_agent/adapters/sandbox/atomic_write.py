"""Replacing a file's content atomically, relative to an open directory descriptor.

The new content goes to a temporary file in the same folder (``.soong-write-<16 hex>.tmp``,
created with ``O_EXCL | O_NOFOLLOW``), is written in full, given its final permission mode and
fsynced; then the temporary is renamed over the target (``renameat``, which never follows a
symlink at the target name) and the folder is fsynced. A crash or kill at any moment leaves the
target with either its old or its new content, never a mix or a truncated file; what it can
leave is a stray temporary, which the next write into that folder removes once it is older than
`STALE_TEMP_GRACE_SECONDS` (a younger one may belong to a write still running).

Paths here are names inside `dir_fd`; finding and checking that folder is the caller's job.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import time

from soong_agent.adapters.durable_files import write_all

TEMP_PREFIX = ".soong-write-"
TEMP_SUFFIX = ".tmp"
TEMP_GLOB = f"{TEMP_PREFIX}*{TEMP_SUFFIX}"
STALE_TEMP_GRACE_SECONDS = 120.0
NEW_FILE_MODE = 0o666  # before the umask, as open(2) with O_CREAT would make it

_TEMP_NAME = re.compile(re.escape(TEMP_PREFIX) + r"[0-9a-f]{16}" + re.escape(TEMP_SUFFIX))
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_NAME_TRIES = 8


def is_temp_name(name: str) -> bool:
    """Whether `name` is one of our temporary files (a write in progress or a crashed one)."""
    return _TEMP_NAME.fullmatch(name) is not None


def remove_stale_temps(dir_fd: int, *, now: float | None = None) -> list[str]:
    """Remove our temporaries in `dir_fd` older than the grace time; the names removed.

    Only regular files with our exact name form, owned by this user, are removed (in a shared
    sticky folder such as /tmp another user's are not ours). One removed meanwhile by another
    writer is skipped.
    """
    cutoff = (time.time() if now is None else now) - STALE_TEMP_GRACE_SECONDS
    removed: list[str] = []
    with os.scandir(dir_fd) as scan:
        candidates = [entry.name for entry in scan if is_temp_name(entry.name)]
    for name in candidates:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed by a concurrent writer
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mtime > cutoff:
            continue
        try:
            os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            continue  # removed by a concurrent writer
        removed.append(name)
    return removed


def replace_file(dir_fd: int, name: str, data: bytes, *, mode: int | None) -> None:
    """Make `name` in `dir_fd` hold exactly `data`, atomically (see the module docstring).

    `mode` is the permission mode to give the file (the old file's); None for a new file, which
    gets the usual ``0o666`` less the umask. Raises OSError (the temporary removed) when any
    step fails; the target is then untouched.
    """
    remove_stale_temps(dir_fd)
    temp, fd = _create_temp(dir_fd, 0o600 if mode is not None else NEW_FILE_MODE)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)  # the rename itself survives a power loss


def _create_temp(dir_fd: int, mode: int) -> tuple[str, int]:
    for _ in range(_NAME_TRIES):
        name = f"{TEMP_PREFIX}{secrets.token_hex(8)}{TEMP_SUFFIX}"
        try:
            return name, os.open(name, _CREATE_FLAGS, mode, dir_fd=dir_fd)
        except FileExistsError:
            continue
    raise FileExistsError(f"could not pick a free temporary file name in {_NAME_TRIES} tries")
