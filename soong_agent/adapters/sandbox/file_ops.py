"""The single-file operations of `LocalFileSystem` (SBX-1): read, size, atomic write and
listing of one path the `PathPolicy` checked, each a handful of syscalls opened beneath the
allowed root without following a symlink (see `local_fs`)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence

from soong_agent.adapters.durable_files import read_all
from soong_agent.adapters.sandbox import atomic_write, safe_io
from soong_agent.adapters.sandbox.checked_io import (
    LinkGuard,
    hard_link_violation,
    open_in_project,
    os_error,
    sensitive_link_violation,
    with_display,
)
from soong_agent.adapters.sandbox.paths import PathPolicy
from soong_agent.domain.permissions.targets import relative_parts
from soong_agent.ports.errors import SandboxViolation, ToolInputError
from soong_agent.ports.filesystem import DirEntry

# Opens the file a write will replace, to check it: never creates or truncates it (and
# `open_beneath` never follows a symlink).
_PROBE_FLAGS = os.O_WRONLY | os.O_NONBLOCK


def read_bytes(
    policy: PathPolicy, path: str, max_bytes: int | None, *, sole_link: bool = False
) -> bytes:
    """The file's bytes (the first `max_bytes` of them when given), checked by `policy`;
    with `sole_link`, a file with more than one hard link is refused."""
    display = policy.display(path)
    resolved = policy.check_read(path)
    try:
        before = os.stat(resolved, follow_symlinks=False)
    except OSError as exc:
        raise with_display(exc, display) from None
    if stat.S_ISDIR(before.st_mode):
        raise os_error(IsADirectoryError, errno.EISDIR, display)
    if stat.S_ISLNK(before.st_mode):  # it resolved to a non-link a moment ago
        raise safe_io.swapped_error(display)
    if not stat.S_ISREG(before.st_mode):
        raise ToolInputError(f"{display!r} is not a regular file")
    fd = open_in_project(policy, resolved, safe_io.READ_FLAGS, display)
    try:
        after = os.fstat(fd)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            raise SandboxViolation(
                f"read of {display!r} refused: the file was replaced between the check and the open"
            )
        if LinkGuard(policy).is_sensitive_link(after):
            raise sensitive_link_violation(display, "read of")
        if sole_link and after.st_nlink > 1:
            raise hard_link_violation(display, "read of")
        if max_bytes is not None and max_bytes <= 0:
            return b""
        return read_all(fd, max_bytes)
    finally:
        os.close(fd)


def file_size(policy: PathPolicy, path: str) -> int:
    """The size of the file at `path`, checked by `policy`."""
    display = policy.display(path)
    resolved = policy.check_read(path)
    fd = open_in_project(policy, resolved, safe_io.READ_FLAGS, display)
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if stat.S_ISDIR(st.st_mode):
        raise os_error(IsADirectoryError, errno.EISDIR, display)
    if LinkGuard(policy).is_sensitive_link(st):
        raise sensitive_link_violation(display, "read of")
    return st.st_size


def write_text(policy: PathPolicy, path: str, text: str) -> None:
    """Replace the file at `path` atomically with `text` (UTF-8), checked by `policy`."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        display = policy.display(path)
        raise ToolInputError(f"the text for {display!r} is not valid UTF-8: {exc}") from None
    write_bytes(policy, path, data)


def write_bytes(policy: PathPolicy, path: str, data: bytes) -> None:
    """Replace the file at `path` atomically with exactly `data`, checked by `policy`."""
    display = policy.display(path)
    resolved, root = policy.check_write(path)
    parts = relative_parts(resolved, root)
    if not parts:
        raise os_error(IsADirectoryError, errno.EISDIR, display)
    try:
        # The target's folder, walked from the root without following a symlink (missing
        # folders made on the way); the trailing "." opens the last folder itself.
        dir_fd = safe_io.open_beneath(
            root, [*parts[:-1], "."], safe_io.DIR_FLAGS, display=display, make_parents=True
        )
    except OSError as exc:
        raise with_display(exc, display) from None
    try:
        mode = _old_mode(root, parts, dir_fd, display)
        atomic_write.replace_file(dir_fd, parts[-1], data, mode=mode)
    except OSError as exc:
        raise with_display(exc, display) from None
    finally:
        os.close(dir_fd)


