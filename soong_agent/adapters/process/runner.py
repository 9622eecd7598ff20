"""A `ProcessRunner` on asyncio subprocesses (TOOL-2): own process group, bounded time and output.

The command starts in a new session (`start_new_session=True`), so its pid is also the id of a
process group holding it and everything it spawns. Output arrives through a subprocess protocol
that keeps at most the limit of each stream and counts (and drops) the rest, so a chatty child
never blocks on a full pipe and memory stays bounded.

Ending:
- the command exits: its output is read to the end of the pipes; whatever is left of its group
  shortly after (background jobs holding the pipes or not) is killed, so no process of the group
  outlives the call and a grandchild keeping a pipe open cannot hang the read;
- the timeout passes: the group gets SIGTERM, then SIGKILL after a short grace; the result has
  `timed_out=True` and `exit_code=None`;
- the caller is cancelled: the group is stopped the same way and `CancelledError` propagates.

The exit of the command itself is taken from the protocol's `process_exited`, not from
`Process.wait()`, which (Python 3.11) also waits for every pipe to close.

`start` starts a command in the background instead (BG-1): the same sandbox, argv, environment
and own process group, handed back as a `SubprocessBackground` (``background.py``) with a
lifeline that kills its group if the agent's process ends first.

With a `CommandSandbox` and its `SandboxPolicy` (SBX-3), every command is started through
the sandbox: it decides the argv (bubblewrap's prefix) and the thread the spawn happens on
(Landlock's restricted spawner), the rest above is unchanged. ``TMPDIR`` is the policy's tmp
folder; the result names the mechanism (``none``: unconfined) and carries what the sandbox
refused the command (`ProcessResult.denials`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

from soong_agent.adapters.process.background import Lifeline, SubprocessBackground, signal_group
from soong_agent.ports.ossandbox import CommandSandbox, SandboxDenial, SandboxPolicy
from soong_agent.ports.process import BackgroundProcess, ProcessResult

_STDOUT = 1
_STDERR = 2


class _Capture(asyncio.SubprocessProtocol):
    """Collects output up to a limit per stream and reports exit and pipe closes as futures."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limits: dict[int, int]) -> None:
        self._limits = limits
        self.kept: dict[int, bytearray] = {fd: bytearray() for fd in limits}
        self.dropped: dict[int, int] = dict.fromkeys(limits, 0)
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: dict[int, asyncio.Future[None]] = {fd: loop.create_future() for fd in limits}

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        kept = self.kept.get(fd)
        if kept is None:
            return
        room = self._limits[fd] - len(kept)
        if room >= len(data):
            kept += data
            return
        if room > 0:
            kept += data[:room]
        self.dropped[fd] += len(data) - max(room, 0)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        done = self.closed.get(fd)
        if done is not None and not done.done():
            done.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        # Everything is closed: nothing more will arrive on any pipe.
        for done in (*self.closed.values(), self.exited):
            if not done.done():
                done.set_result(None)

    def text(self, fd: int) -> str:
        return bytes(self.kept[fd]).decode("utf-8", errors="replace")


