"""The memory writer on real files: what it writes, the paths it refuses (`..`, absolute, a
separator, symbolic links, hard links), atomic writes, the index repaired after a crash, the
consolidation lock file, and the `memory list|show|rm` command bodies."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pytest

from soong_agent.adapters.memory import FileMemoryStore
from soong_agent.adapters.memory import files as memory_files
from soong_agent.domain.memory import INDEX_FILE, check_path, render_index
from soong_agent.entrypoints.cli.common import EXIT_OK, EXIT_USAGE
from soong_agent.entrypoints.cli.memory_cmd import memory_list, memory_rm, memory_show
from soong_agent.ports.memory import Memory, MemoryPathRefused
from soong_agent.testing import FixedClock, write_minimal_config

TABS = Memory("prefer_tabs", "User prefers tabs", "user", "The user indents with tabs.")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "memory"


@pytest.fixture
def store(root: Path) -> FileMemoryStore:
    return FileMemoryStore(root, clock=FixedClock())


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_the_file_has_the_frontmatter_and_the_body(store: FileMemoryStore, root: Path) -> None:
    store.write(TABS)
    assert (root / "user" / "prefer_tabs.md").read_text(encoding="utf-8") == (
        "---\n"
        "name: prefer_tabs\n"
        "description: User prefers tabs\n"
        "type: user\n"
        "created: '2026-01-01T00:00:00+00:00'\n"
        "updated: '2026-01-01T00:00:00+00:00'\n"
        "---\n"
        "\n"
        "The user indents with tabs.\n"
    )
    assert tree(root) == [INDEX_FILE, "user", "user/prefer_tabs.md"]
    assert (root / "user" / "prefer_tabs.md").stat().st_mode & 0o777 == 0o600


def test_reading_does_not_create_the_folder(store: FileMemoryStore, root: Path) -> None:
    assert store.catalogue().entries == ()
    assert not root.exists()


@pytest.mark.parametrize(
    ("relative", "why"),
    [
        ("../config.toml", "'..'"),
        ("user/../../x.md", "'..'"),
        ("/etc/passwd", "absolute"),
        ("user/sub/x.md", "directly in"),
        ("user\\x.md", "backslash"),
        ("project/x.md", "not one of"),
        ("user/x.txt", ".md"),
        ("user/.x.md", "'.'"),
        ("notes.md", "directly in"),
        ("", "empty"),
    ],
)
def test_the_path_policy_refuses_every_other_path(relative: str, why: str) -> None:
    with pytest.raises(MemoryPathRefused, match=why):
        check_path(relative)


def test_the_path_policy_accepts_the_index_and_memory_files() -> None:
    assert check_path("MEMORY.md").kind == "index"
    found = check_path("feedback/no_mocks.md")
    assert (found.kind, found.category, found.name) == ("memory", "feedback", "no_mocks")


@pytest.mark.parametrize("name", ["../../escape", "/tmp/abs", "user/x", "a\\b"])
def test_escaping_names_write_nothing_anywhere(
    store: FileMemoryStore, tmp_path: Path, name: str
) -> None:
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(MemoryPathRefused):
        store.write(Memory(name, "d", "user", "b"))
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_a_symlinked_memory_file_is_neither_read_nor_followed(
    store: FileMemoryStore, root: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE\n", encoding="utf-8")
    (root / "user").mkdir(parents=True)
    (root / "user" / "key.md").symlink_to(secret)
    with pytest.raises(MemoryPathRefused, match="symbolic link"):
        store.read("key")
    with pytest.raises(MemoryPathRefused, match="symbolic link"):
        store.write(Memory("key", "d", "user", "overwritten"))
    assert secret.read_text(encoding="utf-8") == "PRIVATE\n"
    problems = store.catalogue().problems
    assert problems == ("user/key.md: it is a symbolic link; skipped",)


def test_a_symlinked_category_folder_is_refused(
    store: FileMemoryStore, root: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root.mkdir()
    (root / "user").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(MemoryPathRefused, match=r"user/.*symbolic link"):
        store.write(TABS)
    assert list(elsewhere.iterdir()) == []
    assert store.catalogue().problems == ("user/: the folder is a symbolic link; skipped",)
    store.write(Memory("docs", "Docs", "reference", "https://docs.example.com"))  # others work


def test_a_symlinked_index_is_replaced_never_followed(
    store: FileMemoryStore, root: Path, tmp_path: Path
) -> None:
    target = tmp_path / "bashrc"
    target.write_text("echo hi\n", encoding="utf-8")
    root.mkdir()
    (root / INDEX_FILE).symlink_to(target)
    store.write(TABS)
    assert target.read_text(encoding="utf-8") == "echo hi\n"
    assert not (root / INDEX_FILE).is_symlink()
    assert "prefer_tabs" in (root / INDEX_FILE).read_text(encoding="utf-8")


def test_the_consolidation_lock_is_a_file_of_its_own_stamped_by_its_mtime(
    store: FileMemoryStore, root: Path
) -> None:
    with store.consolidation_lock() as claim:
        assert claim is not None
        assert tree(root) == [".consolidation.lock"]  # the folder, no index, no memory
        assert os.stat(root / ".consolidation.lock").st_mtime == 0  # made: never ran
        claim.stamp(1_767_225_600.0)
    assert os.stat(root / ".consolidation.lock").st_mtime == 1_767_225_600.0
    assert store.catalogue().entries == ()


def test_a_symlinked_consolidation_lock_is_refused_never_followed(
    store: FileMemoryStore, root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.write_text("x", encoding="utf-8")
    os.utime(outside, (5.0, 5.0))
    root.mkdir()
    (root / ".consolidation.lock").symlink_to(outside)
    with pytest.raises(OSError), store.consolidation_lock():
        pass
    assert os.stat(outside).st_mtime == 5.0 and outside.read_text(encoding="utf-8") == "x"


def test_a_hard_linked_memory_file_is_not_read(
    store: FileMemoryStore, root: Path, tmp_path: Path
) -> None:
    store.write(TABS)
    os.link(root / "user" / "prefer_tabs.md", tmp_path / "other")
    with pytest.raises(MemoryPathRefused, match="hard links"):
        store.read("prefer_tabs")


def test_a_failed_write_leaves_the_old_memory_and_no_temporary_file(
    store: FileMemoryStore, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.write(TABS)
    before = (root / "user" / "prefer_tabs.md").read_bytes()

    def broken_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(memory_files.os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="Input/output"):
        store.write(Memory("prefer_tabs", "changed", "user", "changed"))
    monkeypatch.undo()
    assert (root / "user" / "prefer_tabs.md").read_bytes() == before
    assert tree(root) == [INDEX_FILE, "user", "user/prefer_tabs.md"]


def test_the_index_is_rebuilt_after_a_crash_and_leftovers_removed(root: Path) -> None:
    FileMemoryStore(root, clock=FixedClock()).write(TABS)
    # the crash: a second memory's file is in place, its temporary file left, the index not
    stamp = "created: '2026-01-02T00:00:00+00:00'\nupdated: '2026-01-02T00:00:00+00:00'\n"
    (root / "feedback").mkdir()
    (root / "feedback" / "no_mocks.md").write_text(
        f"---\nname: no_mocks\ndescription: Avoid mocks\ntype: feedback\n{stamp}---\nReal DB.\n",
        encoding="utf-8",
    )
    (root / "feedback" / ".no_mocks.md.0a1b2c.tmp").write_text("half", encoding="utf-8")
    stale = (root / INDEX_FILE).read_text(encoding="utf-8")
    assert "no_mocks" not in stale

    reopened = FileMemoryStore(root, clock=FixedClock())
    catalogue = reopened.catalogue()
    assert catalogue.names() == ["prefer_tabs", "no_mocks"]
    assert (root / INDEX_FILE).read_text(encoding="utf-8") == render_index(catalogue.entries)
    assert not (root / "feedback" / ".no_mocks.md.0a1b2c.tmp").exists()


def test_hand_written_and_broken_files_are_reported_not_fatal(
    store: FileMemoryStore, root: Path
) -> None:
    user = root / "user"
    user.mkdir(parents=True)
    (user / "by_hand.md").write_text(
        "---\nname: by_hand\ndescription: Written by hand\ntype: user\n---\nHello.\n",
        encoding="utf-8",
    )
    (user / "broken.md").write_text("---\nname: [\n---\nbody\n", encoding="utf-8")
    (user / "wrong_name.md").write_text(
        "---\nname: other\ndescription: d\ntype: user\n---\nb\n", encoding="utf-8"
    )
    (user / "wrong_type.md").write_text(
        "---\nname: wrong_type\ndescription: d\ntype: feedback\n---\nb\n", encoding="utf-8"
    )
    (user / "notes.txt").write_text("x", encoding="utf-8")
    (user / "bare.md").write_text("no frontmatter", encoding="utf-8")
    catalogue = store.catalogue()
    assert catalogue.names() == ["by_hand"]
    entry = catalogue.entries[0]
    mtime = dt.datetime.fromtimestamp(int((user / "by_hand.md").stat().st_mtime), tz=dt.UTC)
    assert entry.created == entry.updated == mtime  # no times written: the file's
    problems = "\n".join(catalogue.problems)
    assert "user/bare.md: it has no frontmatter" in problems
    assert "user/broken.md: its frontmatter is not valid YAML" in problems
    assert "user/notes.txt: not a memory file" in problems
    assert "user/wrong_name.md: frontmatter name 'other' is not the file's name" in problems
    assert "user/wrong_type.md: frontmatter type 'feedback' is not its folder 'user'" in problems
    assert len(catalogue.problems) == 5


def test_a_name_in_two_folders_is_listed_once_and_forgotten_everywhere(
    store: FileMemoryStore, root: Path
) -> None:
    store.write(TABS)
    (root / "feedback").mkdir()
    (root / "feedback" / "prefer_tabs.md").write_text(
        "---\nname: prefer_tabs\ndescription: again\ntype: feedback\n---\nb\n", encoding="utf-8"
    )
    catalogue = store.catalogue()
    assert catalogue.names() == ["prefer_tabs"]
    assert catalogue.problems == (
        "feedback/prefer_tabs.md: 'prefer_tabs' is also user/prefer_tabs.md; skipped",
    )
    store.delete("prefer_tabs")
    assert tree(root) == [INDEX_FILE, "feedback", "user"]


# --- the CLI command bodies ---------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    write_minimal_config(home)
    monkeypatch.setenv("SOONG_AGENT_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    return home


def test_memory_list_show_and_rm(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert memory_list(None) == EXIT_OK
    assert capsys.readouterr().out == f"no memories yet ({home / 'memory'})\n"

    FileMemoryStore(home / "memory").write(TABS)
    assert memory_list(None) == EXIT_OK
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"1 memories in {home / 'memory'}:"
    assert out[1].startswith("user      prefer_tabs  ")
    assert out[1].endswith("  User prefers tabs")

    assert memory_show("prefer_tabs", None) == EXIT_OK
    shown = capsys.readouterr().out
    assert "name:        prefer_tabs\ncategory:    user\n" in shown
    assert shown.endswith("\n\nThe user indents with tabs.\n")

    assert memory_rm("prefer_tabs", None) == EXIT_OK
    assert capsys.readouterr().out == (
        f"removed memory 'prefer_tabs' ({home / 'memory'}/user/prefer_tabs.md)\n"
    )
    assert not (home / "memory" / "user" / "prefer_tabs.md").exists()
    assert "prefer_tabs" not in (home / "memory" / INDEX_FILE).read_text(encoding="utf-8")


def test_memory_commands_fail_in_one_line(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert memory_show("missing", None) == EXIT_USAGE
    assert capsys.readouterr().err == "soong-agent: error: no memory named 'missing'\n"
    assert memory_rm("../x", None) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err == (
        "soong-agent: error: memory path '../x' refused: the name holds a path separator\n"
    )


def test_memory_list_warns_about_skipped_files(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (home / "memory" / "user").mkdir(parents=True)
    (home / "memory" / "user" / "notes.txt").write_text("x", encoding="utf-8")
    assert memory_list(None) == EXIT_OK
    captured = capsys.readouterr()
    assert captured.err.startswith("soong-agent: warning: user/notes.txt: not a memory file")
