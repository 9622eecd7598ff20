"""The MemoryStore contract, run against the InMemoryMemoryStore fake and the FileMemoryStore
on real files: names, categories, updates without duplicates, the index, refused paths, the
index repaired after a crash between a file and the index, and the consolidation lock (not
waited for, its stamp seen by every process)."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from soong_agent.adapters.memory import FileMemoryStore
from soong_agent.adapters.memory.codec import dump
from soong_agent.domain.memory import render_index
from soong_agent.ports.errors import UsageError
from soong_agent.ports.memory import (
    Memory,
    MemoryNotFound,
    MemoryPathRefused,
    MemoryStore,
)
from soong_agent.testing import FixedClock, InMemoryMemoryStore

START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Folder:
    """One implementation and what a test needs to see and do behind its back."""

    def __init__(self, store: MemoryStore, clock: FixedClock) -> None:
        self.store = store
        self.clock = clock

    def index_text(self) -> str | None:
        raise NotImplementedError

    def put_file(self, memory: Memory) -> None:
        """A memory's file written, the index not (a crash between the two)."""
        raise NotImplementedError

    def link(self, relative: str) -> None:
        """A symbolic link at `relative`, pointing outside the folder."""
        raise NotImplementedError

    def restart(self) -> MemoryStore:
        """The store a new process would open on the same folder."""
        raise NotImplementedError


class FakeFolder(Folder):
    def __init__(self) -> None:
        clock = FixedClock()
        self.fake = InMemoryMemoryStore(clock=clock)
        super().__init__(self.fake, clock)

    def index_text(self) -> str | None:
        return self.fake.index_text

    def put_file(self, memory: Memory) -> None:
        self.fake.put_file(memory)

    def link(self, relative: str) -> None:
        self.fake.symlinks.add(relative)

    def restart(self) -> MemoryStore:
        self.fake.restart()
        return self.fake


class DiskFolder(Folder):
    def __init__(self, tmp: Path) -> None:
        clock = FixedClock()
        self.root = tmp / "memory"
        self.outside = tmp / "outside.md"
        self.outside.write_text("not a memory\n", encoding="utf-8")
        super().__init__(FileMemoryStore(self.root, clock=clock), clock)

    def index_text(self) -> str | None:
        index = self.root / "MEMORY.md"
        return index.read_text(encoding="utf-8") if index.exists() else None

    def put_file(self, memory: Memory) -> None:
        folder = self.root / memory.category
        folder.mkdir(parents=True, exist_ok=True)
        now = dt.datetime.fromtimestamp(self.clock.now(), tz=dt.UTC)
        text = dump(memory, created=now, updated=now)
        (folder / f"{memory.name}.md").write_text(text, encoding="utf-8")

    def link(self, relative: str) -> None:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(self.outside, path)

    def restart(self) -> MemoryStore:
        return FileMemoryStore(self.root, clock=self.clock)


FACTORIES: dict[str, Callable[[Path], Folder]] = {
    "inmemory": lambda _tmp: FakeFolder(),
    "files": DiskFolder,
}


@pytest.fixture(params=sorted(FACTORIES))
def folder(request: pytest.FixtureRequest, tmp_path: Path) -> Folder:
    return FACTORIES[request.param](tmp_path)


def tabs(category: str = "user", body: str = "The user indents with tabs.") -> Memory:
    return Memory("prefer_tabs", "User prefers tabs", category, body)  # type: ignore[arg-type]


def test_implements_the_port(folder: Folder) -> None:
    assert isinstance(folder.store, MemoryStore)


def test_an_empty_folder_has_no_memories(folder: Folder) -> None:
    catalogue = folder.store.catalogue()
    assert catalogue.entries == ()
    assert catalogue.problems == ()


def test_surely_empty_only_while_nothing_was_ever_stored(folder: Folder) -> None:
    assert folder.store.surely_empty()
    folder.store.write(tabs())
    assert not folder.store.surely_empty()
    assert not folder.restart().surely_empty()  # another process sees it too