def remove_file(policy: PathPolicy, path: str) -> None:
    """Remove the file at `path`, checked by `policy` as a write (symlinks followed as a write
    follows them, within the write roots): its folder is opened beneath the write root without
    following a symlink swapped in since the check, and a folder is refused."""
    display = policy.display(path)
    resolved, root = policy.check_write(path)
    parts = relative_parts(resolved, root)
    if not parts:
        raise os_error(IsADirectoryError, errno.EISDIR, display)
    try:
        dir_fd = safe_io.open_beneath(root, [*parts[:-1], "."], safe_io.DIR_FLAGS, display=display)
    except OSError as exc:
        raise with_display(exc, display) from None
    try:
        st = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            raise os_error(IsADirectoryError, errno.EISDIR, display)
        os.unlink(parts[-1], dir_fd=dir_fd)
        os.fsync(dir_fd)
    except OSError as exc:
        raise with_display(exc, display) from None
    finally:
        os.close(dir_fd)


def _old_mode(root: str, parts: Sequence[str], dir_fd: int, display: str) -> int | None:
    """The permission mode of the file being replaced, None when there is none yet.

    The file is opened for writing (not created, not truncated) beneath `root` as the
    direct write did: a symlink anywhere on the way is refused, and so are a folder, a file
    this user may not write, anything but a regular file, a file with more than one hard
    link, and one that is not the file at that name in `dir_fd` (the folder renamed in).
    """
    try:
        fd = safe_io.open_beneath(root, parts, _PROBE_FLAGS, display=display)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ToolInputError(f"{display!r} is not a regular file")
    # A hard link's other name may be a file outside the sandbox.
    if st.st_nlink > 1:
        raise hard_link_violation(display)
    there = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
    if (there.st_dev, there.st_ino) != (st.st_dev, st.st_ino):
        raise SandboxViolation(
            f"write to {display!r} refused: the file or a folder above it was replaced "
            "while it was being checked"
        )
    return stat.S_IMODE(st.st_mode)


def list_dir(policy: PathPolicy, path: str) -> list[DirEntry]:
    """The entries of the folder at `path` by name, sensitive ones and temporaries left out."""
    display = policy.display(path)
    resolved = policy.check_read(path, action="listing of")
    fd = open_in_project(policy, resolved, safe_io.DIR_FLAGS, display)
    prefix = "" if resolved == policy.project else policy.relative(resolved) + "/"
    out: list[DirEntry] = []
    guard = LinkGuard(policy)
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise os_error(NotADirectoryError, errno.ENOTDIR, display)
        with os.scandir(fd) as scan:
            for entry in scan:
                absolute = f"{resolved.rstrip('/')}/{entry.name}"
                if policy.entry_is_sensitive(absolute, entry.name):
                    continue
                if atomic_write.is_temp_name(entry.name):
                    continue  # a write in progress, or one a crash cut short
                described = _describe(policy, entry, absolute, guard)
                if described is None:
                    continue
                is_dir, size = described
                out.append(DirEntry(path=prefix + entry.name, is_dir=is_dir, size=size))
    finally:
        os.close(fd)
    out.sort(key=lambda item: item.path)
    return out


def _describe(
    policy: PathPolicy, entry: os.DirEntry[str], absolute: str, guard: LinkGuard
) -> tuple[bool, int] | None:
    """(is_dir, size) of a listed entry, None to leave it out (a hard link to a secret).

    A symlink counts only if its target is readable.
    """
    try:
        if entry.is_symlink():
            target = policy.check_read(absolute)
            st = os.stat(target)
        else:
            st = entry.stat(follow_symlinks=False)
    except (OSError, SandboxViolation):
        return False, 0
    if guard.is_sensitive_link(st):
        return None
    if stat.S_ISDIR(st.st_mode):
        return True, 0
    return False, st.st_size
