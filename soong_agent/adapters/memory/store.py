"""The memory folder on disk: `MEMORY.md` and `<name>.md` directly in user/, feedback/, reference/.

Every path is checked twice: its text by the domain's path policy (`check_path`), then, when it
is opened, by the kernel (`files`: ``O_NOFOLLOW`` relative to the folder's descriptor, nothing
but regular files, atomic writes). The index is rebuilt from the files after each change; a
crash between the two leaves a stale index, which the next store's first operation
(`repair_index`) rebuilds. Processes sharing the folder take an `flock` on it: exclusive to
change it, shared to read it. The consolidation lock is a file of its own in the folder
(`consolidation_lock`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from soong_agent.adapters.memory import codec
from soong_agent.adapters.memory.consolidation_lock import ConsolidationLockFile
from soong_agent.adapters.memory.files import (
    DIR_FLAGS,
    DIR_MODE,
    OpenFolder,
    read_text,
    remove_temp_files,
    unlink,
    write_atomic,
)
from soong_agent.domain.memory.index import render_index
from soong_agent.domain.memory.paths import (
    INDEX_FILE,
    NAME_RULE,
    SUFFIX,
    check_name,
    check_path,
    is_temp_file,
    memory_path,
    name_of_file,
)
from soong_agent.ports.memory import (
    MEMORY_CATEGORIES,
    ConsolidationClaim,
    Memory,
    MemoryCatalogue,
    MemoryCategory,
    MemoryEntry,
    MemoryFileInvalid,
    MemoryNotFound,
    MemoryPathRefused,
)
from soong_agent.ports.system import Clock


@dataclass(frozen=True, slots=True)
class _Found:
    """Where a memory's file is: its folder's descriptor and its path."""

    category: MemoryCategory
    dir_fd: int
    filename: str
    relative: str


class FileMemoryStore:
    """The `MemoryStore` over a folder (`memory.memory_dir`), created on the first write."""

    def __init__(self, root: str | os.PathLike[str], *, clock: Clock | None = None) -> None:
        self._root = Path(os.path.abspath(os.fspath(root)))
        self._clock = clock
        self._lock = threading.RLock()
        self._repaired = False
        self._consolidation = ConsolidationLockFile(str(self._root))

    @property
    def root(self) -> str:
        """The memory folder."""
        return str(self._root)

    # --- the port ------------------------------------------------------------------------

    def catalogue(self) -> MemoryCatalogue:
        self._first_use()
        with self._opened(write=False) as opened:
            return _Catalogue.scan(opened)

    def surely_empty(self) -> bool:
        # lexists: a dangling link or a file in the folder's place is not "empty" (the
        # catalogue reports it)
        return not os.path.lexists(self._root)

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
            write_atomic(folder, memory.name + SUFFIX, target.relative, text)
            for old in found:  # the memory moved to another category
                if old.category != stored.category:
                    unlink(old.dir_fd, old.filename)
            self._write_index(opened)
            return stored

    def delete(self, name: str) -> MemoryEntry:
        check_name(name)
        if self.surely_empty():  # nothing to remove: the folder is not made for the answer
            raise MemoryNotFound(name)
        self._first_use()
        with self._opened(write=True) as opened:
            found = self._find(opened, name)
            if not found:
                raise MemoryNotFound(name)
            removed = self._entry_of(found[0])
            for where in found:
                unlink(where.dir_fd, where.filename)
            self._write_index(opened)
            return removed

    def repair_index(self) -> bool:
        self._repaired = True
        with self._lock:
            if not self._root.is_dir():
                return False
            with self._opened(write=True) as opened:
                for category in MEMORY_CATEGORIES:
                    remove_temp_files(opened, category)
                return self._write_index(opened)

    def last_consolidation(self) -> float | None:
        return self._consolidation.last_pass()

    def consolidation_lock(self) -> AbstractContextManager[ConsolidationClaim | None]:
        return self._consolidation.held()

    # --- helpers -------------------------------------------------------------------------

    def _first_use(self) -> None:
        """Repair the index once per store, before its first operation (a crash last time)."""
        if not self._repaired:
            self.repair_index()

    def _now(self) -> dt.datetime:
        return codec.utc(self._clock.now() if self._clock is not None else time.time())

    @contextlib.contextmanager
    def _opened(self, *, write: bool) -> Iterator[OpenFolder]:
        """The memory folder opened and locked (exclusively to `write`, which creates it)."""
        with self._lock:
            if write:
                self._root.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            try:
                root_fd = os.open(self._root, DIR_FLAGS)
            except FileNotFoundError:
                root_fd = -1
            except NotADirectoryError:
                raise MemoryPathRefused(str(self._root), "the memory folder is a file") from None
            if root_fd < 0:  # nothing stored yet: an empty folder for the reader
                yield OpenFolder(-1)
                return
            opened = OpenFolder(root_fd)
            try:
                fcntl.flock(root_fd, fcntl.LOCK_EX if write else fcntl.LOCK_SH)
                yield opened
            finally:
                opened.close()

    def _find(self, opened: OpenFolder, name: str) -> list[_Found]:
        """Every file of the memory `name` (normally one), in category order. A category
        folder that is refused (a symbolic link) is not looked into: writing there fails when
        it is opened, the catalogue reports it, the other folders still work."""
        if opened.root_fd < 0:
            return []
        found: list[_Found] = []
        filename = name + SUFFIX
        for category in MEMORY_CATEGORIES:
            try:
                folder = opened.folder(category, create=False)
            except MemoryPathRefused:
                continue
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
        text, mtime = read_text(where.dir_fd, where.filename, where.relative)
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

    def _write_index(self, opened: OpenFolder) -> bool:
        """Write `MEMORY.md` from the files if it differs; True when it did."""
        check_path(INDEX_FILE)
        text = render_index(_Catalogue.scan(opened).entries)
        try:
            current, _ = read_text(opened.root_fd, INDEX_FILE, INDEX_FILE)
        except (FileNotFoundError, MemoryPathRefused, MemoryFileInvalid):
            current = None  # missing, a link or not text: replaced by the real index
        if current == text:
            return False
        write_atomic(opened.root_fd, INDEX_FILE, INDEX_FILE, text, replace_link=True)
        return True


class _Catalogue:
    """A scan of the category folders."""

    @staticmethod
    def scan(opened: OpenFolder) -> MemoryCatalogue:
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
                    text, mtime = read_text(folder, filename, relative)
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


__all__ = ["FileMemoryStore"]
