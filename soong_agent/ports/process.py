"""The process runner port: a command in its own process group, bounded in time and output.

A command is either run to its end (`ProcessRunner.run`) or started in the background
(`ProcessRunner.start`, BG-1), which hands back a `BackgroundProcess` to read, wait for and
kill while the caller goes on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from soong_agent.ports.ossandbox import Mechanism, SandboxDenial


@dataclass(frozen=True, slots=True)
class ProcessResult:
    """How a command ended.

    `exit_code` is None when the process was killed (timeout or cancel); `stdout`/`stderr` are
    decoded text cut at their limits, with `*_truncated` saying how many bytes were dropped.

    `sandbox` is the OS sandbox the command ran in (SBX-3): ``bubblewrap`` or ``landlock``,
    ``none`` when it ran unconfined (`unsandboxed`), None when the runner has no sandbox at
    all (a runner built without one, e.g. in tests). `denials` are what that sandbox refused
    the command, read from its output; each names the policy that applied (the data of a
    ``sandbox_denied`` event).
    """

    exit_code: int | None
    stdout: str
    stderr: str
    stdout_truncated: int = 0
    stderr_truncated: int = 0
    timed_out: bool = False
    duration_s: float = 0.0
    sandbox: Mechanism | None = None
    denials: tuple[SandboxDenial, ...] = ()

    @property
    def unsandboxed(self) -> bool:
        """True when the runner has a sandbox and this command ran without confinement."""
        return self.sandbox == "none"


BackgroundState = Literal["running", "exited", "killed", "timed_out"]
"""How a background process stands: still running, ended on its own (`exit_code` set), ended
by `BackgroundProcess.kill`, or killed when its timeout passed."""


@dataclass(frozen=True, slots=True)
class BackgroundOutput:
    """What a background process wrote since the previous read, and how it stands now.

    `stdout`/`stderr` are decoded text (UTF-8, invalid bytes replaced). When more than a
    stream's limit piled up unread, the oldest bytes were dropped: `*_dropped` counts them.
    `exit_code` is set once the process ended (negative: the signal that ended it, as
    `ProcessResult.exit_code`). `denials` are what the OS sandbox refused, read from this
    output (see `ProcessResult`).
    """

    stdout: str
    stderr: str
    state: BackgroundState
    exit_code: int | None = None
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    denials: tuple[SandboxDenial, ...] = ()


@runtime_checkable
class BackgroundProcess(Protocol):
    """A command running in its own process group beside its caller (`ProcessRunner.start`).

    Its output is collected as it comes, each stream into a buffer that keeps at most the
    stream's limit of unread bytes (the newest). It is killed, with its whole group, when its
    timeout passes or `kill` is called; when the command itself exits, what is left of its group
    is killed too.
    """

    @property
    def state(self) -> BackgroundState:
        """How it stands now (asks the OS, so an exit is seen as soon as it happened)."""
        ...

    @property
    def exit_code(self) -> int | None:
        """Its exit code once it ended (negative: the signal), None while it runs."""
        ...

    @property
    def sandbox(self) -> Mechanism | None:
        """The OS sandbox it runs in (as `ProcessResult.sandbox`)."""
        ...

    def read(self) -> BackgroundOutput:
        """Everything it wrote since the previous read (what reached the pipes by now), and how
        it stands; the buffers are emptied."""
        ...

    def tail(self, lines: int) -> str:
        """Its last `lines` lines of output, both streams, read or not (for an exit notice)."""
        ...

    async def wait(self) -> None:
        """Return once it ended (on its own, by its timeout or killed)."""
        ...

    async def kill(self) -> None:
        """End its process group (SIGTERM, then SIGKILL after a short grace) and return once
        it ended; nothing when it already had."""
        ...


@runtime_checkable
class ProcessRunner(Protocol):
    """Runs commands; on timeout or cancellation the whole process group is killed."""

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        timeout_s: float,
        stdout_limit: int,
        stderr_limit: int,
        stdin: bytes | None = None,
    ) -> ProcessResult:
        """Run `argv` (no shell unless argv names one) and wait for it.

        Raises asyncio.CancelledError after killing the group when the caller is cancelled.
        """
        ...

    async def start(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        timeout_s: float,
        stdout_limit: int,
        stderr_limit: int,
    ) -> BackgroundProcess:
        """Start `argv` in the background (no input), as `run` would start it: same sandbox,
        own process group; it is killed when `timeout_s` has passed. Returns at once.

        Raises ValueError for an empty argv and OSError when it cannot be started, as `run`.
        A started process must be ended by its owner (`kill`) when no longer wanted; the
        runner also makes sure none outlives the process that started it.
        """
        ...

    def find_program(self, name: str) -> str | None:
        """Where the program `name` is, as `run` would start it (`bash`: the shell of
        `run_command`), or None when it is not installed."""
        ...
