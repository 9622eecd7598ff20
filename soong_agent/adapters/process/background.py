"""Background commands on real subprocesses (BG-1): started, read while they run, killed with
their process group.

A background command is spawned with `subprocess.Popen` (inside the OS sandbox's `start`, on
whichever thread the sandbox spawns from); from then on it lives on the caller's event loop:

- its pipes are read as data arrives (`add_reader`), each stream into a buffer that keeps at
  most its limit of unread bytes, the newest (`_Unread`); a read first takes what is in the
  pipes at that moment, so it sees everything the command wrote before it;
- its exit is seen through a pidfd (readable once it exits; a short poll where there is none)
  and, at any time, by asking the OS without waiting: `state` is never behind;
- when it exits, whatever is left of its group is killed (SIGKILL) and the pipes are read to
  their end (for at most `close_wait_s` when a process that left the group holds one);
- its timeout, or `kill`, stops the group: SIGTERM, `term_grace_s`, then SIGKILL.

A lifeline makes sure no background command outlives the agent even when the agent's process
ends without closing anything (a second Ctrl-C exits at once, SIGKILL, a crash): beside each
command, a watchdog shell (outside the sandbox, in a session of its own) reads a pipe whose
other end only the agent holds. The agent writes ``done`` once the command ended and its group
was killed; when the pipe closes without it, the agent is gone and the watchdog kills the
command's group.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import subprocess
from collections.abc import Callable

from soong_agent.ports.ossandbox import Mechanism, SandboxDenial
from soong_agent.ports.process import BackgroundOutput, BackgroundState

READ_CHUNK = 65_536
DRAIN_CHUNKS = 64
"""At most this many chunks are taken from a pipe by one `read` (the rest arrives with the loop)."""
TAIL_BYTES = 8_192
"""How much of the latest output is kept for `tail`, read or not."""
POLL_S = 0.05
"""How often the exit is looked for where the kernel gives no pidfd."""
WATCHDOG = 'IFS= read -r line; [ "$line" = done ] || kill -9 "-$1" 2>/dev/null; exit 0'
"""The lifeline's watchdog (POSIX sh): `$1` is the group to kill unless ``done`` arrives."""


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send `sig` to a process group; a group that is gone (or not ours any more) is ignored."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class _Unread:
    """One stream's unread bytes: at most `limit`, the newest; the dropped ones are counted."""

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self.data = bytearray()
        self.dropped = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def add(self, chunk: bytes) -> None:
        data = self.data
        data += chunk
        over = len(data) - self.limit
        if over <= 0:
            return
        # the oldest bytes go, and a character whose first bytes went goes whole
        cut = over
        while cut < len(data) and cut - over < 3 and data[cut] & 0xC0 == 0x80:
            cut += 1
        del data[:cut]
        self.dropped += cut
        self._decoder.reset()  # what it held back belonged before the dropped bytes

    def take(self, final: bool) -> tuple[str, int]:
        data, dropped = bytes(self.data), self.dropped
        self.data.clear()
        self.dropped = 0
        return self._decoder.decode(data, final), dropped


class Lifeline:
    """The watchdog of one background command's group (see the module documentation)."""

    def __init__(self, shell: str, pgid: int) -> None:
        read_end, self._write_end = os.pipe()  # both close-on-exec: no other child inherits it
        try:
            self._watchdog: subprocess.Popen[bytes] | None = subprocess.Popen(
                [shell, "-c", WATCHDOG, "soong-agent-lifeline", str(pgid)],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C to the terminal's group does not reach it
            )
        except OSError:
            os.close(self._write_end)
            raise
        finally:
            os.close(read_end)

    def release(self, loop: asyncio.AbstractEventLoop) -> None:
        """The group was dealt with: the watchdog may end without killing anything."""
        watchdog, self._watchdog = self._watchdog, None
        if watchdog is None:
            return
        with contextlib.suppress(OSError):
            os.write(self._write_end, b"done\n")
        os.close(self._write_end)
        _reap(watchdog, loop, POLL_S)


def _reap(child: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop, delay: float) -> None:
    """Collect `child`'s exit status once it ended, without blocking (no zombie is left)."""
    if child.poll() is None and delay < 5.0:
        with contextlib.suppress(RuntimeError):  # the loop is closed: the interpreter reaps it
            loop.call_later(delay, _reap, child, loop, delay * 2)


