"""The filtering proxy on its own (SBX-4), spoken to over real loopback sockets: HTTP
absolute-URI requests, CONNECT tunnels and SOCKS5, each checked with the allow-list
``web_fetch`` uses; a refusal is an immediate answer (403 with the reason, SOCKS reply 2),
recorded for the command whose token the connection carried."""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from soong_agent.adapters.netproxy import FilteringProxy, proxy_env, tunnel
from soong_agent.adapters.web.allowlist import NetworkAllowList
from soong_agent.domain.config.tool_sections import NetworkConfig, SandboxConfig
from tests.support.loopback_sites import PAGE, Site, static_site


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    with static_site() as running:
        yield running


class EchoServer:
    """A loopback server that reads each connection to its end (the client's half-close),
    then sends back everything it read and closes."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.connections: list[threading.Thread] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            worker = threading.Thread(target=self._echo, args=(conn,), daemon=True)
            self.connections.append(worker)
            worker.start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            received = bytearray()
            while chunk := conn.recv(1048576):
                received += chunk
            conn.sendall(received)

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        self.thread.join()
        for worker in self.connections:
            worker.join(30)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    try:
        yield server
    finally:
        server.close()


def _proxy(site: Site, *, extra: tuple[str, ...] = (), **resolved: list[str]) -> FilteringProxy:
    async def resolver(host: str) -> list[str]:
        if host in resolved:
            return resolved[host]
        raise OSError(-2, "Name or service not known")

    gate = NetworkAllowList(
        allowed_hosts=[f"127.0.0.1:{site.port}", *extra],
        allowed_domains=["intranet.test", "public.test"],
        resolver=resolver,
    )
    return FilteringProxy(gate, head_timeout_s=5)


def _auth_line(proxy: FilteringProxy) -> str:
    """The Proxy-Authorization line of a command of the proxy's runtime (a new one)."""
    return _auth(proxy.open_session("a test client")) + "\r\n"


def _exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def _auth(token: str) -> str:
    return "Proxy-Authorization: Basic " + base64.b64encode(f"soong:{token}".encode()).decode()


def test_an_allowed_http_request_is_forwarded_and_another_refused(site: Site) -> None:
    proxy = _proxy(site)
    try:
        port = proxy.start().port
        token = proxy.open_session("curl stuff")
        ok = _exchange(
            port, f"GET {site.url}/ HTTP/1.1\r\nHost: x\r\n{_auth(token)}\r\n\r\n".encode()
        )
        assert ok.startswith(b"HTTP/1.0 200") and ok.endswith(PAGE)
        # a client that is not a command of this runtime (no token, or a made-up one)
        for head in ("", _auth("c1-made-up") + "\r\n"):
            other = _exchange(port, f"GET {site.url}/ HTTP/1.1\r\n{head}\r\n".encode())
            assert other.startswith(b"HTTP/1.1 407") and b"only the sandboxed commands" in other
        request = f"GET http://127.0.0.1:1/ HTTP/1.1\r\n{_auth(token)}\r\n\r\n"
        no = _exchange(port, request.encode())
        assert no.startswith(b"HTTP/1.1 403 Forbidden")
        assert b"127.0.0.1:1 is not allowed" in no
        (denial,) = proxy.end_session(token)
        assert (denial.host, denial.port, denial.command) == ("127.0.0.1", 1, "curl stuff")
    finally:
        proxy.close()


def test_connect_tunnels_to_an_allowed_host_only(site: Site) -> None:
    proxy = _proxy(site)
    try:
        port = proxy.start().port
        auth = _auth_line(proxy)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(f"CONNECT 127.0.0.1:{site.port} HTTP/1.1\r\n{auth}\r\n".encode())
            assert sock.recv(100).startswith(b"HTTP/1.1 200")
            sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        assert reply.endswith(PAGE)
        no = _exchange(port, f"CONNECT 10.0.0.1:443 HTTP/1.1\r\n{auth}\r\n".encode())
        assert no.startswith(b"HTTP/1.1 403")
        tokenless = _exchange(port, b"CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n")
        assert tokenless.startswith(b"HTTP/1.1 407")  # not a command of this runtime: no tunnel
        assert proxy.unattributed_denials() == ()  # every refusal names its command
    finally:
        proxy.close()


