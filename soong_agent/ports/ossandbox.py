"""The OS sandbox port (SBX-3): commands run where the kernel, not the command text, holds the line.

The permission gate reads a command line before it runs; a program that builds a path itself
(``python -c "open('/home/u/.ssh/id_rsa')"``, ``cat "$HOME/.aws/credentials"``) is beyond what
text can see. A `CommandSandbox` starts each command inside an OS-level sandbox that enforces a
`SandboxPolicy`: sensitive paths unreadable, writes only under the write roots and the run's
temporary folder, no network unless the command was granted it.

Two kinds of mechanism fit behind one call: bubblewrap puts a prefix in front of the command
(``bwrap … -- bash -c …``), Landlock restricts the thread the command is forked from. So a
sandbox does not hand back an argv to run somewhere; the caller gives it `start`, the code
that spawns and waits for the process, and the sandbox calls it with the argv to run, on the
thread it must run on (`CommandSandbox.run`).

What the sandbox refused is reported, not guessed at by the user: `denials` reads a finished
command's output for refusals on sandboxed paths (EACCES, EROFS, EPERM, a hidden file, a
refused connection without a network grant) and names the policy that applied
(`SandboxDenial.note`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar, runtime_checkable

Mechanism = Literal["bubblewrap", "landlock", "none"]
"""How commands are confined: bubblewrap (namespaces), Landlock (+ seccomp), or not at all."""

SandboxMode = Literal["auto", "required", "off"]
"""`sandbox.os`: the best mechanism that works (loudly none), one or refuse, or explicitly none."""

DenialKind = Literal["read", "write", "network"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    """What a sandboxed command may touch.

    All paths are absolute and resolved (symlinks followed) by whoever builds the policy.

    Attributes:
        project: the project folder (also a write root).
        write_roots: folders the command may write below (the project among them).
        deny_paths: files and folders the command can neither read nor write; each is named
            by the configured entry it came from in `deny_reasons` (same order).
        read_exceptions: files inside a denied folder that stay readable (``~/.ssh/known_hosts``).
        tmp_dir: the run's private temporary folder, writable (None: none).
        network: whether the command may open network connections of its own.
        proxy: (without `network`) the command reaches the network only through the host's
            filtering proxy, which lets it connect to the hosts ``tools.network`` allows
            (``sandbox.network = "allowlist"``, SBX-4).
        deny_reasons: for each of `deny_paths`, the entry of the configuration that denies it
            (``~/.ssh``, ``tools.sensitive_paths: .env``); shown in denial notes.
    """

    project: str
    write_roots: tuple[str, ...]
    deny_paths: tuple[str, ...] = ()
    read_exceptions: tuple[str, ...] = ()
    tmp_dir: str | None = None
    network: bool = False
    deny_reasons: tuple[str, ...] = ()
    proxy: bool = False

    @property
    def proxied(self) -> bool:
        """True when the command's connections go through the filtering proxy."""
        return self.proxy and not self.network

    def writable(self) -> tuple[str, ...]:
        """Every folder writes may go to: the write roots, then the tmp folder."""
        roots = dict.fromkeys(self.write_roots)
        if self.tmp_dir:
            roots[self.tmp_dir] = None
        return tuple(roots)

    def reason_for(self, deny_path: str) -> str:
        """The configured entry that denies `deny_path` (the path itself when unknown)."""
        for path, reason in zip(self.deny_paths, self.deny_reasons, strict=False):
            if path == deny_path:
                return reason
        return deny_path

    def with_network(self, network: bool) -> SandboxPolicy:
        """The same policy with network allowed or not."""
        if network == self.network:
            return self
        return SandboxPolicy(
            project=self.project,
            write_roots=self.write_roots,
            deny_paths=self.deny_paths,
            read_exceptions=self.read_exceptions,
            tmp_dir=self.tmp_dir,
            network=network,
            deny_reasons=self.deny_reasons,
            proxy=self.proxy,
        )


