"""The proxy's Unix socket (SBX-4): clients like those of its TCP port, and forwarders handing
over a listening socket from a bubblewrap sandbox (see `forwarder`), which the proxy then serves
until the command that handed it over ends (its pidfd)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
import struct
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from soong_agent.adapters.netproxy.wire import MAX_HEAD_BYTES

__all__ = ["HAND_OVER", "MAX_HANDED_OVER", "UnixSide"]

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

HAND_OVER = b"L"
"""What a forwarder sends with a listening socket (see `forwarder`)."""
MAX_HANDED_OVER = 512
"""The most listening sockets served for sandboxes at once."""
_PEER_CREDENTIALS = (socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


async def _first_message(conn: socket.socket) -> tuple[bytes, list[int]]:
    """The first byte on `conn` and the descriptors that came with it (SCM_RIGHTS)."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            data, ancillary, _, _ = conn.recvmsg(1, socket.CMSG_SPACE(4 * 4))
        except (BlockingIOError, InterruptedError):
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_reader(conn.fileno(), _wake, ready)
            try:
                await ready
            finally:
                loop.remove_reader(conn.fileno())
            continue
        fds: list[int] = []
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(payload) - len(payload) % 4
                fds += [
                    int.from_bytes(payload[i : i + 4], sys.byteorder) for i in range(0, usable, 4)
                ]
        return data, fds


@dataclass(slots=True)
class _Adopted:
    """A listening socket a sandbox handed over, served until the process that handed it over
    (the command) ends, which makes its pidfd readable."""

    server: asyncio.Server
    pidfd: int
    closed: bool = False

    def close(self) -> None:
        """Stop listening (the command ended, or the proxy is closing)."""
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().remove_reader(self.pidfd)
            os.close(self.pidfd)
            self.server.close()


class UnixSide:
    """The Unix socket's accepting loop and the listening sockets handed over through it.

    `serve_client` serves a stream client (the proxy's own handler); `connections` is the
    proxy's set of client tasks (closed with it); `stopping` says whether the proxy is closing.
    """

    def __init__(
        self,
        serve_client: Serve,
        connections: set[asyncio.Task[None]],
        *,
        head_timeout_s: float,
        stopping: Callable[[], bool],
    ) -> None:
        self._serve_client = serve_client
        self._connections = connections
        self._head_timeout_s = head_timeout_s
        self._stopping = stopping
        self._adopted: dict[int, _Adopted] = {}
        self._ids = itertools.count(1)

    def close(self) -> None:
        """Stop listening on every socket handed over."""
        for adopted in list(self._adopted.values()):
            adopted.close()

    async def wait_closed(self) -> None:
        for adopted in list(self._adopted.values()):
            await adopted.server.wait_closed()
        self._adopted.clear()

    async def accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError:
                await asyncio.sleep(0.1)  # e.g. out of descriptors: try again soon
                continue
            conn.setblocking(False)
            task = asyncio.create_task(self._unix_client(conn))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _unix_client(self, conn: socket.socket) -> None:
        """A connection to the Unix socket: a forwarder handing over a listening socket
        (`_adopt`), or a client like those of the TCP port."""
        loop = asyncio.get_running_loop()
        try:
            first, fds = await asyncio.wait_for(_first_message(conn), self._head_timeout_s)
        except (TimeoutError, OSError):
            conn.close()
            return
        except asyncio.CancelledError:
            conn.close()
            if not self._stopping():
                raise
            return  # `close` ended it (see `_client`)
        if fds or first == HAND_OVER:
            try:
                answer = await self._adopt(conn, fds) if first == HAND_OVER else b"N"
            finally:
                for fd in fds:
                    os.close(fd)  # `_adopt` serves a duplicate of its own
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await asyncio.wait_for(loop.sock_sendall(conn, answer), self._head_timeout_s)
            conn.close()
            return
        reader = asyncio.StreamReader(limit=MAX_HEAD_BYTES, loop=loop)
        if first:
            reader.feed_data(first)
        else:
            reader.feed_eof()
        try:
            transport, protocol = await loop.connect_accepted_socket(
                lambda: asyncio.StreamReaderProtocol(reader, loop=loop), conn
            )
        except BaseException:
            conn.close()
            raise
        await self._serve_client(reader, asyncio.StreamWriter(transport, protocol, reader, loop))

    async def _adopt(self, conn: socket.socket, fds: list[int]) -> bytes:
        """Serve the listening socket a forwarder handed over (in `fds`) until the process
        that handed it over ends (``K``); ``N`` when it is not a listening TCP socket, or when
        that process's end cannot be watched here (the forwarder then carries the connections
        itself)."""
        if len(fds) != 1 or len(self._adopted) >= MAX_HANDED_OVER:
            return b"N"
        try:
            listener = socket.socket(fileno=os.dup(fds[0]))
        except OSError:
            return b"N"
        try:
            pid = struct.unpack("3i", conn.getsockopt(*_PEER_CREDENTIALS))[0]
            listening = listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
            if (
                pid <= 0
                or not listening
                or listener.type != socket.SOCK_STREAM
                or listener.family not in (socket.AF_INET, socket.AF_INET6)
            ):
                listener.close()
                return b"N"
            pidfd = os.pidfd_open(pid)
        except (OSError, AttributeError):  # a process already gone, or no pidfd here
            listener.close()
            return b"N"
        try:
            listener.setblocking(False)
            server = await asyncio.start_server(
                self._serve_client, sock=listener, limit=MAX_HEAD_BYTES
            )
        except BaseException:
            listener.close()
            os.close(pidfd)
            raise
        key = next(self._ids)
        self._adopted[key] = _Adopted(server, pidfd)
        asyncio.get_running_loop().add_reader(pidfd, self._command_ended, key)
        return b"K"

    def _command_ended(self, key: int) -> None:
        adopted = self._adopted.pop(key, None)
        if adopted is not None:
            adopted.close()