class SubprocessRunner:
    """Runs commands as asyncio subprocesses, each in its own process group.

    `term_grace_s`: how long the group has between SIGTERM and SIGKILL on timeout or cancel.
    `linger_s`: how long, after the command exited, its pipes may stay open (held by background
    processes it started) before the rest of its group is killed.
    `close_wait_s`: an upper bound on waiting for the pipes to close after the group was killed
    (only a process that left the group while holding a pipe makes this wait end by time).
    `sandbox` and `policy`: the OS sandbox every command starts in, and what it enforces
    (both or neither).
    """

    def __init__(
        self,
        *,
        term_grace_s: float = 0.5,
        linger_s: float = 0.2,
        close_wait_s: float = 2.0,
        sandbox: CommandSandbox | None = None,
        policy: SandboxPolicy | None = None,
    ) -> None:
        if (sandbox is None) != (policy is None):
            raise ValueError("a sandbox needs a policy, and a policy a sandbox")
        self._term_grace_s = term_grace_s
        self._linger_s = linger_s
        self._close_wait_s = close_wait_s
        self._sandbox = sandbox
        self._policy = policy

    def __repr__(self) -> str:
        sandbox = f", sandbox={self._sandbox!r}" if self._sandbox is not None else ""
        return f"SubprocessRunner(term_grace_s={self._term_grace_s}{sandbox})"

    @property
    def sandbox(self) -> CommandSandbox | None:
        """The OS sandbox commands start in (None: none configured)."""
        return self._sandbox

    def find_program(self, name: str) -> str | None:
        """`/bin/<name>` when it is there (the usual shell), else the first on PATH."""
        usual = f"/bin/{name}"
        if os.access(usual, os.X_OK):
            return usual
        return shutil.which(name)

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
        """Run `argv` in `cwd` with exactly `env`; see the module documentation for how it ends.

        Raises OSError when the command cannot be started (missing program or folder), and
        `SandboxUnavailable` (an OSError) when the sandbox refuses to run commands at all.
        """
        if not argv:
            raise ValueError("argv must name a program")
        sandbox, policy = self._sandbox, self._policy
        if sandbox is None or policy is None:
            return await self._run(argv, cwd, env, timeout_s, stdout_limit, stderr_limit, stdin)
        if policy.tmp_dir and not sandbox.unsandboxed:
            env = {**env, "TMPDIR": policy.tmp_dir}

        async def start(final: Sequence[str]) -> ProcessResult:
            return await self._run(final, cwd, env, timeout_s, stdout_limit, stderr_limit, stdin)

        result = await sandbox.run(argv, policy, start)
        denials = sandbox.denials(f"{result.stderr}\n{result.stdout}", policy, cwd)
        return dataclasses.replace(result, sandbox=sandbox.mechanism, denials=denials)

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
        """Start `argv` in the background in `cwd` with exactly `env` (see the port).

        Raises OSError when the command cannot be started and `SandboxUnavailable` when the
        sandbox refuses to run commands at all, as `run`."""
        if not argv:
            raise ValueError("argv must name a program")
        sandbox, policy = self._sandbox, self._policy
        confined = sandbox is not None and not sandbox.unsandboxed
        if confined and policy is not None and policy.tmp_dir:
            env = {**env, "TMPDIR": policy.tmp_dir}

        spawned: list[subprocess.Popen[bytes]] = []

        async def spawn(final: Sequence[str]) -> subprocess.Popen[bytes]:
            spawned.append(_popen(final, cwd, env))
            return spawned[-1]

        try:
            if sandbox is None or policy is None:
                popen = await spawn(argv)
            else:
                popen = await sandbox.run(argv, policy, spawn)
        except BaseException:  # cancelled on the way back from the sandbox's thread
            for orphan in spawned:
                signal_group(orphan.pid, signal.SIGKILL)
            raise
        process = SubprocessBackground(
            popen,
            loop=asyncio.get_running_loop(),
            stdout_limit=stdout_limit,
            stderr_limit=stderr_limit,
            timeout_s=timeout_s,
            term_grace_s=self._term_grace_s,
            close_wait_s=self._close_wait_s,
            sandbox=None if sandbox is None else sandbox.mechanism,
            denials=_denials_of(sandbox, policy, cwd),
        )
        shell = self.find_program("sh")
        if shell is not None:
            try:
                process.guard(Lifeline(shell, popen.pid))
            except OSError:
                await process.kill()  # no lifeline: it would not be sure to end with the agent
                raise
        return process

    async def _run(
        self,
        argv: Sequence[str],
        cwd: str,
        env: Mapping[str, str],
        timeout_s: float,
        stdout_limit: int,
        stderr_limit: int,
        stdin: bytes | None,
    ) -> ProcessResult:
        loop = asyncio.get_running_loop()
        limits = {_STDOUT: max(0, stdout_limit), _STDERR: max(0, stderr_limit)}
        started = time.monotonic()
        transport, capture = await loop.subprocess_exec(
            lambda: _Capture(loop, limits),
            *argv,
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
        )
        pgid = transport.get_pid()
        timed_out = False
        try:
            if stdin is not None:
                pipe = transport.get_pipe_transport(0)
                if pipe is not None:
                    assert isinstance(pipe, asyncio.WriteTransport)
                    pipe.write(stdin)
                    pipe.close()  # flushes, then closes; a child that never reads just loses it
            done, _ = await asyncio.wait({capture.exited}, timeout=max(0.0, timeout_s))
            if not done:
                timed_out = True
                await self._stop_group(pgid, capture)
            await self._finish_output(pgid, capture)
        except asyncio.CancelledError:
            await self._stop_group(pgid, capture)
            raise
        finally:
            signal_group(pgid, signal.SIGKILL)  # no-op unless something above failed
            transport.close()
        returncode = transport.get_returncode()
        return ProcessResult(
            exit_code=None if timed_out else returncode,
            stdout=capture.text(_STDOUT),
            stderr=capture.text(_STDERR),
            stdout_truncated=capture.dropped[_STDOUT],
            stderr_truncated=capture.dropped[_STDERR],
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
        )

    async def _stop_group(self, pgid: int, capture: _Capture) -> None:
        """SIGTERM the group, give it `term_grace_s`, then SIGKILL it and wait for the exit."""
        signal_group(pgid, signal.SIGTERM)
        try:
            await asyncio.wait({capture.exited}, timeout=self._term_grace_s)
        finally:
            signal_group(pgid, signal.SIGKILL)
        await asyncio.wait({capture.exited}, timeout=self._close_wait_s)

    async def _finish_output(self, pgid: int, capture: _Capture) -> None:
        """Read the pipes to their end; kill what is left of the group after `linger_s`."""
        pipes = set(capture.closed.values())
        _, pending = await asyncio.wait(pipes, timeout=self._linger_s)
        signal_group(pgid, signal.SIGKILL)
        if pending:
            # Killed writers close their ends; what they wrote before is still read.
            await asyncio.wait(pending, timeout=self._close_wait_s)


def _denials_of(
    sandbox: CommandSandbox | None, policy: SandboxPolicy | None, cwd: str
) -> Callable[[str], tuple[SandboxDenial, ...]] | None:
    """What reads a background command's output for the sandbox's refusals (None: no sandbox)."""
    if sandbox is None or policy is None:
        return None
    return lambda output: sandbox.denials(output, policy, cwd)


def _popen(argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Spawn a background command: no input, both outputs piped, a session (and group) of its
    own. The fork and exec happen right here, as asyncio's own `subprocess_exec` does them:
    only what follows them (the reading, the waiting) must not block."""
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=dict(env),
        start_new_session=True,
    )
