"""The relay phase of a proxied connection (SBX-4): once a tunnel is set up (``CONNECT``, a
SOCKS5 ``CONNECT``, or a plain HTTP request whose head was sent on), the bytes go both ways
without passing through Python.

The client's socket is taken out of asyncio (reading paused, the bytes its StreamReader already
holds taken, the socket duplicated and asyncio's copy closed); the server's socket was never in
asyncio's streams. Two threads then move the bytes with ``os.splice`` through a pipe each, in
the kernel: when one side ends its sending, the other side's sending is shut down in turn
(half-close is passed on); a reset on either side cuts both. Where ``os.splice`` does not
exist, the same threads copy with ``recv``/``sendall``.

`relay` returns when both directions are done and both sockets are closed; cancelled (the proxy
closing), it cuts both sockets and waits for its threads, so nothing is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading

CHUNK = 1048576
"""The most bytes moved by one splice (and the pipe's size when the system allows it)."""
THREAD_NAME = "soong-netproxy-relay"
_JOIN_S = 10.0


def unread_bytes(reader: asyncio.StreamReader) -> bytes:
    """The bytes `reader` received that nobody read yet, taken out of it (its transport must
    be paused, so that nothing is added while they are taken).

    asyncio has no public call for this (``read`` waits when nothing is there), so this reads
    CPython's StreamReader buffer, ``_buffer`` (a bytearray), directly. This is the only place
    that does; tests/integration/test_netproxy.py proves the bytes are not lost (a request
    body sent together with its head, ahead of a tunnel). Raises RuntimeError when this
    Python's StreamReader keeps no such buffer."""
    buffer = getattr(reader, "_buffer", None)
    if not isinstance(buffer, bytearray):
        raise RuntimeError("asyncio.StreamReader has no _buffer bytearray in this Python")
    taken = bytes(buffer)
    buffer.clear()
    return taken


async def detach(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> tuple[socket.socket, bytes] | None:
    """The client's socket out of asyncio (a blocking duplicate; asyncio's copy closed) and
    the bytes the client sent that were not read yet; None when the connection is already
    closing. Everything written to `writer` is sent first. RuntimeError (nothing taken,
    reading resumed) when this cannot be done here."""
    transport = writer.transport
    if not isinstance(transport, asyncio.Transport):
        raise RuntimeError(f"the client's transport is a {type(transport).__name__}")
    transport.set_write_buffer_limits(high=0)
    await writer.drain()  # returns once the write buffer is empty
    transport.pause_reading()
    held = transport.get_extra_info("socket")
    if held is None or transport.is_closing():
        return None
    try:
        pending = unread_bytes(reader)
    except RuntimeError:
        transport.resume_reading()
        raise
    sock = held.dup()
    transport.close()
    sock.setblocking(True)
    return sock, pending


def _no_delay(sock: socket.socket) -> None:
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _cut(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _splice(source: socket.socket, target: socket.socket) -> None:
    read_end, write_end = os.pipe2(os.O_CLOEXEC)
    try:
        with contextlib.suppress(OSError, AttributeError):
            import fcntl

            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, CHUNK)  # a bigger pipe: fewer calls
        source_fd, target_fd = source.fileno(), target.fileno()
        while moved := os.splice(source_fd, write_end, CHUNK, flags=os.SPLICE_F_MOVE):
            while moved:
                moved -= os.splice(read_end, target_fd, moved, flags=os.SPLICE_F_MOVE)
    finally:
        os.close(read_end)
        os.close(write_end)


def _copy(source: socket.socket, target: socket.socket) -> None:
    while data := source.recv(262144):
        target.sendall(data)


def _one_way(source: socket.socket, target: socket.socket, first: bytes) -> None:
    """Move `first`, then everything `source` sends, to `target`; pass its end on."""
    try:
        if first:
            target.sendall(first)
        if hasattr(os, "splice"):
            _splice(source, target)
        else:  # pragma: no cover - Linux has splice
            _copy(source, target)
    except OSError:
        _cut(source, target)  # a reset or a failed write: the other direction ends too
        return
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


async def relay(client: socket.socket, upstream: socket.socket, pending: bytes = b"") -> None:
    """Relay between two connected blocking sockets until both directions are done (`pending`:
    bytes the client sent already, for `upstream`), then close both. Takes both sockets."""
    loop = asyncio.get_running_loop()
    finished = loop.create_future()
    left = [2]

    def one_done() -> None:
        left[0] -= 1
        if left[0] == 0 and not finished.done():
            finished.set_result(None)

    def run(source: socket.socket, target: socket.socket, first: bytes) -> None:
        try:
            _one_way(source, target, first)
        finally:
            loop.call_soon_threadsafe(one_done)

    threads: list[threading.Thread] = []
    ended = False
    try:
        for sock in (client, upstream):
            sock.setblocking(True)
            _no_delay(sock)
        for source, target, first in ((client, upstream, pending), (upstream, client, b"")):
            thread = threading.Thread(
                target=run, args=(source, target, first), name=THREAD_NAME, daemon=True
            )
            thread.start()
            threads.append(thread)
        await finished
        ended = True
    finally:
        if not ended:  # cancelled (the proxy is closing), or a thread did not start
            _cut(client, upstream)
        for thread in threads:
            thread.join(_JOIN_S)
        client.close()
        upstream.close()
