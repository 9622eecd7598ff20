"""The CommandSandbox contract (SBX-3), on every implementation: NoSandbox, BubblewrapSandbox and
LandlockSandbox where they work on this host, and the fake of `soong_agent.testing`
(RecordingCommandSandbox). RefusingSandbox has its own case: it never starts.

What a caller of the port relies on: `run` calls `start` exactly once with an argv that ends
with the command's own argv, returns what `start` returns and raises what it raises;
cancelling the caller cancels `start` and returns only after `start` has ended (so the
runner's kill of the process group is done); a real spawn through the sandbox works;
`denials` is a tuple of `SandboxDenial` (empty for clean output); `unsandboxed` is True
exactly when the mechanism is ``none``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence

import pytest

from soong_agent.adapters.ossandbox import (
    BubblewrapSandbox,
    LandlockSandbox,
    NoSandbox,
    RefusingSandbox,
    find_bwrap,
    probe_host,
)
from soong_agent.adapters.process import SubprocessRunner
from soong_agent.ports.ossandbox import (
    CommandSandbox,
    SandboxDenial,
    SandboxPolicy,
    SandboxUnavailable,
)
from soong_agent.ports.process import ProcessResult
from soong_agent.testing import RecordingCommandSandbox


def _working(mechanism: str) -> None:
    status = probe_host(every_mechanism=True).status(mechanism)  # type: ignore[arg-type]
    if status is None or not status.works:
        pytest.skip(f"{mechanism} does not work on this host: {status and status.cause}")


def _none() -> CommandSandbox:
    return NoSandbox()


def _bubblewrap() -> CommandSandbox:
    _working("bubblewrap")
    found = find_bwrap()
    assert found is not None
    return BubblewrapSandbox(found[0], source=found[1])


def _landlock() -> CommandSandbox:
    _working("landlock")
    return LandlockSandbox(protect_agent=False)


SPAWNING: dict[str, Callable[[], CommandSandbox]] = {
    "none": _none,
    "bubblewrap": _bubblewrap,
    "landlock": _landlock,
}
"""The implementations that spawn what `start` gives them (the fake spawns nothing itself)."""
SANDBOXES: dict[str, Callable[[], CommandSandbox]] = {**SPAWNING, "fake": RecordingCommandSandbox}


def _made(maker: Callable[[], CommandSandbox]) -> Iterator[CommandSandbox]:
    made = maker()
    yield made
    if isinstance(made, LandlockSandbox):
        made.close()


@pytest.fixture(params=sorted(SANDBOXES))
def sandbox(request: pytest.FixtureRequest) -> Iterator[CommandSandbox]:
    yield from _made(SANDBOXES[request.param])


@pytest.fixture(params=sorted(SPAWNING))
def spawning_sandbox(request: pytest.FixtureRequest) -> Iterator[CommandSandbox]:
    yield from _made(SPAWNING[request.param])


@pytest.fixture
def policy(tmp_path: object) -> SandboxPolicy:
    return SandboxPolicy(project=str(tmp_path), write_roots=(str(tmp_path),))


def test_it_is_a_command_sandbox(sandbox: CommandSandbox) -> None:
    assert isinstance(sandbox, CommandSandbox)
    assert sandbox.mechanism in ("bubblewrap", "landlock", "none")
    assert sandbox.unsandboxed is (sandbox.mechanism == "none")


async def test_start_is_called_once_with_the_command_at_the_end(
    sandbox: CommandSandbox, policy: SandboxPolicy
) -> None:
    calls: list[list[str]] = []

    async def start(argv: Sequence[str]) -> str:
        calls.append(list(argv))
        return "result"

    assert await sandbox.run(["/bin/echo", "a b"], policy, start) == "result"
    assert len(calls) == 1
    assert calls[0][-2:] == ["/bin/echo", "a b"]


async def test_what_start_raises_is_raised(sandbox: CommandSandbox, policy: SandboxPolicy) -> None:
    async def start(argv: Sequence[str]) -> None:
        raise FileNotFoundError("no such program")

    with pytest.raises(FileNotFoundError, match="no such program"):
        await sandbox.run(["/nonexistent"], policy, start)


async def test_cancelling_waits_for_start_to_end(
    sandbox: CommandSandbox, policy: SandboxPolicy
) -> None:
    began = asyncio.Event()
    loop = asyncio.get_running_loop()
    ended: list[str] = []

    async def start(argv: Sequence[str]) -> None:
        loop.call_soon_threadsafe(began.set)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)  # the runner's kill of the group takes a moment
            ended.append("cleaned up")
            raise

    task = asyncio.ensure_future(sandbox.run(["/bin/true"], policy, start))
    await asyncio.wait_for(began.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ended == ["cleaned up"]


async def test_a_real_command_runs_through_it(
    spawning_sandbox: CommandSandbox, policy: SandboxPolicy
) -> None:
    sandbox = spawning_sandbox
    runner = SubprocessRunner()

    async def start(argv: Sequence[str]) -> ProcessResult:
        return await runner.run(
            argv,
            cwd=policy.project,
            env={"PATH": "/usr/bin:/bin"},
            timeout_s=20,
            stdout_limit=1000,
            stderr_limit=1000,
        )

    result = await sandbox.run(["/bin/sh", "-c", "echo hi > f && cat f"], policy, start)
    assert (result.exit_code, result.stdout) == (0, "hi\n")


def test_denials_is_a_tuple_and_empty_for_clean_output(
    sandbox: CommandSandbox, policy: SandboxPolicy
) -> None:
    assert sandbox.denials("", policy, policy.project) == ()
    assert sandbox.denials("all fine\n", policy, policy.project) == ()
    found = sandbox.denials("touch: cannot touch '/etc/x': Read-only file system", policy, "/")
    assert isinstance(found, tuple)
    assert all(isinstance(d, SandboxDenial) for d in found)
    if sandbox.mechanism == "none":
        assert found == ()


async def test_a_refusing_sandbox_never_starts(policy: SandboxPolicy) -> None:
    sandbox = RefusingSandbox("userns refused; no Landlock", "sysctl X")
    assert isinstance(sandbox, CommandSandbox)
    assert sandbox.unsandboxed and sandbox.mechanism == "none"
    started: list[object] = []

    async def start(argv: Sequence[str]) -> None:
        started.append(argv)

    with pytest.raises(SandboxUnavailable, match="userns refused") as caught:
        await sandbox.run(["/bin/true"], policy, start)
    assert isinstance(caught.value, OSError)  # callers already report these as "not started"
    assert started == []