class SubprocessBackground:
    """A `BackgroundProcess` over a `subprocess.Popen` in its own process group."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        *,
        loop: asyncio.AbstractEventLoop,
        stdout_limit: int,
        stderr_limit: int,
        timeout_s: float,
        term_grace_s: float,
        close_wait_s: float,
        sandbox: Mechanism | None = None,
        denials: Callable[[str], tuple[SandboxDenial, ...]] | None = None,
    ) -> None:
        assert popen.stdout is not None and popen.stderr is not None
        self._popen = popen
        self._pgid = popen.pid
        self._loop = loop
        self._term_grace_s = term_grace_s
        self._close_wait_s = close_wait_s
        self._sandbox = sandbox
        self._denials = denials
        self._lifeline: Lifeline | None = None
        self._ended_by: BackgroundState | None = None
        self._returncode: int | None = None
        self._ended = asyncio.Event()
        self._stopping: asyncio.Task[None] | None = None
        self._tail = bytearray()
        self._pipes = {popen.stdout.fileno(): popen.stdout, popen.stderr.fileno(): popen.stderr}
        self._unread = {
            popen.stdout.fileno(): _Unread(stdout_limit),
            popen.stderr.fileno(): _Unread(stderr_limit),
        }
        self._out, self._err = popen.stdout.fileno(), popen.stderr.fileno()
        for fd in self._pipes:
            os.set_blocking(fd, False)
            loop.add_reader(fd, self._drain, fd)
        self._pidfd: int | None = None
        try:
            self._pidfd = os.pidfd_open(popen.pid)
            loop.add_reader(self._pidfd, self._check)
        except (AttributeError, OSError):  # no pidfd here: look for the exit now and then
            self._pidfd = None
            self._poll_later()
        self._timer = loop.call_later(max(0.0, timeout_s), self._time_out)

    def guard(self, lifeline: Lifeline) -> None:
        """Hand the command's lifeline to this handle (released once the group is gone)."""
        self._lifeline = lifeline
        if self._returncode is not None:
            lifeline.release(self._loop)
            self._lifeline = None

    # --- the port ----------------------------------------------------------------------------
    @property
    def state(self) -> BackgroundState:
        self._check()
        if self._returncode is None:
            return "running"
        return self._ended_by or "exited"

    @property
    def exit_code(self) -> int | None:
        self._check()
        return self._returncode

    @property
    def sandbox(self) -> Mechanism | None:
        return self._sandbox

    def read(self) -> BackgroundOutput:
        state = self.state  # first: what it wrote before an exit seen here is in the pipes now
        for fd in list(self._pipes):
            self._drain(fd, DRAIN_CHUNKS)
        final = not self._pipes
        stdout, out_dropped = self._unread[self._out].take(final)
        stderr, err_dropped = self._unread[self._err].take(final)
        denials: tuple[SandboxDenial, ...] = ()
        if self._denials is not None and (stdout or stderr):
            denials = self._denials(f"{stderr}\n{stdout}")
        return BackgroundOutput(
            stdout=stdout,
            stderr=stderr,
            state=state,
            exit_code=self._returncode,
            stdout_dropped=out_dropped,
            stderr_dropped=err_dropped,
            denials=denials,
        )

    def tail(self, lines: int) -> str:
        for fd in list(self._pipes):
            self._drain(fd, DRAIN_CHUNKS)
        text = bytes(self._tail).decode("utf-8", errors="replace")
        kept = text.splitlines()
        if len(self._tail) >= TAIL_BYTES and len(kept) > 1:
            kept = kept[1:]  # the first line was cut
        return "\n".join(kept[-lines:]) if lines > 0 else ""

    async def wait(self) -> None:
        await self._ended.wait()

    async def kill(self) -> None:
        await self._stop("killed")

    # --- inside ------------------------------------------------------------------------------
    def _drain(self, fd: int, chunks: int = 1) -> None:
        """Take up to `chunks` reads from the pipe `fd`; close it at its end."""
        pipe = self._pipes.get(fd)
        if pipe is None:
            return
        for _ in range(chunks):
            try:
                data = os.read(fd, READ_CHUNK)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            if not data:
                self._close_pipe(fd)
                return
            self._unread[fd].add(data)
            tail = self._tail
            tail += data
            if len(tail) > TAIL_BYTES:
                del tail[: len(tail) - TAIL_BYTES]

    def _close_pipe(self, fd: int) -> None:
        pipe = self._pipes.pop(fd, None)
        if pipe is None:
            return
        self._loop.remove_reader(fd)
        pipe.close()

    def _check(self) -> None:
        """Look whether the command exited (without waiting); deal with its end once."""
        if self._returncode is not None:
            return
        code = self._popen.poll()
        if code is None:
            return
        self._returncode = code
        self._timer.cancel()
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
        signal_group(self._pgid, signal.SIGKILL)  # what it left behind in its group
        if self._lifeline is not None:
            self._lifeline.release(self._loop)
            self._lifeline = None
        self._ended.set()
        if self._pipes:  # killed writers close their ends; one outside the group is cut off
            self._loop.call_later(self._close_wait_s, self._close_pipes)

    def _close_pipes(self) -> None:
        for fd in list(self._pipes):
            self._drain(fd, DRAIN_CHUNKS)
            self._close_pipe(fd)

    def _poll_later(self) -> None:
        if self._returncode is None:
            self._check()
            if self._returncode is None:
                self._loop.call_later(POLL_S, self._poll_later)

    def _time_out(self) -> None:
        if self._stopping is None:
            self._stopping = self._loop.create_task(self._stop("timed_out"))

    async def _stop(self, why: BackgroundState) -> None:
        """SIGTERM the group, give it `term_grace_s`, then SIGKILL it and wait for the end."""
        self._check()
        if self._returncode is not None:
            return
        if self._ended_by is None:
            self._ended_by = why
        signal_group(self._pgid, signal.SIGTERM)
        if not await self._ended_within(self._term_grace_s):
            signal_group(self._pgid, signal.SIGKILL)
            await self._ended_within(self._close_wait_s)

    async def _ended_within(self, seconds: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ended.wait(), seconds)
        self._check()
        return self._returncode is not None
