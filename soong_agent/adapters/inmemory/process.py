"""A process runner that plays back declared results per command, for tests.

It keeps the rules of `SubprocessRunner` (the shared contract suite runs on both):

- an empty argv raises ValueError; a program that does not exist raises OSError (declare one
  with `ScriptedProcess.missing()`; a command nobody declared raises `UnscriptedCommand`, a
  FileNotFoundError, and is kept in `unscripted`);
- output is cut at `stdout_limit` / `stderr_limit` bytes, the rest counted in `*_truncated`, and
  decoded as UTF-8 with replacement, exactly as the real runner decodes what it kept;
- a command that takes longer than `timeout_s` (its `delay_s`, really waited for) ends with
  ``timed_out=True`` and ``exit_code=None`` after `timeout_s`, keeping the output it declared;
- a caller cancelled while the command runs gets `CancelledError`, and the call is marked
  `cancelled`.

`start` (BG-1) plays the same result back in the background: the declared output is there at
once, the process ends with its exit code after `delay_s` (a `delay_s` of ``math.inf`` never
ends on its own), is killed (``timed_out``) when `timeout_s` passes first, and keeps at most the
limit of unread bytes per stream, the newest, as `SubprocessRunner` does. Every handle is kept
in `started`; a test may `write` more output to one or `exit` it.
"""

from __future__ import annotations

import asyncio
import errno
import math
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from soong_agent.ports.ossandbox import Mechanism
from soong_agent.ports.process import (
    BackgroundOutput,
    BackgroundProcess,
    BackgroundState,
    ProcessResult,
)

_SHELL_NAMES = frozenset({"sh", "bash", "zsh", "dash", "ksh"})


@dataclass(frozen=True, slots=True)
class ScriptedProcess:
    """What one command does: its output, its exit code and how long it runs.

    `delay_s` is waited for (so timeouts and cancellation behave as with a real process);
    `stdout` / `stderr` are what the command writes, before any limit is applied.
    """

    stdout: str | bytes = ""
    stderr: str | bytes = ""
    exit_code: int = 0
    delay_s: float = 0.0
    not_found: bool = False

    @classmethod
    def missing(cls) -> ScriptedProcess:
        """A program that does not exist: running it raises FileNotFoundError."""
        return cls(exit_code=127, not_found=True)


@dataclass(slots=True)
class ProcessCall:
    """One call the runner received."""

    argv: tuple[str, ...]
    cwd: str
    env: dict[str, str]
    timeout_s: float
    stdout_limit: int
    stderr_limit: int
    stdin: bytes | None
    result: ProcessResult | None = None
    cancelled: bool = False
    background: bool = False
    """Started with `start` (its handle is in the runner's `started`)."""

    @property
    def command(self) -> str | None:
        """The command line when argv is ``<shell> -c <line>``, else None."""
        shell = self.argv[0].rsplit("/", 1)[-1] in _SHELL_NAMES
        return self.argv[-1] if shell and len(self.argv) >= 3 and self.argv[-2] == "-c" else None


Script = ScriptedProcess | Callable[[ProcessCall], ScriptedProcess]


class UnscriptedCommand(FileNotFoundError):
    """No result was declared for the command a test ran."""


