"""The memory folder's files, opened so that no symbolic link is ever followed.

The category folders and files are opened relative to the memory folder's descriptor with
``O_NOFOLLOW``; `lstat` / `fstat` refuse symbolic links, files that are not regular and memory
files with other hard links. A file is written whole or not at all: a temporary file in the
same folder, `fsync`, `rename` over the old one, `fsync` of the folder.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat

from soong_agent.domain.memory.paths import INDEX_FILE, TEMP_PREFIX, TEMP_SUFFIX, is_temp_file
from soong_agent.ports.memory import MemoryCategory, MemoryFileInvalid, MemoryPathRefused

MAX_FILE_BYTES = 256 * 1024
"""A memory file (or index) larger than this is not read."""

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_MODE = 0o600
DIR_MODE = 0o700


class OpenFolder:
    """The memory folder and its category folders, opened for one operation."""

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd
        self.folders: dict[MemoryCategory, int | None] = {}

    def close(self) -> None:
        for fd in self.folders.values():
            if fd is not None:
                os.close(fd)
        os.close(self.root_fd)

    def folder(self, category: MemoryCategory, *, create: bool) -> int | None:
        """The category folder's descriptor (None: it does not exist and `create` is off).
        MemoryPathRefused when a symbolic link or something else than a folder is there."""
        fd = self.folders.get(category)
        if fd is not None:
            return fd
        shown = f"{category}/"
        try:
            before = os.lstat(category, dir_fd=self.root_fd)
        except FileNotFoundError:
            if not create:
                return None
            with contextlib.suppress(FileExistsError):
                os.mkdir(category, DIR_MODE, dir_fd=self.root_fd)
            before = os.lstat(category, dir_fd=self.root_fd)
        if stat.S_ISLNK(before.st_mode):
            raise MemoryPathRefused(shown, "the folder is a symbolic link")
        if not stat.S_ISDIR(before.st_mode):
            raise MemoryPathRefused(shown, "it is not a folder")
        try:
            fd = os.open(category, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=self.root_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise MemoryPathRefused(shown, "the folder was replaced while opening it") from None
            raise
        after = os.fstat(fd)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
            os.close(fd)
            raise MemoryPathRefused(shown, "the folder was replaced while opening it")
        self.folders[category] = fd
        return fd


def read_text(dir_fd: int, filename: str, relative: str) -> tuple[str, float]:
    """A regular file's text (UTF-8) and modification time, never through a symbolic link;
    FileNotFoundError when it is not there."""
    try:
        fd = os.open(filename, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise MemoryPathRefused(relative, "it is a symbolic link") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise MemoryPathRefused(relative, "it is not a regular file")
        if info.st_nlink > 1 and relative != INDEX_FILE:
            raise MemoryPathRefused(relative, f"it has {info.st_nlink} hard links")
        if info.st_size > MAX_FILE_BYTES:
            raise MemoryFileInvalid(relative, f"it is larger than {MAX_FILE_BYTES} bytes")
        chunks: list[bytes] = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8"), info.st_mtime
    except UnicodeDecodeError as exc:
        raise MemoryFileInvalid(relative, f"it is not UTF-8 text ({exc.reason})") from None


def write_atomic(
    dir_fd: int, filename: str, relative: str, text: str, *, replace_link: bool = False
) -> None:
    """`text` as the file `filename` of the folder, whole or not at all. What stands at
    that name must be a regular file (or nothing); a symbolic link is refused, unless
    `replace_link` (the index: the link itself is replaced, never followed)."""
    try:
        info = os.lstat(filename, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISLNK(info.st_mode) and not replace_link:
            raise MemoryPathRefused(relative, "a symbolic link is in its place")
        if not stat.S_ISREG(info.st_mode) and not stat.S_ISLNK(info.st_mode):
            raise MemoryPathRefused(relative, "something that is not a regular file is there")
    temp = f"{TEMP_PREFIX}{filename}.{secrets.token_hex(6)}{TEMP_SUFFIX}"
    fd = os.open(temp, _CREATE_FLAGS, _FILE_MODE, dir_fd=dir_fd)
    try:
        try:
            data = text.encode("utf-8")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, filename, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


def unlink(dir_fd: int, filename: str) -> None:
    """Remove a file of the folder (gone already is fine) and make that durable."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(filename, dir_fd=dir_fd)
    os.fsync(dir_fd)


def remove_temp_files(opened: OpenFolder, category: MemoryCategory) -> None:
    """Remove what an interrupted write left in a category folder (the writers are locked out)."""
    try:
        folder = opened.folder(category, create=False)
    except MemoryPathRefused:
        return  # reported by the catalogue
    if folder is None:
        return
    for filename in os.listdir(folder):
        if is_temp_file(filename):
            info = os.lstat(filename, dir_fd=folder)
            if stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode):
                os.unlink(filename, dir_fd=folder)