def _socks(port: int, host: bytes, target_port: int, token: str | None) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        if token is None:  # no token: no method the proxy accepts
            sock.sendall(b"\x05\x01\x00")
            assert sock.recv(2) == b"\x05\xff"
            return 0xFF, b""
        else:
            sock.sendall(b"\x05\x02\x00\x02")
            assert sock.recv(2) == b"\x05\x02"
            sock.sendall(b"\x01\x05soong" + bytes([len(token)]) + token.encode())
            assert sock.recv(2) == b"\x01\x00"
        sock.sendall(
            b"\x05\x01\x00\x03" + bytes([len(host)]) + host + struct.pack(">H", target_port)
        )
        reply = sock.recv(10)
        if reply[1] != 0:
            return reply[1], b""
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
        body = b""
        while chunk := sock.recv(65536):
            body += chunk
        return 0, body


def test_socks5_connects_to_an_allowed_host_and_refuses_another(site: Site) -> None:
    proxy = _proxy(site)
    try:
        port = proxy.start().port
        token = proxy.open_session("git fetch")
        code, body = _socks(port, b"127.0.0.1", site.port, token)
        assert code == 0 and body.endswith(PAGE)
        assert _socks(port, b"127.0.0.1", site.port, None)[0] == 0xFF  # no token: refused
        code, _ = _socks(port, b"example.org", 443, token)
        assert code == 2  # connection not allowed by ruleset
        (denial,) = proxy.end_session(token)
        assert (denial.host, denial.command) == ("example.org", "git fetch")
    finally:
        proxy.close()


def test_a_name_resolving_to_a_private_address_is_refused(site: Site) -> None:
    proxy = _proxy(site, **{"intranet.test": ["10.1.2.3"], "public.test": ["8.8.8.8", "10.0.0.9"]})
    try:
        port = proxy.start().port
        auth = _auth_line(proxy)
        no = _exchange(port, f"GET http://intranet.test/ HTTP/1.1\r\n{auth}\r\n".encode())
        assert no.startswith(b"HTTP/1.1 403")
        assert b"resolves to 10.1.2.3, a private address" in no
        # one private answer among public ones is enough to refuse (no rebinding around it)
        mixed = _exchange(port, f"CONNECT public.test:443 HTTP/1.1\r\n{auth}\r\n".encode())
        assert mixed.startswith(b"HTTP/1.1 403") and b"10.0.0.9" in mixed
        unknown = _exchange(port, f"GET http://intranet.test.nope/ HTTP/1.1\r\n{auth}\r\n".encode())
        assert unknown.startswith(b"HTTP/1.1 403")  # not in the list at all
    finally:
        proxy.close()


def test_bad_requests_get_an_answer_not_a_hang(site: Site) -> None:
    proxy = _proxy(site)
    try:
        port = proxy.start().port
        assert _exchange(port, b"nonsense\r\n\r\n").startswith(b"HTTP/1.1 400")
        relative = _exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert relative.startswith(b"HTTP/1.1 400") and b"absolute" in relative
        code, _ = _socks(port, b"bad host!", 80, proxy.open_session("a test client"))
        assert code == 8
    finally:
        proxy.close()


def test_close_leaves_no_socket_and_a_closed_proxy_does_not_start(site: Site) -> None:
    proxy = _proxy(site)
    address = proxy.start()
    assert proxy.start() == address  # once
    proxy.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", address.port), timeout=2).close()
    with pytest.raises(RuntimeError, match="closed"):
        proxy.start()


def test_the_proxy_variables_name_the_proxy_and_the_token() -> None:
    env = proxy_env(3128, "c1-abc")
    assert env["HTTP_PROXY"] == env["https_proxy"] == "http://soong:c1-abc@127.0.0.1:3128"
    assert env["ALL_PROXY"] == "socks5h://soong:c1-abc@127.0.0.1:3128"
    assert env["NO_PROXY"] == ""
    assert env["PIP_PROXY"] == env["npm_config_https_proxy"] == env["HTTP_PROXY"]
    assert (env["GIT_CONFIG_KEY_0"], env["GIT_CONFIG_VALUE_0"]) == ("http.proxy", env["HTTP_PROXY"])


def test_allowlist_is_the_default_network_when_tools_network_lists_anything() -> None:
    assert SandboxConfig().command_network(NetworkConfig()) is False
    listed = NetworkConfig(allowed_domains=["pypi.org"])
    assert SandboxConfig().command_network(listed) == "allowlist"
    assert SandboxConfig(network=False).command_network(listed) is False
    assert SandboxConfig(network=True).command_network(listed) is True
    assert SandboxConfig(network="allowlist").command_network(NetworkConfig()) == "allowlist"


