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
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from soong_agent.ports.process import ProcessResult

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
        if not argv:
            raise ValueError("argv must name a program")
        call = ProcessCall(
            argv=tuple(argv),
            cwd=cwd,
            env=dict(env),
            timeout_s=timeout_s,
            stdout_limit=stdout_limit,
            stderr_limit=stderr_limit,
            stdin=None if stdin is None else bytes(stdin),
        )
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


def _bounded(output: str | bytes, limit: int) -> tuple[str, int]:
    """The text kept of `output` at `limit` bytes, and how many bytes were dropped."""
    data = output.encode("utf-8") if isinstance(output, str) else output
    keep = max(0, limit)
    return data[:keep].decode("utf-8", errors="replace"), max(0, len(data) - keep)
