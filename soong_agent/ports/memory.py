"""The memory store port: what the agent keeps across sessions, as Markdown files (MEM-1).

Under `memory.memory_dir` there is the index `MEMORY.md` (one line per memory, rebuilt from the
files) and one file per memory, `<name>.md`, directly in `user/`, `feedback/` or `reference/`,
with a frontmatter of `name`, `description`, `type` (the category), `created` and `updated` (ISO
times). Nothing else is ever written there: the store refuses every other path. Names are
unique across the three folders: saving a memory under a name that exists replaces it (moving it
when its category changed).

The store checks paths and names only; what may be stored at all is the memory policy's call
(`soong_agent.domain.memory.MemoryPolicy`), made before `write`.

The store also keeps the consolidation pass's lock (seed 002 "Dream"): one pass at a
time across processes, and when the last one started.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from soong_agent.ports.errors import RunError, UsageError

MemoryCategory = Literal["user", "feedback", "reference"]
MEMORY_CATEGORIES: tuple[MemoryCategory, ...] = ("user", "feedback", "reference")
"""The three folders, in the order the index lists them."""


@dataclass(frozen=True, slots=True)
class Memory:
    """One memory. `created` and `updated` are set by the store when it writes."""

    name: str
    description: str
    category: MemoryCategory
    body: str
    created: dt.datetime | None = None
    updated: dt.datetime | None = None


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    """A memory as the catalogue lists it: everything but its body; `path` is relative to the
    memory folder (``user/prefer_tabs.md``)."""

    name: str
    description: str
    category: MemoryCategory
    path: str
    created: dt.datetime
    updated: dt.datetime


@dataclass(frozen=True, slots=True)
class MemoryCatalogue:
    """Every valid memory, by category then name, and one line per file that is not one
    (skipped: a stray file, a symbolic link, a broken frontmatter, a name used twice)."""

    entries: tuple[MemoryEntry, ...]
    problems: tuple[str, ...] = ()

    def names(self) -> list[str]:
        return [entry.name for entry in self.entries]


@dataclass(frozen=True, slots=True)
class ConsolidationClaim:
    """The consolidation lock, held (`MemoryStore.consolidation_lock`): when the last pass
    started (None: never) and `stamp(when)`, which records `when` as the start of the last
    pass (0: never). `stamp` raises UsageError once the lock is released."""

    last_pass: float | None
    stamp: Callable[[float], None]


class MemoryPathRefused(UsageError):
    """A path or name the memory writer never touches; the message says which and why."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"memory path {path!r} refused: {reason}")


class MemoryNotFound(UsageError):
    """No memory has this name."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no memory named {name!r}")


class MemoryFileInvalid(RunError):
    """A memory file exists but cannot be read as a memory (frontmatter, encoding, kind)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"memory file {path}: {reason}")


@runtime_checkable
class MemoryStore(Protocol):
    """The memory folder. Every call is short, local and synchronous; a writing call leaves
    the file and the index consistent, or, after a crash between the two, `repair_index`
    (which the store runs before its first operation) makes them so."""

    def catalogue(self) -> MemoryCatalogue:
        """Every memory without its body, by category (user, feedback, reference) then name."""
        ...

    def surely_empty(self) -> bool:
        """True only when nothing at all is stored (the folder does not exist yet); False
        when there may be memories. One look, no reading: cheap enough for the event loop, so
        a run of a user without memories skips the catalogue."""
        ...

    def read(self, name: str) -> Memory:
        """The memory called `name`; MemoryNotFound, MemoryPathRefused for a name that can
        never be a memory's, MemoryFileInvalid for a file that is not one."""
        ...

    def write(self, memory: Memory) -> Memory:
        """Create or replace the memory called `memory.name` (atomically), then the index;
        returns it as stored: trimmed, `created` kept from the memory it replaces, `updated`
        now. MemoryPathRefused for a bad name or a symbolic link in the way."""
        ...

    def delete(self, name: str) -> MemoryEntry:
        """Remove the memory called `name`, then update the index; returns what was removed."""
        ...

    def repair_index(self) -> bool:
        """Rebuild `MEMORY.md` from the files (and remove temporary files a crash left);
        True when the index had to change."""
        ...

    def last_consolidation(self) -> float | None:
        """When the last consolidation pass started (the time its holder stamped), None when
        none ever did. One look, no lock taken."""
        ...

    def consolidation_lock(self) -> AbstractContextManager[ConsolidationClaim | None]:
        """The consolidation pass's lock, not waited for: the block gets a claim while this
        caller holds it, None while another process or task does. Taking it makes the memory
        folder (no memory); taken for the first time, it reads as never stamped."""
        ...
