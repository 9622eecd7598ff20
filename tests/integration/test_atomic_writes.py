"""Atomic writes of LocalFileSystem, on real files and real processes: a write killed at any
moment leaves the old or the new content, modes are kept, no temporary is left behind, stale
temporaries are cleaned up, and the symlink and hard-link refusals hold."""

from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from soong_agent.adapters.sandbox import LocalFileSystem
from soong_agent.adapters.sandbox.atomic_write import (
    STALE_TEMP_GRACE_SECONDS,
    TEMP_PREFIX,
    is_temp_name,
)
from soong_agent.application.tools.base import ToolContext
from soong_agent.application.tools.files import (
    EditFileArgs,
    WriteFileArgs,
    edit_file,
    write_file,
)
from soong_agent.ports.errors import SandboxViolation

KILL_ROUNDS = 24
OUTSIDE_TEXT = "outside: must never change"

# Reads the new content from a file, says it is ready, then writes it through LocalFileSystem.
WRITER = """
import asyncio, sys
from pathlib import Path
from soong_agent.adapters.sandbox import LocalFileSystem

project, name, payload = sys.argv[1:4]
fs = LocalFileSystem(project=Path(project))
text = Path(payload).read_text(encoding="utf-8")
print("ready", flush=True)
asyncio.run(fs.write_text(name, text))
print("done", flush=True)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


@pytest.fixture
def fs(project: Path) -> LocalFileSystem:
    return LocalFileSystem(project=project)


def _temps(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.startswith(TEMP_PREFIX))


def _every_temp(root: Path) -> list[Path]:
    return [p for p in root.rglob(f"{TEMP_PREFIX}*")]


def _start_writer(project: Path, name: str, payload: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(project), name, str(payload)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != "ready\n":
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the writer did not start: {line!r} {err}")
    return proc


# --- (1) killed at a random moment -------------------------------------------------------------


def _kill_when_temp_reaches(proc: subprocess.Popen[str], folder: Path, size: int) -> None:
    """SIGKILL `proc` once a temporary in `folder` holds `size` bytes (or when it is done)."""
    while proc.poll() is None:
        for name in _temps(folder):
            try:
                written = os.stat(folder / name).st_size
            except FileNotFoundError:
                continue  # renamed over the target meanwhile
            if written >= size:
                proc.send_signal(signal.SIGKILL)
                return


def test_a_write_killed_at_any_moment_leaves_old_or_new_content(
    project: Path, tmp_path: Path
) -> None:
    old = "".join(f"old line {i:08d}\n" for i in range(250_000))  # ~4.5 MB
    new = "".join(f"the new content, line {i:08d}\n" for i in range(400_000))  # ~12 MB
    old_bytes, new_bytes = old.encode(), new.encode()
    payload = tmp_path / "payload.txt"
    payload.write_text(new, encoding="utf-8")
    target = project / "big.txt"

    # One write left to finish: how long the writer runs here sets the span for blind kills.
    target.write_bytes(old_bytes)
    proc = _start_writer(project, "big.txt", payload)
    started = time.monotonic()
    assert proc.stdout is not None
    assert proc.stdout.readline() == "done\n"
    span = time.monotonic() - started
    _, err = proc.communicate()
    assert proc.returncode == 0, err
    assert target.read_bytes() == new_bytes
    assert _temps(project) == []

    rng = random.Random(1207)
    outcomes: list[str] = []
    cut_mid_write = 0
    for round_ in range(KILL_ROUNDS):
        target.write_bytes(old_bytes)
        for stale in _temps(project):  # the last kill's leftover, already counted
            (project / stale).unlink()
        proc = _start_writer(project, "big.txt", payload)
        if round_ % 2:  # a random point of the write, in bytes written to the temporary
            _kill_when_temp_reaches(proc, project, rng.randrange(len(new_bytes) + 1))
        else:  # a random moment: start-up, writing, fsync, rename or exit
            time.sleep(rng.uniform(0, span))
            proc.send_signal(signal.SIGKILL)
        proc.communicate()
        data = target.read_bytes()
        assert data in (old_bytes, new_bytes), (
            f"after SIGKILL the file holds {len(data)} bytes: neither the old "
            f"({len(old_bytes)}) nor the new ({len(new_bytes)}) content"
        )
        outcomes.append("new" if data == new_bytes else "old")
        if _temps(project):
            cut_mid_write += 1
    # Kills must have hit between the temporary's creation and the rename, or the test
    # proved nothing.
    assert cut_mid_write >= KILL_ROUNDS // 8, (cut_mid_write, outcomes)


# --- (2) permission modes ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", [0o755, 0o600, 0o640, 0o444])
async def test_the_mode_of_an_existing_file_is_kept(
    fs: LocalFileSystem, project: Path, mode: int
) -> None:
    target = project / "script.sh"
    target.write_text("#!/bin/sh\necho old\n")
    target.chmod(mode)
    if mode & stat.S_IWUSR == 0 and os.geteuid() != 0:
        with pytest.raises(PermissionError):  # not writable: refused, as a direct write was
            await fs.write_text("script.sh", "#!/bin/sh\necho new\n")
        return
    await fs.write_text("script.sh", "#!/bin/sh\necho new\n")
    assert target.read_text() == "#!/bin/sh\necho new\n"
    assert stat.S_IMODE(target.stat().st_mode) == mode
    ctx = ToolContext(fs=fs, session_id="s", run_id="r")
    out = await edit_file(
        EditFileArgs(path="script.sh", old_string="new", new_string="edited"), ctx
    )
    assert not out.is_error, out
    assert target.read_text() == "#!/bin/sh\necho edited\n"
    assert stat.S_IMODE(target.stat().st_mode) == mode


async def test_a_new_file_gets_the_usual_mode(fs: LocalFileSystem, project: Path) -> None:
    previous = os.umask(0o027)
    try:
        await fs.write_text("fresh.txt", "x")
        await fs.write_text("deep/er/fresh.txt", "y")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((project / "fresh.txt").stat().st_mode) == 0o640
    assert stat.S_IMODE((project / "deep/er/fresh.txt").stat().st_mode) == 0o640


# --- (3) nothing left behind -------------------------------------------------------------------


async def test_no_temporary_remains_after_writes_and_edits(
    fs: LocalFileSystem, project: Path
) -> None:
    ctx = ToolContext(fs=fs, session_id="s", run_id="r")
    out = await write_file(WriteFileArgs(path="a.txt", content="one two\n"), ctx)
    assert not out.is_error, out
    out = await write_file(WriteFileArgs(path="sub/dir/b.txt", content="three\n"), ctx)
    assert not out.is_error, out
    await fs.write_text("a.txt", "one two three\n")  # replace
    await fs.write_text("empty.txt", "")
    await fs.write_text("empty.txt", "")
    out = await edit_file(EditFileArgs(path="a.txt", old_string="two", new_string="2"), ctx)
    assert not out.is_error, out
    out = await edit_file(
        EditFileArgs(path="sub/dir/b.txt", old_string="three", new_string="3"), ctx
    )
    assert not out.is_error, out
    assert (project / "a.txt").read_text() == "one 2 three\n"
    assert (project / "sub/dir/b.txt").read_text() == "3\n"
    assert (project / "empty.txt").read_bytes() == b""
    assert _every_temp(project) == []
    assert sorted(p.name for p in project.rglob("*")) == [
        "a.txt",
        "b.txt",
        "dir",
        "empty.txt",
        "sub",
    ]


async def test_no_temporary_remains_after_a_refused_or_failed_write(
    fs: LocalFileSystem, project: Path
) -> None:
    (project / "folder").mkdir()
    with pytest.raises(IsADirectoryError):
        await fs.write_text("folder", "x")
    (project / "plain.txt").write_text("plain")
    with pytest.raises(NotADirectoryError):
        await fs.write_text("plain.txt/under.txt", "x")
    os.mkfifo(project / "pipe")
    with pytest.raises(OSError):  # no reader: the open fails (ENXIO), as before
        await fs.write_text("pipe", "x")
    assert _every_temp(project) == []


# --- (4) stale temporaries ---------------------------------------------------------------------


def _make_temp(folder: Path, hex16: str, *, age: float) -> Path:
    path = folder / f"{TEMP_PREFIX}{hex16}.tmp"
    path.write_text("half a write")
    then = time.time() - age
    os.utime(path, (then, then))
    return path


async def test_a_stale_temporary_is_removed_by_the_next_write_there(
    fs: LocalFileSystem, project: Path
) -> None:
    (project / "other").mkdir()
    stale = _make_temp(project, "0123456789abcdef", age=STALE_TEMP_GRACE_SECONDS + 60)
    fresh = _make_temp(project, "fedcba9876543210", age=STALE_TEMP_GRACE_SECONDS / 4)
    elsewhere = _make_temp(project / "other", "00000000aaaaaaaa", age=STALE_TEMP_GRACE_SECONDS * 10)
    look_alike = project / f"{TEMP_PREFIX}notours.tmp"  # not our name form: never touched
    look_alike.write_text("user data")
    old = time.time() - STALE_TEMP_GRACE_SECONDS * 10
    os.utime(look_alike, (old, old))
    assert is_temp_name(stale.name) and not is_temp_name(look_alike.name)

    await fs.write_text("target.txt", "content")

    assert not stale.exists()
    assert fresh.exists()  # may belong to a write still running
    assert elsewhere.exists()  # another folder: left for a write there
    assert look_alike.read_text() == "user data"
    await fs.write_text("other/x.txt", "x")
    assert not elsewhere.exists()


async def test_temporaries_are_hidden_from_listing_and_search(
    fs: LocalFileSystem, project: Path
) -> None:
    (project / "real.txt").write_text("needle\n")
    _make_temp(project, "0123456789abcdef", age=0).write_text("needle\n")
    entries, _ = await fs.list_dir(".", limit=50)
    assert [e.path for e in entries] == ["real.txt"]
    assert (await fs.glob("*", base=".", limit=50)).items == ["real.txt"]
    found, _ = await fs.grep("needle", base=".", glob=None, limit=50, ignore_case=False)
    assert [m.path for m in found] == ["real.txt"]


# --- (5) the refusals are unchanged ------------------------------------------------------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.txt").write_text(OUTSIDE_TEXT)
    return path


async def test_hard_link_is_refused_and_nothing_is_left(
    fs: LocalFileSystem, project: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", project / "hard.txt")
    with pytest.raises(SandboxViolation, match="more than one hard link"):
        await fs.write_text("hard.txt", "pwned")
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT
    assert (project / "hard.txt").read_text() == OUTSIDE_TEXT
    assert _every_temp(project) == []


async def test_symlinks_out_are_refused_and_nothing_is_left(
    fs: LocalFileSystem, project: Path, outside: Path
) -> None:
    (project / "link.txt").symlink_to(outside / "secret.txt")
    (project / "linkdir").symlink_to(outside)
    for path in ("link.txt", "linkdir/secret.txt", "linkdir/new.txt"):
        with pytest.raises(SandboxViolation):
            await fs.write_text(path, "pwned")
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (project / "link.txt").is_symlink()
    assert _every_temp(project) == [] and _every_temp(outside) == []


async def test_a_symlink_swapped_in_after_the_check_is_refused(
    fs: LocalFileSystem, project: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = project / "victim.txt"
    victim.write_text("inside")
    real_check = fs.policy.check_write

    def check_then_swap(path: str) -> tuple[str, str]:
        result = real_check(path)
        victim.unlink()
        victim.symlink_to(outside / "secret.txt")
        return result

    monkeypatch.setattr(fs.policy, "check_write", check_then_swap)
    with pytest.raises(SandboxViolation, match="symbolic link"):
        await fs.write_text("victim.txt", "pwned")
    assert (outside / "secret.txt").read_text() == OUTSIDE_TEXT
    assert victim.is_symlink()
    assert _every_temp(project) == []


async def test_a_symlink_inside_the_project_is_written_through(
    fs: LocalFileSystem, project: Path
) -> None:
    (project / "real.txt").write_text("real")
    (project / "real.txt").chmod(0o700)
    (project / "alias.txt").symlink_to("real.txt")
    await fs.write_text("alias.txt", "changed")
    assert (project / "alias.txt").is_symlink()
    assert (project / "real.txt").read_text() == "changed"
    assert stat.S_IMODE((project / "real.txt").stat().st_mode) == 0o700
    assert _every_temp(project) == []
