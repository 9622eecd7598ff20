"""Background commands on real processes (BG-1): the OS sandbox holds, the whole group ends, and
no command outlives the process that started it, however that process ends.

Whether a process is still there is read from /proc (its command line carries a marker unique
to the test); a process that was sent SIGKILL may take a moment to leave, so absence is
waited for (up to a deadline), never timed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from soong_agent.adapters.ossandbox import LandlockSandbox
from soong_agent.adapters.process import SubprocessRunner
from soong_agent.ports.ossandbox import CommandSandbox
from tests.integration.test_os_sandbox import _sandbox
from tests.support.os_sandbox_child import World, make_world

BASH = "/bin/bash"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or not os.access(BASH, os.X_OK),
    reason="background commands are checked on Linux with /bin/bash",
)


def marker() -> str:
    """A `sleep` argument no other process on the machine has: ``1000.<random digits>``."""
    return f"1000.{uuid.uuid4().int % 10**12:012d}"


def holding(mark: str) -> list[int]:
    """The pids of the ``sleep <mark>`` processes (a zombie has no command line: not counted)."""
    wanted = b"sleep\0" + mark.encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as file:
                cmdline = file.read()
        except OSError:
            continue
        if cmdline == wanted:
            found.append(int(entry))
    return found


def gone(mark: str, deadline_s: float = 15.0) -> bool:
    """Whether every process holding `mark` is gone within the deadline."""
    end = time.monotonic() + deadline_s
    while holding(mark):
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


async def until_running(mark: str) -> None:
    for _ in range(500):
        if holding(mark):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"no process with {mark} started")


@pytest.fixture(params=("bubblewrap", "landlock"))
def sandbox(request: pytest.FixtureRequest) -> Iterator[CommandSandbox]:
    chosen = _sandbox(request.param)
    yield chosen
    if isinstance(chosen, LandlockSandbox):
        chosen.close()


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


async def test_a_background_command_runs_in_the_same_os_sandbox(
    sandbox: CommandSandbox, world: World
) -> None:
    runner = SubprocessRunner(term_grace_s=0.2, sandbox=sandbox, policy=world.policy())
    process = await runner.start(
        [BASH, "-c", 'echo inside > made.txt; D="$OUT"; echo pwned > "$D/pwned.txt"'],
        cwd=str(world.project),
        env=world.env(),
        timeout_s=30,
        stdout_limit=10_000,
        stderr_limit=10_000,
    )
    await asyncio.wait_for(process.wait(), 60)
    output = process.read()
    assert output.state == "exited" and output.exit_code != 0
    assert (world.project / "made.txt").read_text() == "inside\n"
    assert not (world.outside / "pwned.txt").exists()
    (denial,) = output.denials
    assert f"refused writing {world.outside}/pwned.txt" in denial.note()
    assert process.sandbox == sandbox.mechanism


async def test_kill_ends_the_whole_group(tmp_path: Path) -> None:
    mark = marker()
    process = await SubprocessRunner(term_grace_s=0.2).start(
        [BASH, "-c", f"sleep {mark} & sleep {mark} & wait"],
        cwd=str(tmp_path),
        env=ENV,
        timeout_s=60,
        stdout_limit=100,
        stderr_limit=100,
    )
    await until_running(mark)
    await asyncio.wait_for(process.kill(), 60)
    assert process.state == "killed"
    assert gone(mark)


async def test_what_an_ended_command_left_in_its_group_is_killed(tmp_path: Path) -> None:
    mark = marker()
    process = await SubprocessRunner().start(
        [BASH, "-c", f"sleep {mark} & echo started"],
        cwd=str(tmp_path),
        env=ENV,
        timeout_s=60,
        stdout_limit=100,
        stderr_limit=100,
    )
    await asyncio.wait_for(process.wait(), 60)
    assert (process.state, process.exit_code) == ("exited", 0)
    assert process.read().stdout == "started\n"
    assert gone(mark)


STARTER = """
import asyncio, os, sys, time
from soong_agent.adapters.process import SubprocessRunner

