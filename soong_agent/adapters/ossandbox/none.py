"""No OS sandbox (SBX-3): explicitly off, or none works and the mode allows that, or refusing.

`NoSandbox` runs commands as they are and says so (`unsandboxed`): with ``sandbox.os = "off"``
because the user chose it, with ``"auto"`` because no mechanism works on this host (the
choice printed one loud line). `RefusingSandbox` is ``"required"`` with no mechanism: every
command is refused with the probe's cause and fix.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from soong_agent.ports.ossandbox import (
    Mechanism,
    SandboxDenial,
    SandboxPolicy,
    SandboxUnavailable,
)

T = TypeVar("T")


class NoSandbox:
    """Runs commands without confinement; `reason` says why (shown by `sandbox check`)."""

    def __init__(self, reason: str = 'sandbox.os = "off"') -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"NoSandbox({self.reason!r})"

    @property
    def mechanism(self) -> Mechanism:
        return "none"

    @property
    def unsandboxed(self) -> bool:
        return True

    async def run(
        self,
        argv: Sequence[str],
        policy: SandboxPolicy,
        start: Callable[[Sequence[str]], Awaitable[T]],
    ) -> T:
        return await start(list(argv))

    def denials(self, output: str, policy: SandboxPolicy, cwd: str) -> tuple[SandboxDenial, ...]:
        return ()


class RefusingSandbox:
    """Refuses every command: ``sandbox.os = "required"`` and no mechanism works."""

    def __init__(self, cause: str, fix: str = "") -> None:
        self.cause = cause
        self.fix = fix

    def __repr__(self) -> str:
        return f"RefusingSandbox({self.cause!r})"

    @property
    def mechanism(self) -> Mechanism:
        return "none"

    @property
    def unsandboxed(self) -> bool:
        return True

    def message(self) -> str:
        """Why commands are refused, and what to do."""
        text = f'sandbox.os = "required" and no OS sandbox works on this host ({self.cause})'
        if self.fix:
            text += f". Fix: {self.fix}"
        return text + ". `soong-agent sandbox check` shows the details."

    async def run(
        self,
        argv: Sequence[str],
        policy: SandboxPolicy,
        start: Callable[[Sequence[str]], Awaitable[T]],
    ) -> T:
        raise SandboxUnavailable(self.message())

    def denials(self, output: str, policy: SandboxPolicy, cwd: str) -> tuple[SandboxDenial, ...]:
        return ()
