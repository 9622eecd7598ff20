"""`FilteringProxy`: the host-side proxy sandboxed commands reach the network through (SBX-4).

An asyncio server on a thread of its own (so it serves whichever event loop, or thread, the
commands are started from), listening on ``127.0.0.1:<port>`` (Landlock: commands may connect
to that port only) and on a Unix socket (bubblewrap: bound into the sandbox). Under bubblewrap
the `forwarder` opens a listening socket on the sandbox's own loopback and hands it over through
the Unix socket (SCM_RIGHTS); the proxy then accepts the sandbox's connections on it directly
until the command ends (its pidfd), so no byte crosses an extra hop. The Unix socket also
serves clients like the TCP port. Each client connection is one of:

- an HTTP request with an absolute URI (``GET http://host:port/path``): checked, then sent to
  the server in origin form with ``Connection: close``, the answer streamed back;
- ``CONNECT host:port``: checked, then a byte tunnel (TLS passes through, never opened), relayed
  in the kernel (`tunnel`);
- SOCKS5 (no authentication, or a user name and password, which only names the command),
  ``CONNECT`` only, to a name or an address.

Every target goes through the gate (`ConnectGate`, the allow-list ``web_fetch`` uses): the
name must be allowed, it is resolved here, on the host, and the proxy connects to the addresses
the gate checked (a loopback, private, link-local or metadata address only when listed
literally), never to a second answer of the resolver. A refused target gets ``403`` with the
reason on one line (or SOCKS reply 2) at once, and is recorded as a `NetworkDenial` for the
command whose token the connection carried (the proxy URL's password).

`start` is called at the first command that needs the proxy; `close` ends every connection,
the thread and both sockets.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ipaddress
import itertools
import os
import secrets
import shutil
import socket
import struct
import sys
import tempfile
import threading
from dataclasses import dataclass, field

from soong_agent.adapters.netproxy.env import proxy_env
from soong_agent.adapters.netproxy.handler import ClientHandler, ConnectGate
from soong_agent.adapters.netproxy.wire import MAX_HEAD_BYTES
from soong_agent.ports.ossandbox import NetworkDenial

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
UNKNOWN_COMMAND = "(a sandboxed command the proxy could not tell apart)"
_sources: dict[str, str] = {}


def _forwarder_source() -> str:
    if "forwarder" not in _sources:
        path = os.path.join(os.path.dirname(__file__), "forwarder.py")
        with open(path, encoding="utf-8") as handle:
            _sources["forwarder"] = handle.read()
    return _sources["forwarder"]


@dataclass(frozen=True, slots=True)
class ProxyAddress:
    """Where the proxy listens: TCP on `host:port`, and the Unix socket `unix_path`."""

    host: str
    port: int
    unix_path: str

    def __str__(self) -> str:
        return f"{self.host}:{self.port} (and {self.unix_path})"


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


@dataclass(slots=True)
class _Session:
    command: str
    denials: list[NetworkDenial] = field(default_factory=list)


class FilteringProxy:
    """The filtering proxy of one runtime; see the module documentation.

    `connect_timeout_s` bounds connecting to a server; `head_timeout_s` bounds reading a
    client's request (a silent client is dropped, never waited for); `python` runs the
    forwarder inside a sandbox (this interpreter by default).
    """

    def __init__(
        self,
        gate: ConnectGate,
        *,
        connect_timeout_s: float = 10.0,
        head_timeout_s: float = 30.0,
        python: str | None = None,
    ) -> None:
        self._handler = ClientHandler(
            gate,
            self._record,
            connect_timeout_s=connect_timeout_s,
            head_timeout_s=head_timeout_s,
        )
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._unattributed: list[NetworkDenial] = []
        self._address: ProxyAddress | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._folder: str | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._adopted: dict[int, _Adopted] = {}
        self._head_timeout_s = head_timeout_s
        self._closed = False
        self._ids = itertools.count(1)
        self._ended: dict[str, str] = {}
        self._python = python or sys.executable

    def __repr__(self) -> str:
        return f"FilteringProxy({self._address or 'not started'})"

    # --- life -----------------------------------------------------------------------------

    @property
    def address(self) -> ProxyAddress | None:
        """Where it listens, None before `start` (and after `close`)."""
        return self._address

    def start(self) -> ProxyAddress:
        """Start listening (once; later calls return the address). Raises OSError when a
        socket cannot be opened, RuntimeError after `close`."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the filtering proxy was closed")
            if self._address is not None:
                return self._address
            ready = threading.Event()
            failure: list[BaseException] = []
            thread = threading.Thread(
                target=self._main, args=(ready, failure), name="soong-netproxy", daemon=True
            )
            thread.start()
            ready.wait()
            if failure:
                thread.join()
                raise failure[0]
            self._thread = thread
            assert self._address is not None
            return self._address

    def close(self) -> None:
        """End every connection and stop listening; the thread is gone when this returns."""
        with self._lock:
            self._closed = True
            thread, loop, stopping = self._thread, self._loop, self._stopping
            self._thread = None
        if thread is not None and loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stopping.set)
            thread.join()
        self._address = None

    def tcp_port(self) -> int:
        """The loopback port commands connect to (Landlock); starts the proxy."""
        return self.start().port

    def forwarder_prefix(self) -> list[str]:
        """``python -I -S -c <forwarder> <unix socket> <port>``: inside a bubblewrap sandbox
        without a network, hands the proxy a listening socket on the sandbox's loopback at
        the proxy's port, then becomes the argv that follows (see `forwarder`); starts the
        proxy."""
        address = self.start()
        return [
            self._python,
            "-I",
            "-S",
            "-c",
            _forwarder_source(),
            address.unix_path,
            str(address.port),
        ]

    def command_env(self, token: str) -> dict[str, str]:
        """The proxy variables of a command holding `token` (`env.proxy_env`)."""
        return proxy_env(self.start().port, token)

    async def aclose(self) -> None:
        """`close` off the event loop (it joins the proxy's thread)."""
        await asyncio.to_thread(self.close)

    @property
    def open_connections(self) -> int:
        """How many client connections are being served now."""
        return len(self._connections)

    def _main(self, ready: threading.Event, failure: list[BaseException]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._serve(ready))
        except BaseException as exc:
            failure.append(exc)
            ready.set()
        finally:
            loop.close()
            self._loop = None
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
                self._folder = None

    async def _serve(self, ready: threading.Event) -> None:
        self._stopping = asyncio.Event()
        self._folder = tempfile.mkdtemp(prefix="soong-proxy-")
        atexit.register(shutil.rmtree, self._folder, True)  # a runtime that was never closed
        unix_path = os.path.join(self._folder, "proxy.sock")
        tcp = await asyncio.start_server(
            self._client, "127.0.0.1", 0, limit=MAX_HEAD_BYTES, reuse_address=True
        )
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            unix.bind(unix_path)
            os.chmod(unix_path, 0o600)
            unix.listen(128)
            unix.setblocking(False)
        except BaseException:
            unix.close()
            tcp.close()
            raise
        accepting = asyncio.create_task(self._accept_unix(unix))
        port = int(tcp.sockets[0].getsockname()[1])
        self._address = ProxyAddress("127.0.0.1", port, unix_path)
        ready.set()
        try:
            await self._stopping.wait()
        finally:
            tcp.close()
            accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await accepting
            unix.close()
            for adopted in list(self._adopted.values()):
                adopted.close()
            for task in list(self._connections):
                task.cancel()
            if self._connections:
                await asyncio.wait(list(self._connections))
            await tcp.wait_closed()
            for adopted in list(self._adopted.values()):
                await adopted.server.wait_closed()
            self._adopted.clear()

    # --- the Unix socket: clients, and listening sockets handed over from sandboxes -------

    async def _accept_unix(self, listener: socket.socket) -> None:
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
            if self._stopping is None or not self._stopping.is_set():
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
        await self._client(reader, asyncio.StreamWriter(transport, protocol, reader, loop))

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
            server = await asyncio.start_server(self._client, sock=listener, limit=MAX_HEAD_BYTES)
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

    # --- sessions: which command a connection belongs to ----------------------------------

    def open_session(self, command: str) -> str:
        """A token for one command (`command`: its text); its connections carry it."""
        token = f"c{next(self._ids)}-{secrets.token_hex(8)}"
        with self._lock:
            self._sessions[token] = _Session(command)
        return token

    def end_session(self, token: str) -> tuple[NetworkDenial, ...]:
        """Forget a command's token; what the proxy refused it (in order)."""
        with self._lock:
            session = self._sessions.pop(token, None)
            if session is not None:
                self._ended[token] = session.command
                while len(self._ended) > 256:
                    del self._ended[next(iter(self._ended))]
        return tuple(session.denials) if session is not None else ()

    def session_denials(self, token: str) -> tuple[NetworkDenial, ...]:
        """What the proxy refused the command of `token` so far."""
        with self._lock:
            session = self._sessions.get(token)
            return tuple(session.denials) if session is not None else ()

    def unattributed_denials(self) -> tuple[NetworkDenial, ...]:
        """Refusals of connections that named no command while several were running."""
        with self._lock:
            return tuple(self._unattributed)

    def _record(self, token: str | None, host: str, port: int, reason: str) -> None:
        with self._lock:
            session = self._sessions.get(token) if token else None
            if token is None and len(self._sessions) == 1:
                session = next(iter(self._sessions.values()))  # the only command running
            command = session.command if session is not None else UNKNOWN_COMMAND
            if session is None and token in self._ended:
                command = self._ended[token]  # e.g. a background command, after its start
            denial = NetworkDenial(host, port, command, reason)
            if session is not None:
                session.denials.append(denial)
            else:
                self._unattributed.append(denial)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._handler(reader, writer)
        except asyncio.CancelledError:
            if self._stopping is None or not self._stopping.is_set():
                raise
            # `close` ended it; ending quietly, as Python 3.11's start_server logs a client
            # task that ends cancelled as an error
        finally:
            self._connections.discard(task)