class ScriptedProcessRunner:
    """A `ProcessRunner` that answers from declared results; records every call in `calls`.

    Declare results with `on(argv, ...)` (an exact argv) or `on_command(line, ...)` (the line of
    ``bash -c LINE`` and the like, as `run_command` runs it); several results for the same key
    are given in turn, and the last one is repeated. A result may be a callable that builds it
    from the `ProcessCall` (to answer from `stdin` or `env`). Calls nobody declared a result for
    are also kept in `unscripted`.
    """

    def __init__(self) -> None:
        self.calls: list[ProcessCall] = []
        self.started: list[ScriptedBackground] = []
        """The handles `start` gave, in order."""
        self.unscripted: list[ProcessCall] = []
        self._by_argv: dict[tuple[str, ...], list[Script]] = {}
        self._by_command: dict[str, list[Script]] = {}
        self.missing: set[str] = set()
        """Programs `find_program` says are not installed."""

    def on(self, argv: Sequence[str], *results: Script) -> ScriptedProcessRunner:
        """Declare what running exactly `argv` does (one result per run; the last repeats)."""
        self._by_argv.setdefault(tuple(argv), []).extend(results or (ScriptedProcess(),))
        return self

    def on_command(self, line: str, *results: Script) -> ScriptedProcessRunner:
        """Declare what the shell command line `line` (``bash -c line``) does."""
        self._by_command.setdefault(line, []).extend(results or (ScriptedProcess(),))
        return self

    @property
    def last_call(self) -> ProcessCall:
        return self.calls[-1]

    def find_program(self, name: str) -> str | None:
        """`/bin/<name>`: every program is "installed" (unless named in `missing`)."""
        return None if name in self.missing else f"/bin/{name}"

    def _script_for(self, call: ProcessCall) -> Script | None:
        queue = self._by_argv.get(call.argv)
        if queue is None and call.command is not None:
            queue = self._by_command.get(call.command)
        if not queue:
            return None
        return queue.pop(0) if len(queue) > 1 else queue[0]

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
        """Play back the result declared for `argv`; see the module documentation."""
        call = ProcessCall(
            argv=tuple(argv),
            cwd=cwd,
            env=dict(env),
            timeout_s=timeout_s,
            stdout_limit=stdout_limit,
            stderr_limit=stderr_limit,
            stdin=None if stdin is None else bytes(stdin),
        )
        scripted = self._scripted(call)
        started = time.monotonic()
        timed_out = timeout_s <= 0 or scripted.delay_s > timeout_s
        try:
            await asyncio.sleep(max(0.0, min(scripted.delay_s, timeout_s)))
        except asyncio.CancelledError:
            call.cancelled = True
            raise
        stdout, stdout_cut = _bounded(scripted.stdout, stdout_limit)
        stderr, stderr_cut = _bounded(scripted.stderr, stderr_limit)
        call.result = ProcessResult(
            exit_code=None if timed_out else scripted.exit_code,
            stdout=stdout,
            stderr=stderr,
            stdout_truncated=stdout_cut,
            stderr_truncated=stderr_cut,
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
        )
        return call.result

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
        """Start the result declared for `argv` in the background; see the module
        documentation."""
        call = ProcessCall(
            argv=tuple(argv),
            cwd=cwd,
            env=dict(env),
            timeout_s=timeout_s,
            stdout_limit=stdout_limit,
            stderr_limit=stderr_limit,
            stdin=None,
            background=True,
        )
        process = ScriptedBackground(
            self._scripted(call), stdout_limit=stdout_limit, stderr_limit=stderr_limit, call=call
        )
        process.begin(timeout_s)
        self.started.append(process)
        return process

    def _scripted(self, call: ProcessCall) -> ScriptedProcess:
        """What `call` does; raises as the real runner would for a bad or missing program."""
        if not call.argv:
            raise ValueError("argv must name a program")
        self.calls.append(call)
        script = self._script_for(call)
        if script is None:
            self.unscripted.append(call)
            raise UnscriptedCommand(
                errno.ENOENT, f"no scripted result for {list(call.argv)!r}", call.argv[0]
            )
        scripted = script if isinstance(script, ScriptedProcess) else script(call)
        if scripted.not_found:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", call.argv[0])
        return scripted


class _Unread:
    """One stream's unread bytes: at most `limit`, the newest (a character whose first bytes
    were dropped is dropped whole); the dropped ones are counted."""

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self.data = b""
        self.dropped = 0

    def add(self, data: bytes) -> None:
        self.data += data
        over = len(self.data) - self.limit
        if over <= 0:
            return
        cut = over
        while cut < len(self.data) and cut - over < 3 and self.data[cut] & 0xC0 == 0x80:
            cut += 1
        self.data, self.dropped = self.data[cut:], self.dropped + cut

    def take(self) -> tuple[str, int]:
        data, dropped = self.data, self.dropped
        self.data, self.dropped = b"", 0
        return data.decode("utf-8", errors="replace"), dropped


