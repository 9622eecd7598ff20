"""SubprocessRunner with real subprocesses: groups killed on timeout and cancel, output caps."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from soong_agent.adapters.process import SubprocessRunner
from soong_agent.ports.process import ProcessResult, ProcessRunner

BASH = "/bin/bash"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}

pytestmark = pytest.mark.skipif(not os.access(BASH, os.X_OK), reason="needs /bin/bash")


def live_members(pgid: int) -> list[int]:
    """Processes of the group that are not zombies (a killed orphan stays a zombie until the
    init process reaps it, which some container inits do late)."""
    live = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            live.append(int(entry.name))
    return live


def group_gone(pgid: int, within_s: float = 5.0) -> bool:
    """Whether no live process of the group remains (waiting up to `within_s` for that)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if Path("/proc/self/stat").exists() and not live_members(pgid):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


async def wait_for(path: Path, within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.02)


async def run(
    command: str, tmp: Path, *, timeout_s: float = 30.0, out: int = 10_000, err: int = 10_000
) -> tuple[ProcessResult, float]:
    started = time.monotonic()
    result = await asyncio.wait_for(
        SubprocessRunner().run(
            [BASH, "-c", command],
            cwd=str(tmp),
            env=ENV,
            timeout_s=timeout_s,
            stdout_limit=out,
            stderr_limit=err,
        ),
        60,
    )
    return result, time.monotonic() - started


def test_is_a_process_runner() -> None:
    assert isinstance(SubprocessRunner(), ProcessRunner)


async def test_exit_code_output_and_cwd(tmp_path: Path) -> None:
    result = await SubprocessRunner().run(
        [BASH, "-c", "pwd; echo oops >&2; exit 3"],
        cwd=str(tmp_path),
        env=ENV,
        timeout_s=30,
        stdout_limit=1000,
        stderr_limit=1000,
    )
    assert result.exit_code == 3
    assert result.stdout == f"{tmp_path.resolve()}\n"
    assert result.stderr == "oops\n"
    assert not result.timed_out
    assert result.stdout_truncated == result.stderr_truncated == 0
    assert result.duration_s >= 0


async def test_stdin_bytes_and_devnull(tmp_path: Path) -> None:
    runner = SubprocessRunner()

    async def cat(stdin: bytes | None) -> ProcessResult:
        return await runner.run(
            ["cat"],
            cwd=str(tmp_path),
            env=ENV,
            timeout_s=30,
            stdout_limit=100,
            stderr_limit=100,
            stdin=stdin,
        )

    assert (await cat(b"hello")).stdout == "hello"
    none = await cat(None)
    assert none.stdout == "" and none.exit_code == 0  # /dev/null: cat ends at once


async def test_timeout_kills_grandchildren(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    pid_file = tmp_path / "pid"
    command = f"echo $$ > {pid_file}; (sleep 2; touch {marker}) & sleep 30"
    result, took = await run(command, tmp_path, timeout_s=0.5)
    assert result.timed_out
    assert result.exit_code is None
    assert took < 10
    pgid = int(pid_file.read_text())
    await asyncio.sleep(3)
    assert not marker.exists()
    assert group_gone(pgid)


async def test_grandchild_holding_the_pipe_does_not_hang(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    result, took = await run(f"echo $$ > {pid_file}; sleep 30 & echo done", tmp_path)
    assert result.exit_code == 0
    assert result.stdout == "done\n"
    assert took < 10
    await asyncio.sleep(0.2)
    assert group_gone(int(pid_file.read_text()))


async def test_background_job_without_pipes_is_killed_too(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    command = f"(sleep 1; touch {marker}) >/dev/null 2>&1 </dev/null & echo started"
    result, _ = await run(command, tmp_path)
    assert result.exit_code == 0
    await asyncio.sleep(2)
    assert not marker.exists()


async def test_stdout_cap_counts_the_dropped_bytes(tmp_path: Path) -> None:
    result, took = await run("yes | head -c 5000000", tmp_path, out=1000)
    assert result.exit_code == 0
    assert len(result.stdout) == 1000
    assert result.stdout.startswith("y\ny\n")
    assert result.stdout_truncated == 5_000_000 - 1000
    assert took < 30


async def test_stderr_cap_counts_the_dropped_bytes(tmp_path: Path) -> None:
    result, _ = await run("yes | head -c 3000000 >&2; echo out", tmp_path, err=500)
    assert result.exit_code == 0
    assert len(result.stderr) == 500
    assert result.stderr_truncated == 3_000_000 - 500
    assert result.stdout == "out\n"
    assert result.stdout_truncated == 0


async def test_output_is_decoded_with_replacement(tmp_path: Path) -> None:
    result, _ = await run(r"printf 'a\xffb\xc3\xa9'", tmp_path)
    assert result.stdout == "a\ufffdbé"


async def test_cancel_kills_the_group_and_propagates(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    pid_file = tmp_path / "pid"
    started = tmp_path / "started"
    command = f"echo $$ > {pid_file}; (sleep 2; touch {marker}) & touch {started}; sleep 30"
    task = asyncio.create_task(
        SubprocessRunner().run(
            [BASH, "-c", command],
            cwd=str(tmp_path),
            env=ENV,
            timeout_s=60,
            stdout_limit=100,
            stderr_limit=100,
        )
    )
    await wait_for(started)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert task.cancelled()
    pgid = int(pid_file.read_text())
    await asyncio.sleep(3)
    assert not marker.exists()
    assert group_gone(pgid)


async def test_sigterm_ignoring_group_gets_sigkill(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    command = f"trap '' TERM; echo $$ > {pid_file}; sleep 30 & wait; sleep 30"
    result, took = await run(command, tmp_path, timeout_s=0.3)
    assert result.timed_out
    assert took < 10
    await asyncio.sleep(0.2)
    assert group_gone(int(pid_file.read_text()))


async def test_only_the_given_environment_reaches_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOONG_CANARY_SECRET", "canary-4f9e")
    result, _ = await run("env", tmp_path)
    assert "canary-4f9e" not in result.stdout
    assert "SOONG_CANARY_SECRET" not in result.stdout
    assert "LANG=C.UTF-8" in result.stdout


async def test_missing_program_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        await SubprocessRunner().run(
            [str(tmp_path / "no-such-program")],
            cwd=str(tmp_path),
            env=ENV,
            timeout_s=5,
            stdout_limit=10,
            stderr_limit=10,
        )
