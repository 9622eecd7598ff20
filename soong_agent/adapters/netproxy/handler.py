"""One client connection of the filtering proxy (SBX-4): an HTTP request (absolute URI or
``CONNECT``) or a SOCKS5 ``CONNECT``, checked by the gate, then relayed both ways.

A refused target is answered at once (``403`` with the reason, SOCKS reply 2) and reported to
`Record` with the command's token; a target that cannot be reached gets ``502`` (SOCKS reply
4). Nothing waits for ever: reading a request is bounded by `head_timeout_s`, connecting by
`connect_timeout_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Callable, Sequence
from typing import Protocol

from soong_agent.adapters.netproxy.tunnel import detach, relay
from soong_agent.adapters.netproxy.wire import (
    ATYP_IPV4,
    ATYP_IPV6,
    ATYP_NAME,
    CMD_CONNECT,
    CONNECTED,
    NO_METHOD,
    SOCKS_ADDRESS_UNSUPPORTED,
    SOCKS_COMMAND_UNSUPPORTED,
    SOCKS_HOST_UNREACHABLE,
    SOCKS_NOT_ALLOWED,
    SOCKS_OK,
    SOCKS_VERSION,
    USER_PASSWORD,
    BadRequest,
    canonical_host,
    http_reply,
    parse_http_head,
    socks_reply,
    unauthorized_reply,
)
from soong_agent.ports.errors import PermissionDenied, SoongAgentError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Record = Callable[[str | None, str, int, str], None]
"""Called with (token, host, port, reason) for each refused target."""
Known = Callable[[str | None], bool]
"""Whether a token is that of a command of this runtime (others are not served)."""
STREAM_CHUNK = 262144
"""The most bytes read at once where the relay goes through asyncio streams."""


class ConnectGate(Protocol):
    """Who may be reached: ``tools.network`` (`adapters.web.allowlist.NetworkAllowList`)."""

    async def addresses(self, host: str, port: int, *, where: str = "") -> Sequence[IPAddress]:
        """The checked addresses of `host:port`; PermissionDenied when it is not allowed,
        another SoongAgentError when the name does not resolve."""
        ...


class _Refused(Exception):
    """A target the gate refused (`denied`) or could not reach; the message says why."""

    def __init__(self, message: str, *, denied: bool) -> None:
        super().__init__(message)
        self.denied = denied


class ClientHandler:
    """Serves client connections through `gate`; refusals go to `record`."""

    def __init__(
        self,
        gate: ConnectGate,
        record: Record,
        *,
        known: Known = lambda _token: True,
        connect_timeout_s: float,
        head_timeout_s: float,
    ) -> None:
        self._gate = gate
        self._record = record
        self._connect_timeout_s = connect_timeout_s
        self._head_timeout_s = head_timeout_s
        self._known = known

    async def __call__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one client connection to its end."""
        try:
            first = await asyncio.wait_for(reader.readexactly(1), self._head_timeout_s)
            if first[0] == SOCKS_VERSION:
                await self._socks(reader, writer)
            else:
                await self._http(first, reader, writer)
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError):
            pass  # the client went away or said nothing: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _open(self, host: str, port: int, token: str | None) -> socket.socket:
        """A connected socket to an allowed, checked address of `host:port`, or _Refused."""
        try:
            found = await self._gate.addresses(host, port)
        except PermissionDenied as exc:
            self._record(token, host, port, str(exc))
            raise _Refused(str(exc), denied=True) from None
        except SoongAgentError as exc:
            raise _Refused(str(exc), denied=False) from None
        problem = f"no address of {host}"
        loop = asyncio.get_running_loop()
        for ip in found:
            family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await asyncio.wait_for(
                    loop.sock_connect(sock, (str(ip), port)), self._connect_timeout_s
                )
                return sock
            except TimeoutError:
                problem = f"connecting to {ip} port {port} timed out"
            except OSError as exc:
                problem = f"connecting to {ip} port {port} failed: {exc.strerror or exc}"
            except BaseException:
                sock.close()
                raise
            sock.close()
        raise _Refused(problem, denied=False)

    async def _http(
        self, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            rest = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self._head_timeout_s)
            request = parse_http_head(first + rest)
        except asyncio.LimitOverrunError:
            writer.write(http_reply(431, "Request Header Fields Too Large", "head too large"))
            return
        except BadRequest as exc:
            writer.write(http_reply(400, "Bad Request", f"soong-agent proxy: {exc}"))
            return
        if not self._known(request.token):
            writer.write(unauthorized_reply())
            return
        try:
            upstream = await self._open(request.host, request.port, request.token)
        except _Refused as exc:
            if exc.denied:
                writer.write(http_reply(403, "Forbidden", f"soong-agent proxy: {exc}"))
            else:
                writer.write(http_reply(502, "Bad Gateway", f"soong-agent proxy: {exc}"))
            return
        try:
            if request.connect:
                writer.write(CONNECTED)
            else:
                await asyncio.get_running_loop().sock_sendall(upstream, request.forward)
        except BaseException:
            upstream.close()
            raise
        await _relay(reader, writer, upstream)

    async def _socks(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:  # the whole negotiation within one deadline: a slow client holds nothing long
            async with asyncio.timeout(self._head_timeout_s):
                target = await self._socks_target(reader, writer)
        except TimeoutError:
            return
        if target is None:
            return
        host, port, token = target
        try:
            upstream = await self._open(host, port, token)
        except _Refused as exc:
            writer.write(socks_reply(SOCKS_NOT_ALLOWED if exc.denied else SOCKS_HOST_UNREACHABLE))
            return
        writer.write(socks_reply(SOCKS_OK))
        await _relay(reader, writer, upstream)

    async def _socks_target(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[str, int, str | None] | None:
        """The SOCKS5 negotiation up to the target; None when it was refused (answered)."""
        count = (await reader.readexactly(1))[0]
        methods = await reader.readexactly(count)
        if USER_PASSWORD not in methods:  # the command's token comes as the password
            writer.write(bytes([SOCKS_VERSION, NO_METHOD]))
            return None
        writer.write(bytes([SOCKS_VERSION, USER_PASSWORD]))
        head = await reader.readexactly(2)
        await reader.readexactly(head[1])  # the user name
        length = (await reader.readexactly(1))[0]
        token = (await reader.readexactly(length)).decode("utf-8", "replace")
        if not self._known(token):
            writer.write(b"\x01\x01")
            return None
        writer.write(b"\x01\x00")
        version, command, _, kind = await reader.readexactly(4)
        if version != SOCKS_VERSION:
            return None
        if kind == ATYP_IPV4:
            raw = str(ipaddress.IPv4Address(await reader.readexactly(4)))
        elif kind == ATYP_IPV6:
            raw = str(ipaddress.IPv6Address(await reader.readexactly(16)))
        elif kind == ATYP_NAME:
            length = (await reader.readexactly(1))[0]
            raw = (await reader.readexactly(length)).decode("ascii", "replace")
        else:
            writer.write(socks_reply(SOCKS_ADDRESS_UNSUPPORTED))
            return None
        port = int.from_bytes(await reader.readexactly(2), "big")
        if command != CMD_CONNECT:
            writer.write(socks_reply(SOCKS_COMMAND_UNSUPPORTED))
            return None
        try:
            return canonical_host(raw), port, token
        except BadRequest:
            writer.write(socks_reply(SOCKS_ADDRESS_UNSUPPORTED))
            return None


async def _relay(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: socket.socket
) -> None:
    """Relay between the client and the connected `upstream` until both are done (each
    side's end passed on), then close `upstream`: in the kernel (`tunnel.relay`) once the
    client's socket is out of asyncio, else (a Python whose StreamReader `tunnel.detach`
    cannot take the unread bytes from) through asyncio streams."""
    try:
        detached = await detach(reader, writer)
    except RuntimeError:
        detached = None
        fallback = True
    except BaseException:
        upstream.close()
        raise
    else:
        fallback = False
    if detached is not None:
        client, pending = detached
        await relay(client, upstream, pending)
        return
    if not fallback:  # the client went away meanwhile
        upstream.close()
        return
    try:
        up_reader, up_writer = await asyncio.open_connection(sock=upstream, limit=STREAM_CHUNK)
    except BaseException:
        upstream.close()
        raise
    for stream in (writer, up_writer):
        # a deeper write buffer than `detach` left: fewer pauses in drain() on a download
        stream.transport.set_write_buffer_limits(high=4 * STREAM_CHUNK)
    try:
        await asyncio.gather(_copy(reader, up_writer), _copy(up_reader, writer))
    finally:
        up_writer.close()
        with contextlib.suppress(OSError, asyncio.CancelledError):
            await up_writer.wait_closed()


async def _copy(source: asyncio.StreamReader, target: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(STREAM_CHUNK):
            target.write(data)
            await target.drain()
        if target.can_write_eof():
            target.write_eof()
    except (ConnectionError, OSError):
        target.transport.abort()