def _send_all_then_read(port: int, data: bytes) -> bytes:
    """Send `data` in one write, end the sending (half-close), read the answer to its end."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(1048576):
            chunks.append(chunk)
        return b"".join(chunks)


@pytest.mark.parametrize("relay", ["splice", "streams"])
def test_bytes_sent_with_the_head_reach_the_server_and_half_close_is_passed_on(
    site: Site, echo: EchoServer, relay: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that sends its request and what follows in one write: the proxy has read
    the rest with the head before the tunnel starts, and must pass it on, then the client's
    end of sending (the echo server answers only after it). Also through the streams relay
    used where the unread bytes cannot be taken from asyncio."""
    if relay == "streams":

        def cannot(reader: object) -> bytes:
            raise RuntimeError("no _buffer here")

        monkeypatch.setattr(tunnel, "unread_bytes", cannot)
    proxy = _proxy(site, extra=(f"127.0.0.1:{echo.port}",))
    body = os.urandom(300_000)  # more than one read of the head phase
    try:
        port = proxy.start().port
        token = proxy.open_session("a test client")
        auth = _auth(token) + "\r\n"
        post = (
            f"POST http://127.0.0.1:{echo.port}/upload HTTP/1.1\r\nHost: x\r\n{auth}"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        echoed = _send_all_then_read(port, post + body)
        # the head, forwarded with the Host that was checked (not the client's)
        assert echoed.startswith(
            f"POST /upload HTTP/1.1\r\nHost: 127.0.0.1:{echo.port}\r\n".encode()
        )
        assert b"Host: x" not in echoed and b"Proxy-Authorization" not in echoed
        assert b"Connection: close\r\n\r\n" in echoed
        assert echoed.endswith(body)

        connect = f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\n{auth}\r\n".encode()
        tunneled = _send_all_then_read(port, connect + body)
        assert tunneled == b"HTTP/1.1 200 Connection established\r\n\r\n" + body

        target = b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack(">H", echo.port)
        login = b"\x01\x05soong" + bytes([len(token)]) + token.encode()
        socks = _send_all_then_read(port, b"\x05\x01\x02" + login + target + body)
        assert socks == b"\x05\x02\x01\x00" + bytes([5, 0, 0, 1, 0, 0, 0, 0, 0, 0]) + body
    finally:
        proxy.close()


def test_a_large_transfer_arrives_whole_both_ways(site: Site, echo: EchoServer) -> None:
    proxy = _proxy(site, extra=(f"127.0.0.1:{echo.port}",))
    payload = os.urandom(24 * 1048576)
    try:
        port = proxy.start().port
        auth = _auth_line(proxy)
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            sock.sendall(f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\n{auth}\r\n".encode())
            assert sock.recv(100) == b"HTTP/1.1 200 Connection established\r\n\r\n"
            sender = threading.Thread(target=lambda: (sock.sendall(payload), sock.shutdown(1)))
            sender.start()
            digest, size = hashlib.sha256(), 0
            while chunk := sock.recv(1048576):
                digest.update(chunk)
                size += len(chunk)
            sender.join()
        assert size == len(payload)
        assert digest.digest() == hashlib.sha256(payload).digest()
    finally:
        proxy.close()


def _open_fds() -> dict[str, str]:
    """This process's open descriptors and what they are (not the one listing them)."""
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            continue  # the listing's own, closed by now
    return found


def test_close_ends_open_tunnels_and_leaves_no_thread_or_descriptor(
    site: Site, echo: EchoServer
) -> None:
    before = _open_fds()
    proxy = _proxy(site, extra=(f"127.0.0.1:{echo.port}",))
    port = proxy.start().port
    auth = _auth_line(proxy)
    clients = []
    try:
        for _ in range(3):  # tunnels in the middle of their work: the server waits for the end
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            clients.append(sock)
            head = f"CONNECT 127.0.0.1:{echo.port} HTTP/1.1\r\n{auth}\r\n"
            sock.sendall(f"{head}some bytes".encode())
            assert sock.recv(100) == b"HTTP/1.1 200 Connection established\r\n\r\n"
        assert proxy.open_connections == 3
    finally:
        proxy.close()
    for sock in clients:
        assert sock.recv(100) == b""  # the proxy ended the tunnel
        sock.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("soong-netproxy")]
    deadline = time.monotonic() + 10  # the echo server's side closes on its own thread
    while _open_fds().keys() - before.keys() and time.monotonic() < deadline:
        time.sleep(0.05)
    now = _open_fds()
    assert {fd: now[fd] for fd in now.keys() - before.keys()} == {}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _connects(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError:
        return False
    return True


@pytest.mark.parametrize("way", ["handed over", "carried"])
def test_the_forwarder_hands_its_listening_socket_over_and_becomes_the_command(
    site: Site, way: str
) -> None:
    """The forwarder (run here without a sandbox, on a free loopback port) hands its listening
    socket to the proxy, which serves it, and is replaced by the command; when the command
    ends, the proxy stops listening on it. A proxy that does not take the socket (``N``, e.g.
    no pidfd): the forwarder carries the connections itself, in front of the command."""
    proxy = _proxy(site)
    if way == "carried":

        async def refuse(conn: socket.socket, fds: list[int]) -> bytes:
            return b"N"

        proxy._unix._adopt = refuse  # type: ignore[method-assign]
    try:
        prefix = proxy.forwarder_prefix()
        port = _free_port()
        prefix[-1] = str(port)  # the proxy's own port is taken on this host's loopback
        command = [sys.executable, "-c", "import sys; sys.stdin.read()  # the command"]
        child = subprocess.Popen([*prefix, *command], stdin=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while not _connects(port) and time.monotonic() < deadline:
                time.sleep(0.05)
            auth = _auth_line(proxy)
            reply = _exchange(port, f"GET {site.url}/ HTTP/1.1\r\n{auth}\r\n".encode())
            assert reply.startswith(b"HTTP/1.0 200") and reply.endswith(PAGE)
            with open(f"/proc/{child.pid}/cmdline", "rb") as cmdline:
                forwarder_in_front = b"\0-S\0-c\0" in cmdline.read()
            assert forwarder_in_front == (way == "carried")  # else exec'd into the command
        finally:
            assert child.stdin is not None
            child.stdin.close()
            assert child.wait(timeout=30) == 0
        deadline = time.monotonic() + 10
        while _connects(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _connects(port)  # the command ended: the proxy stopped listening there
    finally:
        proxy.close()


def test_the_unix_socket_refuses_what_is_not_a_listening_socket_and_serves_clients(
    site: Site,
) -> None:
    proxy = _proxy(site)
    try:
        path = proxy.start().unix_path
        read_end, write_end = os.pipe()
        with socket.socket(socket.AF_UNIX) as link:
            link.connect(path)
            socket.send_fds(link, [b"L"], [read_end])
            assert link.recv(1) == b"N"
        with socket.socket() as connected, socket.socket(socket.AF_UNIX) as link:
            connected.connect(("127.0.0.1", site.port))
            link.connect(path)
            socket.send_fds(link, [b"L"], [connected.fileno()])
            assert link.recv(1) == b"N"  # a connection, not a listening socket
        os.close(read_end)
        os.close(write_end)
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(10)
            client.connect(path)
            client.sendall(f"GET {site.url}/ HTTP/1.1\r\n{_auth_line(proxy)}\r\n".encode())
            reply = b""
            while chunk := client.recv(65536):
                reply += chunk
        assert reply.startswith(b"HTTP/1.0 200") and reply.endswith(PAGE)
    finally:
        proxy.close()


def test_a_command_cannot_hold_more_than_the_cap_of_connections(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each connection holds descriptors of the agent's own process: past the cap a new one
    is closed at once, and a slow SOCKS client is dropped after the head timeout as a whole."""
    from soong_agent.adapters.netproxy import server

    monkeypatch.setattr(server, "MAX_CONNECTIONS", 2)
    gate = NetworkAllowList(allowed_hosts=[f"127.0.0.1:{site.port}"], allowed_domains=[])
    proxy = FilteringProxy(gate, head_timeout_s=1.0)
    try:
        port = proxy.start().port
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
        deadline = time.monotonic() + 10
        while proxy.open_connections < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as third:
            assert third.recv(100) == b""  # closed at once, nothing served
        for sock in held:
            sock.close()
        while proxy.open_connections and time.monotonic() < deadline + 10:
            time.sleep(0.01)  # their connections end (the client went away)
        token = proxy.open_session("a slow client")
        with socket.create_connection(("127.0.0.1", port), timeout=10) as slow:
            began = time.monotonic()
            slow.sendall(b"\x05\x01\x02")
            assert slow.recv(2) == b"\x05\x02"
            slow.sendall(b"\x01\x05soong" + bytes([len(token)]))  # and then nothing more
            assert slow.recv(100) == b""
            assert time.monotonic() - began < 8  # the whole negotiation had one deadline
    finally:
        proxy.close()
