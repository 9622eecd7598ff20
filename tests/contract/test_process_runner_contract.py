"""The ProcessRunner contract: the scripted fake and SubprocessRunner on real subprocesses.

Each case runs a real bash command line; the fake is told what that line does (`declare`), the
real runner finds out by running it. Both must then report the same `ProcessResult`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from soong_agent.adapters.process import SubprocessRunner
from soong_agent.adapters.process.background import SubprocessBackground
from soong_agent.ports.process import (
    BackgroundOutput,
    BackgroundProcess,
    ProcessResult,
    ProcessRunner,
)
from soong_agent.testing import ScriptedBackground, ScriptedProcess, ScriptedProcessRunner

BASH = "/bin/bash"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}

pytestmark = pytest.mark.skipif(not os.access(BASH, os.X_OK), reason="needs /bin/bash")


@dataclass
class Kit:
    runner: ProcessRunner
    declare: Callable[[list[str], ScriptedProcess], None]


def _fake() -> Kit:
    runner = ScriptedProcessRunner()

    def declare(argv: list[str], does: ScriptedProcess) -> None:
        runner.on(argv, does)

    return Kit(runner, declare)


def _real() -> Kit:
    return Kit(SubprocessRunner(term_grace_s=0.2), lambda _argv, _result: None)


KITS: dict[str, Callable[[], Kit]] = {"scripted": _fake, "subprocess": _real}


@pytest.fixture(params=sorted(KITS))
def kit(request: pytest.FixtureRequest) -> Kit:
    return KITS[request.param]()


async def run(
    kit: Kit,
    line: str,
    does: ScriptedProcess,
    tmp: Path,
    *,
    timeout_s: float = 30.0,
    out: int = 10_000,
    err: int = 10_000,
    stdin: bytes | None = None,
    env: dict[str, str] | None = None,
) -> ProcessResult:
    argv = [BASH, "-c", line]
    kit.declare(argv, does)
    return await asyncio.wait_for(
        kit.runner.run(
            argv,
            cwd=str(tmp),
            env=ENV if env is None else env,
            timeout_s=timeout_s,
            stdout_limit=out,
            stderr_limit=err,
            stdin=stdin,
        ),
        60,
    )


def test_implements_the_port(kit: Kit) -> None:
    assert isinstance(kit.runner, ProcessRunner)


async def test_exit_code_and_both_streams(kit: Kit, tmp_path: Path) -> None:
    result = await run(
        kit,
        "printf out; printf err >&2; exit 3",
        ScriptedProcess(stdout="out", stderr="err", exit_code=3),
        tmp_path,
    )
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out", "err")
    assert (result.stdout_truncated, result.stderr_truncated, result.timed_out) == (0, 0, False)
    assert 0 <= result.duration_s < 30


async def test_output_is_cut_at_the_limit_in_bytes(kit: Kit, tmp_path: Path) -> None:
    result = await run(
        kit,
        "printf 'x%.0s' {1..100}; printf 'é%.0s' {1..10} >&2",
        ScriptedProcess(stdout="x" * 100, stderr="é" * 10),
        tmp_path,
        out=10,
        err=5,
    )
    assert (result.stdout, result.stdout_truncated) == ("x" * 10, 90)
    # 5 bytes keep two whole characters and half of the third, shown as a replacement character
    assert (result.stderr, result.stderr_truncated) == ("éé\ufffd", 15)


async def test_a_zero_or_negative_limit_keeps_nothing(kit: Kit, tmp_path: Path) -> None:
    result = await run(
        kit, "printf abc; printf de >&2", ScriptedProcess("abc", "de"), tmp_path, out=0, err=-1
    )
    assert (result.stdout, result.stdout_truncated) == ("", 3)
    assert (result.stderr, result.stderr_truncated) == ("", 2)


async def test_invalid_utf8_is_replaced(kit: Kit, tmp_path: Path) -> None:
    result = await run(kit, r"printf '\xff\xfeok'", ScriptedProcess(b"\xff\xfeok"), tmp_path)
    assert result.stdout == "\ufffd\ufffdok"


async def test_stdin_is_given_to_the_command(kit: Kit, tmp_path: Path) -> None:
    result = await run(kit, "cat", ScriptedProcess("abc"), tmp_path, stdin=b"abc")
    assert (result.exit_code, result.stdout) == (0, "abc")


async def test_the_environment_is_exactly_the_one_given(kit: Kit, tmp_path: Path) -> None:
    env = {**ENV, "ONLY_THIS": "1"}
    result = await run(
        kit, 'printf "%s" "$ONLY_THIS${HOME:-unset}"', ScriptedProcess("1unset"), tmp_path, env=env
    )
    assert result.stdout == "1unset"


async def test_timeout_kills_and_keeps_the_output_so_far(kit: Kit, tmp_path: Path) -> None:
    started = time.monotonic()
    result = await run(
        kit,
        "printf partial; sleep 30",
        ScriptedProcess("partial", delay_s=30),
        tmp_path,
        timeout_s=0.3,
    )
    elapsed = time.monotonic() - started
    assert result.timed_out
    assert result.exit_code is None
    assert result.stdout == "partial"
    assert 0.3 <= elapsed < 10
    assert result.duration_s >= 0.3


async def test_a_command_within_its_timeout_is_not_cut(kit: Kit, tmp_path: Path) -> None:
    result = await run(
        kit, "sleep 0.05; printf done", ScriptedProcess("done", delay_s=0.05), tmp_path, timeout_s=5
    )
    assert (result.timed_out, result.exit_code, result.stdout) == (False, 0, "done")


async def test_cancelling_the_caller_raises_cancelled_error(kit: Kit, tmp_path: Path) -> None:
    task = asyncio.create_task(
        run(kit, "sleep 30", ScriptedProcess(delay_s=30), tmp_path, timeout_s=60)
    )
    await asyncio.sleep(0.3)
    started = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - started < 10


async def test_empty_argv_is_refused(kit: Kit, tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        await kit.runner.run(
            [], cwd=str(tmp_path), env=ENV, timeout_s=5, stdout_limit=10, stderr_limit=10
        )


async def test_a_missing_program_raises_oserror(kit: Kit, tmp_path: Path) -> None:
    argv = [str(tmp_path / "no-such-program")]
    kit.declare(argv, ScriptedProcess.missing())
    with pytest.raises(OSError):
        await kit.runner.run(
            argv, cwd=str(tmp_path), env=ENV, timeout_s=5, stdout_limit=10, stderr_limit=10
        )


async def test_calls_do_not_share_state(kit: Kit, tmp_path: Path) -> None:
    first, second = await asyncio.gather(
        run(kit, "sleep 0.1; printf one", ScriptedProcess("one", delay_s=0.1), tmp_path),
        run(kit, "printf two >&2; exit 1", ScriptedProcess(stderr="two", exit_code=1), tmp_path),
    )
    assert (first.exit_code, first.stdout, first.stderr) == (0, "one", "")
    assert (second.exit_code, second.stdout, second.stderr) == (1, "", "two")


def test_find_program_says_where_bash_is_or_none() -> None:
    """`run_command` asks the runner where bash is (the application does no OS lookup)."""
    import shutil

    from soong_agent.adapters.process.runner import SubprocessRunner
    from soong_agent.testing import ScriptedProcessRunner

    real = SubprocessRunner().find_program("bash")
    assert real is not None and real.endswith("/bash") and real == (
        "/bin/bash" if shutil.which("bash", path="/bin") else shutil.which("bash")
    )
    assert SubprocessRunner().find_program("no-such-program-here") is None
    fake = ScriptedProcessRunner()
    assert fake.find_program("bash") == "/bin/bash"
    fake.missing.add("bash")
    assert fake.find_program("bash") is None


# --- background commands (BG-1) ------------------------------------------------------------


async def start(
    kit: Kit,
    line: str,
    does: ScriptedProcess,
    tmp: Path,
    *,
    timeout_s: float = 30.0,
    out: int = 10_000,
    err: int = 10_000,
) -> BackgroundProcess:
    argv = [BASH, "-c", line]
    kit.declare(argv, does)
    return await kit.runner.start(
        argv, cwd=str(tmp), env=ENV, timeout_s=timeout_s, stdout_limit=out, stderr_limit=err
    )


async def read_until(process: BackgroundProcess, text: str) -> BackgroundOutput:
    """Read until `text` arrived (a real command writes when it gets there), all reads joined."""
    seen: list[BackgroundOutput] = []
    for _ in range(400):
        seen.append(process.read())
        if text in "".join(o.stdout for o in seen):
            break
        await asyncio.sleep(0.025)
    last = seen[-1]
    return BackgroundOutput(
        stdout="".join(o.stdout for o in seen),
        stderr="".join(o.stderr for o in seen),
        state=last.state,
        exit_code=last.exit_code,
    )


async def test_a_background_command_returns_at_once_and_is_read_after_its_end(
    kit: Kit, tmp_path: Path
) -> None:
    process = await start(
        kit,
        "printf out; printf err >&2; exit 3",
        ScriptedProcess(stdout="out", stderr="err", exit_code=3),
        tmp_path,
    )
    assert isinstance(process, BackgroundProcess)
    assert isinstance(process, SubprocessBackground | ScriptedBackground)
    await asyncio.wait_for(process.wait(), 60)
    first = process.read()
    assert (first.stdout, first.stderr, first.state, first.exit_code) == ("out", "err", "exited", 3)
    assert (first.stdout_dropped, first.stderr_dropped) == (0, 0)
    again = process.read()  # only what came since the previous read
    assert (again.stdout, again.stderr, again.state, again.exit_code) == ("", "", "exited", 3)
    assert (process.state, process.exit_code) == ("exited", 3)


async def test_output_is_read_while_it_runs_and_kill_ends_it(kit: Kit, tmp_path: Path) -> None:
    process = await start(
        kit, "printf first; sleep 30", ScriptedProcess(stdout="first", delay_s=30), tmp_path
    )
    seen = await read_until(process, "first")
    assert (seen.stdout, seen.state, seen.exit_code) == ("first", "running", None)
    assert process.read().stdout == ""
    await asyncio.wait_for(process.kill(), 60)
    assert (process.state, process.exit_code) == ("killed", -15)
    await asyncio.wait_for(process.wait(), 60)  # it has ended: returns at once
    await process.kill()  # killing what ended already does nothing
    assert process.state == "killed"


async def test_a_background_command_is_killed_when_its_timeout_passes(
    kit: Kit, tmp_path: Path
) -> None:
    process = await start(
        kit,
        "printf partial; sleep 30",
        ScriptedProcess("partial", delay_s=30),
        tmp_path,
        timeout_s=0.3,
    )
    await asyncio.wait_for(process.wait(), 60)
    output = process.read()
    assert (output.state, output.exit_code, output.stdout) == ("timed_out", -15, "partial")


async def test_unread_output_keeps_the_newest_bytes_up_to_the_limit(
    kit: Kit, tmp_path: Path
) -> None:
    process = await start(
        kit,
        "printf 'x%.0s' {1..90}; printf 'y%.0s' {1..10}; printf 'é%.0s' {1..10} >&2",
        ScriptedProcess("x" * 90 + "y" * 10, "é" * 10),
        tmp_path,
        out=10,
        err=5,
    )
    await asyncio.wait_for(process.wait(), 60)
    output = process.read()
    assert (output.stdout, output.stdout_dropped) == ("y" * 10, 90)
    # 5 bytes end in two whole characters; the half one before them is dropped whole
    assert (output.stderr, output.stderr_dropped) == ("éé", 16)


async def test_tail_gives_the_last_lines_read_or_not(kit: Kit, tmp_path: Path) -> None:
    process = await start(
        kit, "printf 'a\\nb\\nc\\nd\\n'", ScriptedProcess("a\nb\nc\nd\n"), tmp_path
    )
    await asyncio.wait_for(process.wait(), 60)
    assert process.read().stdout == "a\nb\nc\nd\n"
    assert process.tail(2) == "c\nd"
    assert process.tail(0) == ""


async def test_starting_a_missing_program_or_nothing_raises(kit: Kit, tmp_path: Path) -> None:
    argv = [str(tmp_path / "no-such-program")]
    kit.declare(argv, ScriptedProcess.missing())
    with pytest.raises(OSError):
        await kit.runner.start(
            argv, cwd=str(tmp_path), env=ENV, timeout_s=5, stdout_limit=10, stderr_limit=10
        )
    with pytest.raises(ValueError):
        await kit.runner.start(
            [], cwd=str(tmp_path), env=ENV, timeout_s=5, stdout_limit=10, stderr_limit=10
        )