def test_a_file_put_by_hand_is_never_surely_empty(folder: Folder) -> None:
    folder.put_file(tabs())
    assert not folder.store.surely_empty()
    assert [e.name for e in folder.store.catalogue().entries] == ["prefer_tabs"]


def test_write_stamps_the_memory_and_read_gives_it_back(folder: Folder) -> None:
    stored = folder.store.write(
        Memory("prefer_tabs", "  User prefers\ntabs ", "user", "\nThe user indents with tabs.\n\n")
    )
    assert stored == Memory(
        "prefer_tabs", "User prefers tabs", "user", "The user indents with tabs.", START, START
    )
    assert folder.store.read("prefer_tabs") == stored


def test_the_catalogue_lists_by_category_then_name(folder: Folder) -> None:
    folder.store.write(Memory("zeta", "z", "user", "z"))
    folder.store.write(Memory("docs", "d", "reference", "https://docs.example.com"))
    folder.store.write(Memory("alpha", "a", "user", "a"))
    folder.store.write(Memory("no_mocks", "n", "feedback", "Avoid mocks."))
    entries = folder.store.catalogue().entries
    assert [(e.category, e.name, e.path) for e in entries] == [
        ("user", "alpha", "user/alpha.md"),
        ("user", "zeta", "user/zeta.md"),
        ("feedback", "no_mocks", "feedback/no_mocks.md"),
        ("reference", "docs", "reference/docs.md"),
    ]
    assert folder.store.catalogue().names() == ["alpha", "zeta", "no_mocks", "docs"]


def test_an_update_keeps_created_and_moves_updated(folder: Folder) -> None:
    folder.store.write(tabs())
    folder.clock.advance(3600)
    stored = folder.store.write(tabs(body="Tabs, width 4."))
    assert (stored.created, stored.updated) == (START, START + dt.timedelta(hours=1))
    assert folder.store.read("prefer_tabs").body == "Tabs, width 4."
    assert len(folder.store.catalogue().entries) == 1


def test_a_new_category_moves_the_memory_without_a_duplicate(folder: Folder) -> None:
    folder.store.write(tabs("user"))
    folder.store.write(tabs("feedback"))
    entries = folder.store.catalogue().entries
    assert [(e.category, e.path) for e in entries] == [("feedback", "feedback/prefer_tabs.md")]
    assert folder.store.read("prefer_tabs").category == "feedback"


def test_delete_removes_the_memory_and_its_index_line(folder: Folder) -> None:
    folder.store.write(tabs())
    removed = folder.store.delete("prefer_tabs")
    assert (removed.name, removed.category, removed.path) == (
        "prefer_tabs",
        "user",
        "user/prefer_tabs.md",
    )
    assert folder.store.catalogue().entries == ()
    assert folder.index_text() == render_index([])
    with pytest.raises(MemoryNotFound, match="no memory named 'prefer_tabs'"):
        folder.store.read("prefer_tabs")


def test_unknown_names_are_not_found(folder: Folder) -> None:
    with pytest.raises(MemoryNotFound):
        folder.store.read("nothing")
    with pytest.raises(MemoryNotFound):
        folder.store.delete("nothing")
    assert folder.store.surely_empty()  # asking about nothing stored nothing (no folder)


def test_the_index_lists_exactly_the_files(folder: Folder) -> None:
    folder.store.write(tabs())
    folder.store.write(Memory("docs", "Team docs", "reference", "https://docs.example.com"))
    text = folder.index_text()
    assert text == render_index(folder.store.catalogue().entries)
    assert "- prefer_tabs: User prefers tabs [user](user/prefer_tabs.md)" in (text or "")
    assert folder.store.repair_index() is False