@dataclass(frozen=True, slots=True)
class SandboxDenial:
    """One thing the sandbox refused a command, as read from the command's output.

    Attributes:
        kind: a read (a sensitive path), a write (outside the write roots) or a connection.
        mechanism: the mechanism that refused it.
        error: what the command saw (``EACCES``, ``EROFS``, ``EPERM``, ``ENOENT``,
            ``ECONNREFUSED``…).
        path: the path the command tried, when the output names one.
        rule: the policy that applied, in words (``tools.sensitive_paths: ~/.ssh``,
            ``writes only in /p, /tmp/soong-cmd-1``, ``no network grant``).
        host: for a connection the filtering proxy refused (SBX-4), the host asked for
            (then `path` is ``host:port``); None for a refusal read from the output.
        port: that connection's port.
        command: the command the proxy refused it (its text).
    """

    kind: DenialKind
    mechanism: Mechanism
    error: str
    path: str | None
    rule: str
    host: str | None = None
    port: int | None = None
    command: str | None = None

    def note(self) -> str:
        """One line for the tool result: what was refused, by which mechanism, under which
        policy, so the model and the user know it was the sandbox and not the file."""
        what = {"read": "reading", "write": "writing", "network": "a network connection"}[self.kind]
        target = f" {self.path}" if self.path else ""
        if self.host is not None:
            target = f" to {self.path}"
        return f"[sandbox ({self.mechanism}) refused {what}{target} ({self.error}): {self.rule}]"


@dataclass(frozen=True, slots=True)
class NetworkDenial:
    """A connection the filtering proxy refused a command (SBX-4).

    Attributes:
        host: the host the command asked for (a name or an address, as compared).
        port: its port.
        command: the command that asked (its text; a placeholder when the proxy could not
            tell which command it was).
        reason: why, in one line (not in the allow-list, a private address, …).
    """

    host: str
    port: int
    command: str
    reason: str

    def as_denial(self, mechanism: Mechanism) -> SandboxDenial:
        """The refusal as the sandbox reports it with a command's result."""
        return SandboxDenial(
            "network",
            mechanism,
            "refused by the proxy",
            f"{self.host}:{self.port}",
            self.reason,
            host=self.host,
            port=self.port,
            command=self.command,
        )


@dataclass(frozen=True, slots=True)
class MechanismStatus:
    """Whether one mechanism works on this host, and if not, why and how to fix it.

    Attributes:
        mechanism: which one.
        works: True when a trial command really was confined (a denied read and an
            out-of-root write both refused).
        detail: what was found (the binary and its version, the Landlock ABI, …).
        cause: why it does not work (empty when it does), precise enough to act on.
        fix: what to do about it (empty when it works or nothing can be done).
        elapsed_ms: how long the trial took.
    """

    mechanism: Mechanism
    works: bool
    detail: str = ""
    cause: str = ""
    fix: str = ""
    elapsed_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class SandboxProbe:
    """What the start-up probe found, best mechanism first."""

    statuses: tuple[MechanismStatus, ...]

    @property
    def best(self) -> Mechanism | None:
        """The first mechanism that works, None when none does."""
        for status in self.statuses:
            if status.works:
                return status.mechanism
        return None

    def status(self, mechanism: Mechanism) -> MechanismStatus | None:
        """The status of one mechanism, None when it was not probed."""
        for status in self.statuses:
            if status.mechanism == mechanism:
                return status
        return None

    def why_none(self) -> str:
        """One line naming every mechanism's cause, for when none works."""
        return "; ".join(f"{s.mechanism}: {s.cause}" for s in self.statuses if not s.works)


class SandboxUnavailable(OSError):
    """A command was refused because no OS sandbox works and `sandbox.os` is ``required``.

    An `OSError`, as a command that cannot be started is: callers already turn those into an
    error result. The message names the cause and the fix.
    """


@runtime_checkable
class CommandSandbox(Protocol):
    """Starts commands inside an OS sandbox enforcing a `SandboxPolicy`."""

    @property
    def mechanism(self) -> Mechanism:
        """The mechanism in use (``none`` when commands are not confined)."""
        ...

    @property
    def unsandboxed(self) -> bool:
        """True when commands run without any confinement (results say so)."""
        ...

    async def run(
        self,
        argv: Sequence[str],
        policy: SandboxPolicy,
        start: Callable[[Sequence[str]], Awaitable[T]],
    ) -> T:
        """Call `start` with the argv to spawn, where spawning it puts it under `policy`.

        `start` spawns the process and waits for it (the process runner's own loop); it may be
        called on another thread with its own event loop. Cancelling the caller cancels
        `start` and returns only after it ended. Raises `SandboxUnavailable` when the
        sandbox refuses to run commands at all.
        """
        ...

    def denials(self, output: str, policy: SandboxPolicy, cwd: str) -> tuple[SandboxDenial, ...]:
        """What the sandbox refused, read from a finished command's output (stderr and
        stdout); relative paths are taken from `cwd`. Empty when nothing was refused."""
        ...