class ScriptedBackground:
    """A `BackgroundProcess` playing back a `ScriptedProcess` (see the module documentation).

    Built by `ScriptedProcessRunner.start` (which starts its clock: the exit after `delay_s`,
    the kill at `timeout_s`); one built by hand runs until a test `exit`s or kills it.
    """

    def __init__(
        self,
        scripted: ScriptedProcess | None = None,
        *,
        stdout_limit: int = 1_000_000,
        stderr_limit: int = 1_000_000,
        call: ProcessCall | None = None,
    ) -> None:
        self.call = call
        self._scripted = scripted or ScriptedProcess()
        self._out = _Unread(stdout_limit)
        self._err = _Unread(stderr_limit)
        self._all = b""
        self._code: int | None = None
        self._ended_by: BackgroundState | None = None
        self._ended = asyncio.Event()
        self._timers: list[asyncio.TimerHandle] = []
        self.kills = 0
        """How often `kill` was called."""
        self.write(self._scripted.stdout, self._scripted.stderr)

    def begin(self, timeout_s: float) -> None:
        """Start the clock (in a running event loop): it exits after its `delay_s`, or is
        killed (``timed_out``) at `timeout_s` when that comes first."""
        loop = asyncio.get_running_loop()
        delay, code = self._scripted.delay_s, self._scripted.exit_code
        if delay <= timeout_s and math.isfinite(delay):
            self._timers.append(loop.call_later(delay, self.exit, code))
        elif math.isfinite(timeout_s):
            self._timers.append(loop.call_later(max(0.0, timeout_s), self._end, "timed_out"))

    def write(self, stdout: str | bytes = "", stderr: str | bytes = "") -> None:
        """The process writes `stdout` and `stderr` (ignored once it ended)."""
        if self._code is not None:
            return
        for data, unread in ((stdout, self._out), (stderr, self._err)):
            raw = data.encode("utf-8") if isinstance(data, str) else data
            unread.add(raw)
            self._all += raw

    def exit(self, code: int = 0) -> None:
        """The process ends on its own with `code` (nothing when it already ended)."""
        if self._code is None:
            self._code = code
            self._stop_timers()
            self._ended.set()

    def _end(self, why: BackgroundState) -> None:
        if self._code is None:
            self._ended_by = why
            self.exit(-signal.SIGTERM)

    def _stop_timers(self) -> None:
        for timer in self._timers:
            timer.cancel()

    @property
    def state(self) -> BackgroundState:
        if self._code is None:
            return "running"
        return self._ended_by or "exited"

    @property
    def exit_code(self) -> int | None:
        return self._code

    @property
    def sandbox(self) -> Mechanism | None:
        return None

    def read(self) -> BackgroundOutput:
        stdout, out_dropped = self._out.take()
        stderr, err_dropped = self._err.take()
        return BackgroundOutput(
            stdout=stdout,
            stderr=stderr,
            state=self.state,
            exit_code=self._code,
            stdout_dropped=out_dropped,
            stderr_dropped=err_dropped,
        )

    def tail(self, lines: int) -> str:
        kept = self._all.decode("utf-8", errors="replace").splitlines()
        return "\n".join(kept[-lines:]) if lines > 0 else ""

    async def wait(self) -> None:
        await self._ended.wait()

    async def kill(self) -> None:
        self.kills += 1
        self._end("killed")


def _bounded(output: str | bytes, limit: int) -> tuple[str, int]:
    """The text kept of `output` at `limit` bytes, and how many bytes were dropped."""
    data = output.encode("utf-8") if isinstance(output, str) else output
    keep = max(0, limit)
    return data[:keep].decode("utf-8", errors="replace"), max(0, len(data) - keep)