async def main() -> None:
    mechanism, mark, how = sys.argv[1:4]
    runner = SubprocessRunner()
    if mechanism != "none":
        from soong_agent.adapters.ossandbox import BubblewrapSandbox, LandlockSandbox
        from soong_agent.adapters.ossandbox.bubblewrap import find_bwrap
        from soong_agent.ports.ossandbox import SandboxPolicy
        policy = SandboxPolicy(project=os.getcwd(), write_roots=(os.getcwd(),))
        if mechanism == "bubblewrap":
            binary, source = find_bwrap()
            sandbox = BubblewrapSandbox(binary, source=source)
        else:
            sandbox = LandlockSandbox(protect_agent=False)
        runner = SubprocessRunner(sandbox=sandbox, policy=policy)
    await runner.start(
        ["/bin/bash", "-c", f"sleep {mark} & sleep {mark}"],
        cwd=os.getcwd(), env={"PATH": "/usr/bin:/bin"}, timeout_s=600,
        stdout_limit=100, stderr_limit=100,
    )
    print("started", flush=True)
    sys.stdin.readline()  # the test saw the command run
    if how == "exit":
        os._exit(0)  # what the CLI does after a second Ctrl-C: nothing is closed
    time.sleep(600)  # waits for the test's SIGKILL

asyncio.run(main())
"""


@pytest.mark.parametrize("mechanism", ["none", "bubblewrap", "landlock"])
@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_no_background_command_outlives_the_process_that_started_it(
    mechanism: str, how: str, tmp_path: Path
) -> None:
    if mechanism != "none":
        _sandbox(mechanism)  # skips where the mechanism does not work
    mark = marker()
    child = subprocess.Popen(
        [sys.executable, "-c", STARTER, mechanism, mark, how],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == "started\n"
        end = time.monotonic() + 15
        while len(holding(mark)) < 2 and time.monotonic() < end:
            time.sleep(0.02)
        assert len(holding(mark)) == 2
        if how == "sigkill":
            child.send_signal(signal.SIGKILL)
        else:
            child.stdin.write("go\n")
            child.stdin.flush()
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert gone(mark), f"left running: {holding(mark)}"


async def test_the_sdk_runtime_kills_its_background_commands_when_it_closes(
    tmp_path: Path,
) -> None:
    """Between runs a background command goes on (a later run may read it); `aclose` ends it."""
    from soong_agent import AgentRuntime
    from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config

    home, project = tmp_path / "home", tmp_path / "project"
    write_minimal_config(home)
    project.mkdir()
    mark = marker()
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                ("run_command", {"command": f"sleep {mark}", "background": True})
            ),
            ScriptedResponse.text("started"),
        ]
    )
    runtime = AgentRuntime(project, home, lambda request: "allow_once", model=model)
    try:
        result = await (await runtime.run("start it")).wait()
        assert result.status == "completed", result.reason
        await until_running(mark)
        assert len(holding(mark)) == 1  # the run ended, the runtime is open: it goes on
    finally:
        await runtime.aclose()
    assert gone(mark), f"left running: {holding(mark)}"


class _CancelledOnTheWayBack:
    """A sandbox that spawns the command, then its caller is cancelled before it gets the
    process back (as can happen across the Landlock spawner's thread)."""

    mechanism = "none"
    unsandboxed = True

    def __init__(self, mark: str) -> None:
        self.mark = mark

    async def run(self, argv: Any, policy: Any, start: Any) -> Any:
        await start(list(argv))
        for _ in range(500):  # the command really runs before the cancellation
            if len(holding(self.mark)) == 2:
                break
            await asyncio.sleep(0.02)
        raise asyncio.CancelledError

    def denials(self, output: str, policy: Any, cwd: str) -> tuple[()]:
        return ()


async def test_a_start_cancelled_after_the_spawn_leaves_no_process(tmp_path: Path) -> None:
    from soong_agent.ports.ossandbox import SandboxPolicy

    mark = marker()
    runner = SubprocessRunner(
        sandbox=_CancelledOnTheWayBack(mark),  # type: ignore[arg-type]
        policy=SandboxPolicy(project=str(tmp_path), write_roots=(str(tmp_path),)),
    )
    with pytest.raises(asyncio.CancelledError):
        await runner.start(
            [BASH, "-c", f"sleep {mark} & sleep {mark}; wait"],
            cwd=str(tmp_path),
            env=ENV,
            timeout_s=60,
            stdout_limit=100,
            stderr_limit=100,
        )
    assert gone(mark, deadline_s=5), f"left running: {holding(mark)}"
