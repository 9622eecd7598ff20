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
import shutil
import socket
import sys
import tempfile
import threading
from dataclasses import dataclass

from soong_agent.adapters.netproxy.env import proxy_env
from soong_agent.adapters.netproxy.handler import ClientHandler, ConnectGate
from soong_agent.adapters.netproxy.sessions import Sessions
from soong_agent.adapters.netproxy.unix_side import UnixSide
from soong_agent.adapters.netproxy.wire import MAX_HEAD_BYTES
from soong_agent.ports.ossandbox import NetworkDenial

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
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


MAX_CONNECTIONS = 128
"""The most client connections served at once (each holds up to seven descriptors of the
agent's process while it relays); one more is closed at once."""


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
        self._sessions = Sessions()
        self._handler = ClientHandler(
            gate,
            self._sessions.record,
            known=self._sessions.known,
            connect_timeout_s=connect_timeout_s,
            head_timeout_s=head_timeout_s,
        )
        self._lock = threading.Lock()
        self._address: ProxyAddress | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._folder: str | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._unix = UnixSide(
            self._client,
            self._connections,
            head_timeout_s=head_timeout_s,
            stopping=lambda: self._stopping is not None and self._stopping.is_set(),
        )
        self._head_timeout_s = head_timeout_s
        self._closed = False
        self._ids = itertools.count(1)
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
        accepting = asyncio.create_task(self._unix.accept(unix))
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
            self._unix.close()
            for task in list(self._connections):
                task.cancel()
            if self._connections:
                await asyncio.wait(list(self._connections))
            await tcp.wait_closed()
            await self._unix.wait_closed()

    # --- sessions: which command a connection belongs to (`sessions`) --------------------

    def open_session(self, command: str) -> str:
        """A token for one command (`command`: its text); its connections carry it."""
        return self._sessions.open(command)

    def end_session(self, token: str) -> tuple[NetworkDenial, ...]:
        """Forget a command's token; what the proxy refused it (in order)."""
        return self._sessions.end(token)

    def session_denials(self, token: str) -> tuple[NetworkDenial, ...]:
        """What the proxy refused the command of `token` so far."""
        return self._sessions.denials(token)

    def unattributed_denials(self) -> tuple[NetworkDenial, ...]:
        """Refusals of connections whose command could not be told."""
        return self._sessions.unattributed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections - {task}) >= MAX_CONNECTIONS:  # the agent keeps descriptors
            writer.close()
            return
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
