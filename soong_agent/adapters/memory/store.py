"""The memory folder on disk: `MEMORY.md` and `<name>.md` directly in user/, feedback/, reference/.

Every path is checked twice: its text by the domain's path policy (`check_path`), then, when it
is opened, by the kernel: the category folders and files are opened relative to the memory
folder's descriptor with ``O_NOFOLLOW``, and `lstat` / `fstat` refuse symbolic links, files that
are not regular and memory files with other hard links. A file is written whole or not at all: a
temporary file in the same folder, `fsync`, `rename` over the old one, `fsync` of the folder.
The index is rebuilt from the files after each change; a crash between the two leaves a stale
index, which the next store's first operation (`repair_index`) rebuilds. Processes sharing the
folder take an `flock` on it: exclusive to change it, shared to read it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import os
import secrets
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from soong_agent.adapters.memory import codec
from soong_agent.domain.memory.index import render_index
from soong_agent.domain.memory.paths import (
    INDEX_FILE,
    NAME_RULE,
    SUFFIX,
    TEMP_PREFIX,
    TEMP_SUFFIX,
    check_name,
    check_path,
    is_temp_file,
    memory_path,
    name_of_file,
)
from soong_agent.ports.memory import (
    MEMORY_CATEGORIES,
    Memory,
    MemoryCatalogue,
    MemoryCategory,
    MemoryEntry,
    MemoryFileInvalid,
    MemoryNotFound,
    MemoryPathRefused,
)
from soong_agent.ports.system import Clock

MAX_FILE_BYTES = 256 * 1024
"""A memory file (or index) larger than this is not read."""

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_MODE = 0o600
_DIR_MODE = 0o700


@dataclass(frozen=True, slots=True)
class _Found:
    """Where a memory's file is: its folder's descriptor and its path."""

    category: MemoryCategory
    dir_fd: int
    filename: str
    relative: str


class _Open:
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
                os.mkdir(category, _DIR_MODE, dir_fd=self.root_fd)
            before = os.lstat(category, dir_fd=self.root_fd)
        if stat.S_ISLNK(before.st_mode):
            raise MemoryPathRefused(shown, "the folder is a symbolic link")
        if not stat.S_ISDIR(before.st_mode):
            raise MemoryPathRefused(shown, "it is not a folder")
        try:
            fd = os.open(category, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=self.root_fd)
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


class FileMemoryStore:
    """The `MemoryStore` over a folder (`memory.memory_dir`), created on the first write."""

    def __init__(self, root: str | os.PathLike[str], *, clock: Clock | None = None) -> None:
        self._root = Path(os.path.abspath(os.fspath(root)))
        self._clock = clock
        self._lock = threading.RLock()
        self._repaired = False

    @property
    def root(self) -> str:
        """The memory folder."""
        return str(self._root)

    # --- the port ------------------------------------------------------------------------

    def catalogue(self) -> MemoryCatalogue:
        self._first_use()
        with self._opened(write=False) as opened:
            return _Catalogue.scan(opened)

    def read(self, name: str) -> Memory:
        check_name(name)
        self._first_use()
        with self._opened(write=False) as opened:
            found = self._find(opened, name)
            if not found:
                raise MemoryNotFound(name)
            return self._load(found[0])

    def write(self, memory: Memory) -> Memory:
        target = memory_path(memory.category, memory.name)
        self._first_use()
        with self._opened(write=True) as opened:
            found = self._find(opened, memory.name)
            created = memory.created
            for old in found:  # a file that is not a valid memory is replaced
                try:
                    created = self._load(old).created
                except MemoryFileInvalid:
                    continue
                break
            now = self._now()
            stored = Memory(
                name=memory.name,
                description=" ".join(memory.description.split()),
                category=check_path(target.relative).category or memory.category,
                body=memory.body.strip(),
                created=created or now,
                updated=now,
            )
            folder = opened.folder(stored.category, create=True)
            assert folder is not None
            text = codec.dump(stored, created=stored.created or now, updated=now)
            _write_atomic(folder, memory.name + SUFFIX, target.relative, text)
            for old in found:  # the memory moved to another category
                if old.category != stored.category:
                    _unlink(old)
            self._write_index(opened)
            return stored

    def delete(self, name: str) -> MemoryEntry:
        check_name(name)
        self._first_use()
        with self._opened(write=True) as opened:
            found = self._find(opened, name)
            if not found:
                raise MemoryNotFound(name)
            removed = self._entry_of(found[0])
            for where in found:
                _unlink(where)
            self._write_index(opened)
            return removed

    def repair_index(self) -> bool:
        self._repaired = True
        with self._lock:
            if not self._root.is_dir():
                return False
            with self._opened(write=True) as opened:
                for category in MEMORY_CATEGORIES:
                    _remove_temp_files(opened, category)
                return self._write_index(opened)

    # --- helpers -------------------------------------------------------------------------

    def _first_use(self) -> None:
        """Repair the index once per store, before its first operation (a crash last time)."""
        if not self._repaired:
            self.repair_index()

    def _now(self) -> dt.datetime:
        return codec.utc(self._clock.now() if self._clock is not None else time.time())

    @contextlib.contextmanager
    def _opened(self, *, write: bool) -> Iterator[_Open]:
        """The memory folder opened and locked (exclusively to `write`, which creates it)."""
        with self._lock:
            if write:
                self._root.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
            try:
                root_fd = os.open(self._root, _DIR_FLAGS)
            except FileNotFoundError:
                root_fd = -1
            except NotADirectoryError:
                raise MemoryPathRefused(str(self._root), "the memory folder is a file") from None
            if root_fd < 0:  # nothing stored yet: an empty folder for the reader
                yield _Open(-1)
                return
            opened = _Open(root_fd)
            try:
                fcntl.flock(root_fd, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
                yield opened
            finally:
                opened.close()

    def _find(self, opened: _Open, name: str) -> list[_Found]:
        """Every file of the memory `name` (normally one), in category order."""
        if opened.root_fd < 0:
            return []
        found: list[_Found] = []
        filename = name + SUFFIX
        for category in MEMORY_CATEGORIES:
            folder = opened.folder(category, create=False)
            if folder is None:
                continue
            relative = f"{category}/{filename}"
            try:
                os.lstat(filename, dir_fd=folder)
            except FileNotFoundError:
                continue
            found.append(_Found(category, folder, filename, relative))
        return found

    def _load(self, where: _Found) -> Memory:
        text, mtime = _read_text(where.dir_fd, where.filename, where.relative)
        name = where.filename[: -len(SUFFIX)]
        return codec.load(
            text,
            path=where.relative,
            category=where.category,
            name=name,
            fallback=codec.utc(mtime),
        )

    def _entry_of(self, where: _Found) -> MemoryEntry:
        memory = self._load(where)
        return _entry(memory, where.relative)

    def _write_index(self, opened: _Open) -> bool:
        """Write `MEMORY.md` from the files if it differs; True when it did."""
        check_path(INDEX_FILE)
        text = render_index(_Catalogue.scan(opened).entries)
        try:
            current, _ = _read_text(opened.root_fd, INDEX_FILE, INDEX_FILE)
        except (FileNotFoundError, MemoryPathRefused, MemoryFileInvalid):
            current = None  # missing, a link or not text: replaced by the real index
        if current == text:
            return False
        _write_atomic(opened.root_fd, INDEX_FILE, INDEX_FILE, text, replace_link=True)
        return True


class _Catalogue:
    """A scan of the category folders."""

    @staticmethod
    def scan(opened: _Open) -> MemoryCatalogue:
        if opened.root_fd < 0:
            return MemoryCatalogue(())
        entries: list[MemoryEntry] = []
        problems: list[str] = []
        seen: dict[str, str] = {}
        for category in MEMORY_CATEGORIES:
            try:
                folder = opened.folder(category, create=False)
            except MemoryPathRefused as exc:
                problems.append(f"{category}/: {exc.reason}; skipped")
                continue
            if folder is None:
                continue
            for filename in sorted(os.listdir(folder)):
                relative = f"{category}/{filename}"
                if is_temp_file(filename):
                    continue
                name = name_of_file(filename)
                if name is None:
                    problems.append(
                        f"{relative}: not a memory file (NAME{SUFFIX}, NAME being {NAME_RULE}); "
                        "skipped"
                    )
                    continue
                try:
                    text, mtime = _read_text(folder, filename, relative)
                    memory = codec.load(
                        text,
                        path=relative,
                        category=category,
                        name=name,
                        fallback=codec.utc(mtime),
                    )
                except (MemoryPathRefused, MemoryFileInvalid) as exc:
                    problems.append(f"{relative}: {exc.reason}; skipped")
                    continue
                except FileNotFoundError:  # removed by hand since the listing
                    continue
                if name in seen:
                    problems.append(f"{relative}: {name!r} is also {seen[name]}; skipped")
                    continue
                seen[name] = relative
                entries.append(_entry(memory, relative))
        return MemoryCatalogue(tuple(entries), tuple(problems))


def _entry(memory: Memory, relative: str) -> MemoryEntry:
    assert memory.created is not None and memory.updated is not None
    return MemoryEntry(
        name=memory.name,
        description=memory.description,
        category=memory.category,
        path=relative,
        created=memory.created,
        updated=memory.updated,
    )


def _read_text(dir_fd: int, filename: str, relative: str) -> tuple[str, float]:
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


def _write_atomic(
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


def _unlink(where: _Found) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(where.filename, dir_fd=where.dir_fd)
    os.fsync(where.dir_fd)


def _remove_temp_files(opened: _Open, category: MemoryCategory) -> None:
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


__all__ = ["MAX_FILE_BYTES", "FileMemoryStore"]
