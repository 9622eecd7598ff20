"""Escapes from the project through the file tools: `..`, absolute and `/proc` aliases,
symlinks (static, swapped between two tool calls, swapped inside the handler) and hard links.

The approval callback allows everything here, so only the sandbox can stop the escape; each
test asserts the file outside is unchanged (or was never created) and that its canary reached
neither the model nor any file in the soong-agent home.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from soong_agent.adapters.sandbox import safe_io
from tests.security.conftest import ALLOW, DENY, Call, Outcome, World, turn

PWNED = "PWNED by the model"
SHARED_TEXT = "outside data"  # in the outside file, and in project files that stand in for it


def read(path: str) -> Call:
    return ("read_file", {"path": path})


def write(path: str, content: str = PWNED) -> Call:
    return ("write_file", {"path": path, "content": content})


def edit(path: str, old: str, new: str = PWNED) -> Call:
    return ("edit_file", {"path": path, "old_string": old, "new_string": new})


def file_call(tool: str, path: str, world: World) -> Call:
    if tool == "read_file":
        return read(path)
    if tool == "write_file":
        return write(path)
    return edit(path, SHARED_TEXT)


FILE_TOOLS = ["read_file", "write_file", "edit_file"]


def plant_private_name(world: World) -> str:
    """A file outside the project whose name no call mentions: seeing it is a listing leak."""
    name = f"private-{secrets.token_hex(8)}.txt"
    (world.outside / name).write_text(f"{SHARED_TEXT} {world.secret('outside')}\n")
    return name


def assert_outside_untouched(world: World, outcome: Outcome, before: dict[str, bytes]) -> None:
    assert world.snapshot() == before
    assert world.leaks(outcome, "outside") == []
    assert not any(PWNED in p.read_text(errors="replace") for p in world.outside.rglob("*.txt"))


# --- traversal ------------------------------------------------------------------------------

TRAVERSALS: dict[str, Callable[[World], str]] = {
    "dotdot": lambda w: "../outside/outside.txt",
    "dir_then_dotdot": lambda w: "sub/../../outside/outside.txt",
    "absolute": lambda w: str(w.outside_file),
    "tilde_dotdot": lambda w: "~/../outside/outside.txt",
    "proc_self_root": lambda w: f"/proc/self/root{w.outside_file}",
    "proc_self_cwd": lambda w: "/proc/self/cwd/../outside/outside.txt",
    "proc_pid_root": lambda w: f"/proc/{os.getpid()}/root{w.outside_file}",
}


@pytest.mark.parametrize("form", list(TRAVERSALS))
@pytest.mark.parametrize("tool", FILE_TOOLS)
async def test_traversal_never_reaches_the_outside_file(
    world: World, monkeypatch: pytest.MonkeyPatch, tool: str, form: str
) -> None:
    monkeypatch.chdir(world.project)  # /proc/self/cwd is the project
    (world.project / "sub").mkdir()
    before = world.snapshot()
    outcome = await world.run(file_call(tool, TRAVERSALS[form](world), world), approval=ALLOW)
    assert_outside_untouched(world, outcome, before)


@pytest.mark.parametrize("form", ["dotdot", "absolute", "tilde_dotdot", "proc_self_root"])
async def test_traversal_creates_nothing_outside(
    world: World, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    monkeypatch.chdir(world.project)
    path = TRAVERSALS[form](world).replace("outside.txt", "created.txt")
    await world.run(write(path), approval=ALLOW)
    assert not (world.outside / "created.txt").exists()


SEARCHES: dict[str, Call] = {
    "list_dir": ("list_dir", {"path": "../outside"}),
    "glob_base": ("glob", {"pattern": "*", "path": "../outside"}),
    "glob_pattern": ("glob", {"pattern": "../outside/*"}),
    "glob_absolute_pattern": ("glob", {"pattern": "/**/outside.txt"}),
    "grep_base": ("grep", {"pattern": "CANARY", "path": "../outside"}),
    "grep_file": ("grep", {"pattern": "CANARY", "path": "../outside/outside.txt"}),
    "grep_glob": ("grep", {"pattern": "CANARY", "glob": "../**"}),
}


@pytest.mark.parametrize("search", list(SEARCHES))
async def test_searches_do_not_leave_the_project(world: World, search: str) -> None:
    private = plant_private_name(world)
    outcome = await world.run(SEARCHES[search], approval=ALLOW)
    assert world.leaks(outcome, "outside") == []
    assert private not in outcome.seen_by_model


# --- symlinks -------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", FILE_TOOLS)
async def test_symlink_to_an_outside_file(world: World, tool: str) -> None:
    (world.project / "notes.txt").symlink_to(world.outside_file)
    before = world.snapshot()
    outcome = await world.run(file_call(tool, "notes.txt", world), approval=ALLOW)
    assert_outside_untouched(world, outcome, before)


@pytest.mark.parametrize("tool", FILE_TOOLS)
async def test_symlinked_parent_folder(world: World, tool: str) -> None:
    (world.project / "vendor").symlink_to(world.outside, target_is_directory=True)
    before = world.snapshot()
    outcome = await world.run(file_call(tool, "vendor/outside.txt", world), approval=ALLOW)
    assert_outside_untouched(world, outcome, before)


@pytest.mark.parametrize(
    "call",
    [
        write("vendor/new.txt"),
        write("vendor/deeper/new.txt"),
        ("list_dir", {"path": "vendor"}),
        ("grep", {"pattern": "CANARY", "path": "vendor"}),
        ("glob", {"pattern": "vendor/*"}),
        ("grep", {"pattern": "CANARY"}),
        ("glob", {"pattern": "**/*.txt"}),
    ],
    ids=["write_new", "write_new_deeper", "list_dir", "grep", "glob", "grep_all", "glob_all"],
)
async def test_symlinked_folder_is_neither_written_nor_searched(world: World, call: Call) -> None:
    (world.project / "vendor").symlink_to(world.outside, target_is_directory=True)
    private = plant_private_name(world)
    outcome = await world.run(call, approval=ALLOW)
    assert sorted(p.name for p in world.outside.iterdir()) == sorted(["outside.txt", private])
    assert world.leaks(outcome, "outside") == []
    assert private not in outcome.seen_by_model


async def test_symlink_chain_inside_the_project_ending_outside(world: World) -> None:
    (world.project / "b.txt").symlink_to(world.outside_file)
    (world.project / "a.txt").symlink_to("b.txt")
    before = world.snapshot()
    outcome = await world.run(read("a.txt"), write("a.txt"), approval=ALLOW)
    assert_outside_untouched(world, outcome, before)


async def test_allow_rule_for_a_folder_does_not_cover_a_symlink_out_of_it(world: World) -> None:
    """The rule lets the write past the approval (which denies); the sandbox must stop it."""
    (world.project / "docs").mkdir()
    (world.project / "docs" / "escape").symlink_to(world.outside, target_is_directory=True)
    before = world.snapshot()
    config = '[permissions]\nallow = ["write_file(/docs/**)", "edit_file(/docs/**)"]\n'
    outcome = await world.run(
        write("docs/escape/outside.txt"),
        edit("docs/escape/outside.txt", SHARED_TEXT),
        write("docs/escape/new.txt"),
        approval=DENY,
        config=config,
    )
    assert not outcome.asked  # the rule, not the user, let the calls through
    assert_outside_untouched(world, outcome, before)
    assert not (world.outside / "new.txt").exists()


# --- TOCTOU: swapped between two tool calls of one run ---------------------------------------


def swap_for_symlink(path: Path, target: Path) -> Callable[[], None]:
    def swap() -> None:
        path.unlink()
        path.symlink_to(target, target_is_directory=target.is_dir())

    return swap


def swap_folder_for_symlink(folder: Path, target: Path) -> Callable[[], None]:
    def swap() -> None:
        folder.rename(folder.with_name(folder.name + ".old"))
        folder.symlink_to(target, target_is_directory=True)

    return swap


@pytest.mark.parametrize("tool", FILE_TOOLS)
async def test_file_swapped_for_a_symlink_between_two_calls(world: World, tool: str) -> None:
    victim = world.project / "victim.txt"
    victim.write_text(f"{SHARED_TEXT} (harmless project copy)\n")
    before = world.snapshot()
    outcome = await world.run(
        read("victim.txt"),
        turn(
            file_call(tool, "victim.txt", world),
            before=swap_for_symlink(victim, world.outside_file),
        ),
        approval=ALLOW,
    )
    assert victim.is_symlink()  # the swap did happen before the second call
    assert_outside_untouched(world, outcome, before)


@pytest.mark.parametrize("tool", FILE_TOOLS)
async def test_folder_swapped_for_a_symlink_between_two_calls(world: World, tool: str) -> None:
    sub = world.project / "sub"
    sub.mkdir()
    (sub / "outside.txt").write_text(f"{SHARED_TEXT} (harmless project copy)\n")
    before = world.snapshot()
    outcome = await world.run(
        read("sub/outside.txt"),
        turn(
            file_call(tool, "sub/outside.txt", world),
            write("sub/created.txt"),
            before=swap_folder_for_symlink(sub, world.outside),
        ),
        approval=ALLOW,
    )
    assert sub.is_symlink()
    assert_outside_untouched(world, outcome, before)
    assert not (world.outside / "created.txt").exists()


# --- TOCTOU: swapped inside the handler, after the policy check -------------------------------


def swap_at_open(
    monkeypatch: pytest.MonkeyPatch, name: str, swap: Callable[[], None], nth: int = 1
) -> list[int]:
    """Run `swap` just before the `nth` sandboxed open of a path through `name` (after the
    policy checked it). Returns the list of opens seen, for the test to prove the swap ran."""
    real = safe_io.open_beneath
    seen: list[int] = []

    def open_beneath(root: str, parts: Any, flags: int, **kwargs: Any) -> int:
        if name in parts:
            seen.append(flags)
            if len(seen) == nth:
                swap()
        return real(root, parts, flags, **kwargs)

    monkeypatch.setattr(safe_io, "open_beneath", open_beneath)
    return seen


@pytest.mark.parametrize(
    ("tool", "nth"),
    [("read_file", 1), ("read_file", 2), ("write_file", 1), ("edit_file", 1), ("edit_file", 2)],
    ids=["read_size", "read_bytes", "write", "edit_read", "edit_between_read_and_write"],
)
async def test_file_swapped_for_a_symlink_after_the_check(
    world: World, monkeypatch: pytest.MonkeyPatch, tool: str, nth: int
) -> None:
    victim = world.project / "victim.txt"
    victim.write_text(f"{SHARED_TEXT} (harmless project copy)\n")
    before = world.snapshot()
    seen = swap_at_open(
        monkeypatch, "victim.txt", swap_for_symlink(victim, world.outside_file), nth
    )
    outcome = await world.run(file_call(tool, "victim.txt", world), approval=ALLOW)
    assert len(seen) >= nth and victim.is_symlink()
    assert_outside_untouched(world, outcome, before)


@pytest.mark.parametrize("tool", FILE_TOOLS)
async def test_folder_swapped_for_a_symlink_after_the_check(
    world: World, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    sub = world.project / "sub"
    sub.mkdir()
    (sub / "outside.txt").write_text(f"{SHARED_TEXT} (harmless project copy)\n")
    before = world.snapshot()
    seen = swap_at_open(monkeypatch, "sub", swap_folder_for_symlink(sub, world.outside))
    outcome = await world.run(file_call(tool, "sub/outside.txt", world), approval=ALLOW)
    assert seen and sub.is_symlink()
    assert_outside_untouched(world, outcome, before)


@pytest.mark.parametrize("tool", ["write_file", "edit_file"])
async def test_file_swapped_for_a_hard_link_after_the_check(
    world: World, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    victim = world.project / "victim.txt"
    victim.write_text(f"{SHARED_TEXT} (harmless project copy)\n")

    def swap() -> None:
        staged = world.project / "staged.tmp"
        os.link(world.outside_file, staged)
        os.replace(staged, victim)

    before = world.snapshot()
    nth = 2 if tool == "edit_file" else 1  # edit: swapped between its read and its write
    seen = swap_at_open(monkeypatch, "victim.txt", swap, nth)
    outcome = await world.run(file_call(tool, "victim.txt", world), approval=ALLOW)
    assert world.leaks(outcome, "outside") == []
    assert len(seen) >= nth and victim.stat().st_ino == world.outside_file.stat().st_ino
    assert world.snapshot() == before
    assert PWNED not in world.outside_file.read_text()


# --- hard links -----------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["write_file", "edit_file"])
async def test_hard_link_to_an_outside_file_is_not_written(world: World, tool: str) -> None:
    os.link(world.outside_file, world.project / "linked.txt")
    before = world.snapshot()
    await world.run(file_call(tool, "linked.txt", world), approval=ALLOW)
    assert world.snapshot() == before
    assert PWNED not in world.outside_file.read_text()


async def test_hard_link_in_a_subfolder_with_an_allow_rule(world: World) -> None:
    (world.project / "docs").mkdir()
    os.link(world.outside_file, world.project / "docs" / "linked.txt")
    before = world.snapshot()
    outcome = await world.run(
        write("docs/linked.txt"),
        edit("docs/linked.txt", SHARED_TEXT),
        approval=DENY,
        config='[permissions]\nallow = ["write_file(/docs/**)", "edit_file(/docs/**)"]\n',
    )
    assert not outcome.asked
    assert world.snapshot() == before


# --- controls: the same calls on ordinary project files do work -----------------------------


async def test_control_file_tools_work_inside_the_project(world: World) -> None:
    (world.project / "a.txt").write_text("alpha\n")
    (world.project / "inner.txt").symlink_to("a.txt")  # a symlink that stays inside is fine
    outcome = await world.run(
        read("inner.txt"),
        edit("a.txt", "alpha", "beta"),
        write("sub/new.txt", "new"),
        approval=ALLOW,
    )
    assert "alpha" in outcome.tool_results[0].content
    assert (world.project / "a.txt").read_text() == "beta\n"
    assert (world.project / "sub" / "new.txt").read_text() == "new"
