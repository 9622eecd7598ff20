"""Commands whose only network is the host's filtering proxy (SBX-4, ``sandbox.network =
"allowlist"``): what a sandbox needs of the proxy, and the bookkeeping around one command.

The proxy itself lives in `adapters.netproxy`; a sandbox is handed one (`CommandProxy`, which
`netproxy.FilteringProxy` is) by the composition root. Around each proxied command the sandbox
opens a session (a token the command's proxy URL carries, so the proxy can name the command a
refused connection came from) and, when the command has ended, keeps what the proxy refused
it for `denials`, which the runner calls right after `run` in the same task (a context
variable carries them from one to the other).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import shlex
from collections.abc import Iterator, Sequence
from typing import Protocol

from soong_agent.ports.ossandbox import (
    Mechanism,
    NetworkDenial,
    SandboxDenial,
    SandboxPolicy,
    SandboxUnavailable,
)


class CommandProxy(Protocol):
    """The filtering proxy as a sandbox uses it (`netproxy.FilteringProxy`)."""

    def tcp_port(self) -> int:
        """The proxy's loopback port, starting it at the first call."""
        ...

    def forwarder_prefix(self) -> list[str]:
        """The argv that, inside a sandbox without a network, serves the proxy's port on the
        sandbox's loopback and runs the command that follows it; starts the proxy."""
        ...

    def command_env(self, token: str) -> dict[str, str]:
        """The variables that point a command's programs at the proxy (with its token)."""
        ...

    def open_session(self, command: str) -> str:
        """A token for one command (`command`: its text)."""
        ...

    def end_session(self, token: str) -> tuple[NetworkDenial, ...]:
        """Forget a command's token; what the proxy refused it."""
        ...


_refused: contextvars.ContextVar[tuple[NetworkDenial, ...]] = contextvars.ContextVar(
    "soong_proxy_refused", default=()
)


def command_text(argv: Sequence[str]) -> str:
    """The command as the user knows it: the script of ``sh -c <script>``, else the argv."""
    if len(argv) >= 3 and argv[-2] == "-c":
        return argv[-1]
    return shlex.join(argv)


def require_proxy(proxy: CommandProxy | None) -> CommandProxy:
    """`proxy`, or SandboxUnavailable when a proxied policy came without one."""
    if proxy is None:
        raise SandboxUnavailable(
            'sandbox.network = "allowlist" but this sandbox was built without the filtering '
            "proxy; the command was not run"
        )
    return proxy


async def started(proxy: CommandProxy) -> int:
    """The proxy's port; the first start (a thread and two sockets) happens off the loop."""
    return await asyncio.to_thread(proxy.tcp_port)


@contextlib.contextmanager
def proxy_session(proxy: CommandProxy, argv: Sequence[str]) -> Iterator[str]:
    """A session for the command `argv` (its token); what the proxy refused it is kept for
    `proxy_denials` when it ends."""
    token = proxy.open_session(command_text(argv))
    try:
        yield token
    finally:
        _refused.set(proxy.end_session(token))


def forget_proxy_denials() -> None:
    """Start a command with nothing refused yet (the runner's task may have run others)."""
    _refused.set(())


def proxy_denials(policy: SandboxPolicy, mechanism: Mechanism) -> tuple[SandboxDenial, ...]:
    """What the proxy refused the command that just ran in this task."""
    if not policy.proxied:
        return ()
    return tuple(d.as_denial(mechanism) for d in _refused.get())
