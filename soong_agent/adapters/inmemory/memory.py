"""A fake `MemoryStore`: the memory folder as a dict, with the real path policy and index."""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
from collections.abc import Iterable, Iterator

from soong_agent.adapters.inmemory.fakes import FixedClock
from soong_agent.domain.memory.index import render_index
from soong_agent.domain.memory.paths import INDEX_FILE, check_name, check_path, memory_path
from soong_agent.ports.errors import UsageError
from soong_agent.ports.memory import (
    MEMORY_CATEGORIES,
    ConsolidationClaim,
    Memory,
    MemoryCatalogue,
    MemoryEntry,
    MemoryNotFound,
    MemoryPathRefused,
)
from soong_agent.ports.system import Clock


class InMemoryMemoryStore:
    """Memories by path (``user/NAME.md``) and the index text, like the folder on disk.

    Strict like the real store: names and categories go through the same path policy, and a
    path in `symlinks` stands for a symbolic link in the folder (refused to read and write).
    `files` and `index_text` are what the folder holds; `put_file` places a file without
    updating the index, as a crash between the two would leave it. Times come from `clock`
    (a `FixedClock` by default). The consolidation lock is a lock of this store: a second
    taker (another task, or `restart()`'s store standing for another process) gets None while
    it is held; `last_pass` is its stamp (None: never).
    """

    def __init__(self, memories: Iterable[Memory] = (), *, clock: Clock | None = None) -> None:
        self._clock: Clock = clock or FixedClock()
        self.files: dict[str, Memory] = {}
        self.symlinks: set[str] = set()
        self.index_text: str | None = None
        self.last_pass: float | None = None
        self._repaired = False
        self._folder_made = False
        self._consolidating = threading.Lock()
        for memory in memories:
            self.write(memory)

    # --- the port ------------------------------------------------------------------------

    def catalogue(self) -> MemoryCatalogue:
        self._first_use()
        entries: list[MemoryEntry] = []
        problems: list[str] = []
        seen: dict[str, str] = {}
        for path in sorted(self.symlinks):
            problems.append(f"{path}: it is a symbolic link; skipped")
        order = {category: i for i, category in enumerate(MEMORY_CATEGORIES)}
        ranked = sorted(self.files.items(), key=lambda kv: (order[kv[1].category], kv[0]))
        for path, memory in ranked:
            if path in self.symlinks:
                continue
            if memory.name in seen:
                problems.append(f"{path}: {memory.name!r} is also {seen[memory.name]}; skipped")
                continue
            seen[memory.name] = path
            entries.append(_entry(memory, path))
        return MemoryCatalogue(tuple(entries), tuple(problems))

    def surely_empty(self) -> bool:
        return (
            not self.files
            and not self.symlinks
            and self.index_text is None
            and not self._folder_made
        )

    def read(self, name: str) -> Memory:
        check_name(name)
        self._first_use()
        found = self._find(name)
        if not found:
            raise MemoryNotFound(name)
        return self._get(found[0])

    def write(self, memory: Memory) -> Memory:
        target = memory_path(memory.category, memory.name)
        self._first_use()
        if target.relative in self.symlinks:
            raise MemoryPathRefused(target.relative, "a symbolic link is in its place")
        found = self._find(memory.name)
        created = memory.created
        if found:
            created = self._get(found[0]).created
        now = dt.datetime.fromtimestamp(int(self._clock.now()), tz=dt.UTC)
        stored = Memory(
            name=memory.name,
            description=" ".join(memory.description.split()),
            category=check_path(target.relative).category or memory.category,
            body=memory.body.strip(),
            created=created or now,
            updated=now,
        )
        for path in found:
            del self.files[path]
        self.files[target.relative] = stored
        self._write_index()
        return stored

    def delete(self, name: str) -> MemoryEntry:
        check_name(name)
        self._first_use()
        found = self._find(name)
        if not found:
            raise MemoryNotFound(name)
        removed = _entry(self._get(found[0]), found[0])
        for path in found:
            del self.files[path]
        self._write_index()
        return removed

    def repair_index(self) -> bool:
        self._repaired = True
        if not self.files and self.index_text is None:
            return False
        return self._write_index()

    def last_consolidation(self) -> float | None:
        return self.last_pass

    @contextlib.contextmanager
    def consolidation_lock(self) -> Iterator[ConsolidationClaim | None]:
        self._folder_made = True  # the real store makes the folder for its lock file
        if not self._consolidating.acquire(blocking=False):
            yield None
            return
        held = True

        def stamp(when: float) -> None:
            if not held:
                raise UsageError("the consolidation lock is no longer held")
            self.last_pass = when or None

        try:
            yield ConsolidationClaim(self.last_pass, stamp)
        finally:
            held = False
            self._consolidating.release()

    # --- for tests -------------------------------------------------------------------------

    def put_file(self, memory: Memory) -> None:
        """Place a memory's file, stamped now, without updating the index."""
        target = memory_path(memory.category, memory.name)
        now = dt.datetime.fromtimestamp(int(self._clock.now()), tz=dt.UTC)
        self.files[target.relative] = Memory(
            name=memory.name,
            description=memory.description,
            category=memory.category,
            body=memory.body.strip(),
            created=memory.created or now,
            updated=memory.updated or now,
        )

    def restart(self) -> None:
        """As if a new process opened the folder: the index is checked again on first use."""
        self._repaired = False

    # --- helpers -------------------------------------------------------------------------

    def _first_use(self) -> None:
        if not self._repaired:
            self.repair_index()

    def _find(self, name: str) -> list[str]:
        found = []
        for category in MEMORY_CATEGORIES:
            path = f"{category}/{name}.md"
            if path in self.symlinks:
                raise MemoryPathRefused(path, "it is a symbolic link")
            if path in self.files:
                found.append(path)
        return found

    def _get(self, path: str) -> Memory:
        return self.files[path]

    def _write_index(self) -> bool:
        check_path(INDEX_FILE)
        text = render_index(self._entries())
        if text == self.index_text:
            return False
        self.index_text = text
        return True

    def _entries(self) -> list[MemoryEntry]:
        """The entries the index lists (without running the first-use repair)."""
        seen: set[str] = set()
        entries = []
        order = {category: i for i, category in enumerate(MEMORY_CATEGORIES)}
        for path, memory in sorted(
            self.files.items(), key=lambda kv: (order[kv[1].category], kv[0])
        ):
            if path in self.symlinks or memory.name in seen:
                continue
            seen.add(memory.name)
            entries.append(_entry(memory, path))
        return entries


def _entry(memory: Memory, path: str) -> MemoryEntry:
    assert memory.created is not None and memory.updated is not None
    return MemoryEntry(
        name=memory.name,
        description=memory.description,
        category=memory.category,
        path=path,
        created=memory.created,
        updated=memory.updated,
    )
