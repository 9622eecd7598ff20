"""The process runner port: a command in its own process group, bounded in time and output."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

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

    def find_program(self, name: str) -> str | None:
        """Where the program `name` is, as `run` would start it (`bash`: the shell of
        `run_command`), or None when it is not installed."""
        ...
