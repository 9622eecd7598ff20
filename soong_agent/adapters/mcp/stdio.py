"""A stdio server as the hub runs it: the SDK's `stdio_client`, plus what that transport does
not tell — the server's stderr (its last lines), its process group and its exit code.

The SDK keeps its process object to itself, so the server is started through a one-line POSIX
shell wrapper in the same process group: the wrapper writes its pid (the group id, the SDK
starts every server in a new session) to stderr, runs the server with the same stdin and
stdout, then writes the server's exit status to stderr and exits with it. Both markers begin with
an ASCII record separator (\\x1e), which a server's own diagnostics do not contain. The SDK's
shutdown (close stdin, wait, then signal the whole group) reaches the wrapper and the server alike.
"""

from __future__ import annotations

import collections
import logging
import os
import shutil
import signal
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client

from soong_agent.ports.mcp import McpServerSpec

log = logging.getLogger(__name__)

_MARK = "\x1esoong-mcp"
_WRAPPER = (
    r'printf "\036soong-mcp pid %s\n" "$$" >&2; "$@"; rc=$?; '
    r'printf "\036soong-mcp exit %s\n" "$rc" >&2; exit "$rc"'
)
_LINE_LIMIT = 2000


class ProcessWatch:
    """What one run of a stdio server wrote to stderr, and how it ended.

    `lines` keeps the last `keep` lines (each cut at 2000 characters); `exit_code` is set once
    the server has exited (128+N when a signal N ended it; None when the wrapper itself was
    killed); `done` is set at the end of the stderr stream. `on_exit`, when set, is called once
    (on the event loop) when the server is known to be gone.
    """

    def __init__(self, *, keep: int = 20) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)
        self.pgid: int | None = None
        self.exit_code: int | None = None
        self.exited = False
        self.done = anyio.Event()
        self.on_exit: Callable[[int | None], None] | None = None

    def feed(self, line: str) -> None:
        """Take one line of the server's stderr."""
        if line.startswith(_MARK):
            words = line[len(_MARK) :].split()
            if len(words) == 2 and words[0] == "pid" and words[1].isdigit():
                self.pgid = int(words[1])
                return
            if len(words) == 2 and words[0] == "exit" and words[1].isdigit():
                self._exit(int(words[1]))
                return
        self.lines.append(line[:_LINE_LIMIT])

    def _exit(self, code: int | None) -> None:
        if self.exited:
            return
        self.exited = True
        self.exit_code = code
        if self.on_exit is not None:
            self.on_exit(code)

    async def read(self, fd: int) -> None:
        """Read the stderr pipe `fd` to its end (then close it); an end without an exit marker
        means the wrapper itself was killed: the server is gone too."""
        os.set_blocking(fd, False)
        pending = b""
        try:
            while True:
                await anyio.wait_readable(fd)
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    break
                *complete, pending = (pending + chunk).split(b"\n")
                for raw in complete:
                    self.feed(raw.decode("utf-8", "replace").rstrip("\r"))
                if len(pending) > _LINE_LIMIT * 4:
                    self.feed(pending.decode("utf-8", "replace"))
                    pending = b""
            if pending:
                self.feed(pending.decode("utf-8", "replace"))
        except OSError as exc:
            log.warning("reading an mcp server's stderr failed: %s", exc)
        finally:
            os.close(fd)
            self._exit(self.exit_code)
            self.done.set()

    def group_alive(self) -> bool:
        """Whether a process of the server's group is still there."""
        if self.pgid is None:
            return False
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def kill_group(self) -> bool:
        """SIGKILL the server's process group; whether there was one to kill."""
        if self.pgid is None or not self.group_alive():
            return False
        try:
            os.killpg(self.pgid, signal.SIGKILL)
        except ProcessLookupError:
            return False
        return True


def exit_text(code: int | None) -> str:
    """`exited with code 3`, `was killed by signal 9 (exit code 137)`, or `exited`."""
    if code is None:
        return "exited"
    if code > 128 and code - 128 < signal.NSIG:
        try:
            name = signal.Signals(code - 128).name
        except ValueError:
            name = f"signal {code - 128}"
        return f"was killed by {name} (exit code {code})"
    return f"exited with code {code}"


def missing_command(spec: McpServerSpec) -> str | None:
    """Why `spec.command` cannot be run, when it cannot (not found, not executable)."""
    command = spec.command or ""
    env = server_environment(spec)
    if "/" in command:
        path = Path(command)
        if not path.is_absolute() and spec.cwd:
            path = Path(spec.cwd) / path
        if not path.exists():
            return f"command not found: {command}"
        if not os.access(path, os.X_OK) or path.is_dir():
            return f"command is not executable: {command}"
        return None
    if shutil.which(command, path=env.get("PATH")) is None:
        return f"command not found on PATH: {command}"
    return None


def server_environment(spec: McpServerSpec) -> Mapping[str, str]:
    """The environment the server gets: the SDK's safe default set (HOME, PATH, …) and the
    spec's own variables over it."""
    return get_default_environment() | dict(spec.env)


@asynccontextmanager
async def open_stdio(
    spec: McpServerSpec, watch: ProcessWatch, readers: anyio.abc.TaskGroup
) -> AsyncIterator[tuple[Any, Any]]:
    """Start `spec`'s server through the SDK's stdio transport and yield its streams.

    Its stderr goes to a pipe read into `watch` by a task of `readers` (a group that outlives
    this context, so the last lines and the exit code are read after the server is stopped).
    """
    if spec.command is None:
        raise ValueError(f"mcp server {spec.name!r} has no command")
    read_fd, write_fd = os.pipe()
    errlog = os.fdopen(write_fd, "w")
    reading = False
    params = StdioServerParameters(
        command="/bin/sh",
        args=["-c", _WRAPPER, f"soong-mcp-{spec.name}", spec.command, *spec.args],
        env=dict(spec.env),
        cwd=spec.cwd,
    )
    try:
        async with stdio_client(params, errlog=errlog) as streams:
            errlog.close()  # the child holds its copy; the pipe ends when the server does
            readers.start_soon(watch.read, read_fd)
            reading = True
            yield streams
    finally:
        if not errlog.closed:
            errlog.close()
        if not reading:
            os.close(read_fd)
            watch.done.set()
