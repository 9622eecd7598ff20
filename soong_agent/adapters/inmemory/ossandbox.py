"""A fake `CommandSandbox` (SBX-3): confines nothing, records what it was asked, reports the
denials it was told to."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from soong_agent.ports.ossandbox import Mechanism, SandboxDenial, SandboxPolicy

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SandboxCall:
    """One `run`: the command's argv and the policy it was to run under."""

    argv: tuple[str, ...]
    policy: SandboxPolicy


class RecordingCommandSandbox:
    """Passes every command to `start` unchanged (behind `prefix`, if given) and records it in
    `calls`; claims to be `mechanism` (``none``: unsandboxed results).

    `denials` are reported for a command whose output mentions the denial's path (or, for a
    denial without one, its error code), so a test can script "the sandbox refused X".
    """

    def __init__(
        self,
        mechanism: Mechanism = "bubblewrap",
        *,
        denials: Sequence[SandboxDenial] = (),
        prefix: Sequence[str] = (),
    ) -> None:
        self._mechanism: Mechanism = mechanism
        self._denials = tuple(denials)
        self._prefix = tuple(prefix)
        self.calls: list[SandboxCall] = []

    def __repr__(self) -> str:
        return f"RecordingCommandSandbox({self._mechanism!r}, calls={len(self.calls)})"

    @property
    def mechanism(self) -> Mechanism:
        return self._mechanism

    @property
    def unsandboxed(self) -> bool:
        return self._mechanism == "none"

    async def run(
        self,
        argv: Sequence[str],
        policy: SandboxPolicy,
        start: Callable[[Sequence[str]], Awaitable[T]],
    ) -> T:
        self.calls.append(SandboxCall(tuple(argv), policy))
        return await start([*self._prefix, *argv])

    def denials(self, output: str, policy: SandboxPolicy, cwd: str) -> tuple[SandboxDenial, ...]:
        if not output or self.unsandboxed:
            return ()
        return tuple(
            d for d in self._denials if (d.path if d.path is not None else d.error) in output
        )