@pytest.mark.parametrize(
    "name",
    ["", "../escape", "/etc/passwd", "a/b", "a\\b", ".hidden", "Upper", "x.md", "a b", "a" * 65],
)
def test_names_that_are_not_memory_names_are_refused(folder: Folder, name: str) -> None:
    with pytest.raises(MemoryPathRefused):
        folder.store.write(Memory(name, "d", "user", "b"))
    with pytest.raises(MemoryPathRefused):
        folder.store.read(name)
    with pytest.raises(MemoryPathRefused):
        folder.store.delete(name)
    assert folder.store.catalogue().entries == ()


def test_an_unknown_category_is_refused(folder: Folder) -> None:
    with pytest.raises(MemoryPathRefused, match="category"):
        folder.store.write(Memory("x", "d", "project", "b"))  # type: ignore[arg-type]


def test_a_symbolic_link_in_the_place_of_a_memory_is_refused(folder: Folder) -> None:
    folder.link("user/prefer_tabs.md")
    with pytest.raises(MemoryPathRefused, match="symbolic link"):
        folder.store.write(tabs())
    with pytest.raises(MemoryPathRefused, match="symbolic link"):
        folder.store.read("prefer_tabs")
    catalogue = folder.store.catalogue()
    assert catalogue.entries == ()
    assert any("user/prefer_tabs.md" in p and "symbolic link" in p for p in catalogue.problems)


def test_a_crash_between_file_and_index_is_repaired_on_the_next_start(folder: Folder) -> None:
    folder.store.write(Memory("first", "First", "user", "one"))
    folder.put_file(Memory("second", "Second", "feedback", "Always two."))
    assert "second" not in (folder.index_text() or "")
    store = folder.restart()
    assert store.catalogue().names() == ["first", "second"]  # the first use repairs
    assert "- second: Second [feedback](feedback/second.md)" in (folder.index_text() or "")
    assert store.repair_index() is False


def test_repair_index_says_whether_it_changed_the_index(folder: Folder) -> None:
    folder.store.write(Memory("first", "First", "user", "one"))
    folder.put_file(Memory("second", "Second", "user", "two"))
    assert folder.store.repair_index() is True
    assert folder.store.repair_index() is False


# --- the consolidation lock --------------------------------------------------------------------


def test_the_consolidation_lock_was_never_stamped_at_first(folder: Folder) -> None:
    assert folder.store.last_consolidation() is None
    with folder.store.consolidation_lock() as claim:
        assert claim is not None and claim.last_pass is None
    assert folder.store.last_consolidation() is None
    assert folder.store.catalogue().entries == ()  # the lock is no memory …
    assert not folder.store.surely_empty()  # … but the folder now exists


def test_a_stamp_is_the_last_pass_for_every_process(folder: Folder) -> None:
    when = START.timestamp() + 90
    with folder.store.consolidation_lock() as claim:
        assert claim is not None
        claim.stamp(when)
        assert folder.store.last_consolidation() == when
    other = folder.restart()
    assert other.last_consolidation() == when
    with other.consolidation_lock() as claim:
        assert claim is not None and claim.last_pass == when
        claim.stamp(0)  # 0: never
    assert folder.store.last_consolidation() is None


def test_the_consolidation_lock_is_not_waited_for(folder: Folder) -> None:
    with folder.store.consolidation_lock() as held:
        assert held is not None
        with folder.store.consolidation_lock() as second:  # another task
            assert second is None
        with folder.restart().consolidation_lock() as other:  # another process
            assert other is None
    with folder.restart().consolidation_lock() as later:  # released: anyone may take it
        assert later is not None


def test_a_released_claim_stamps_nothing(folder: Folder) -> None:
    with folder.store.consolidation_lock() as claim:
        assert claim is not None
        claim.stamp(START.timestamp())
    with pytest.raises(UsageError, match="no longer held"):
        claim.stamp(START.timestamp() + 3600)
    assert folder.store.last_consolidation() == START.timestamp()
