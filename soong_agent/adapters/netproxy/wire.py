"""What the filtering proxy reads and writes on a client's connection (SBX-4): an HTTP request
head (absolute-URI or ``CONNECT host:port``), a SOCKS5 greeting and request, and the replies.
Pure parsing, no sockets."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 65536
"""The largest request head taken (request line and headers)."""

_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")
_HOP_HEADERS = frozenset(
    {"proxy-authorization", "proxy-connection", "connection", "keep-alive", "te", "upgrade"}
)


class BadRequest(ValueError):
    """A request the proxy cannot read; the message says what is wrong with it."""


def canonical_host(host: str) -> str:
    """A host as the allow-list compares it: lower-case, no brackets or trailing dot, an IP
    address normalised. Raises BadRequest for anything else than a name or an address (names
    reach the proxy already in their ASCII, IDNA form)."""
    bare = host.strip().strip("[]").rstrip(".").lower()
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        pass
    if not bare or len(bare) > 253 or not _NAME.match(bare):
        raise BadRequest(f"{host!r} is not a host name or address")
    return bare


def split_host_port(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` into its host and port."""
    if text.startswith("["):
        close = text.find("]")
        host, rest = text[1:close], text[close + 1 :] if close != -1 else ""
        if close == -1 or not rest.startswith(":"):
            raise BadRequest(f"{text!r} is not host:port")
        port_text = rest[1:]
    else:
        host, _, port_text = text.rpartition(":")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise BadRequest(f"{text!r} is not host:port")
    return canonical_host(host), int(port_text)


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One request read from a client.

    Attributes:
        connect: a ``CONNECT`` (a tunnel) rather than a plain request to forward.
        host: the target host, as compared.
        port: the target port.
        token: the password of the ``Proxy-Authorization`` header (the command's token), if any.
        forward: for a plain request, the head to send the server (origin-form request line,
            the proxy's own headers dropped, ``Connection: close``); empty for a tunnel.
    """

    connect: bool
    host: str
    port: int
    token: str | None
    forward: bytes = b""


def _token(value: str) -> str | None:
    scheme, _, encoded = value.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        return None
    return decoded.partition(":")[2] or None


def parse_http_head(head: bytes) -> HttpRequest:
    """Read a request head (ending with an empty line). Raises BadRequest."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise BadRequest(f"not an HTTP request line: {lines[0][:80]!r}")
    method, target, version = parts
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise BadRequest(f"not an HTTP header line: {line[:80]!r}")
        headers.append((name, value.strip()))
    token = next((_token(v) for n, v in headers if n.lower() == "proxy-authorization"), None)
    if method.upper() == "CONNECT":
        host, port = split_host_port(target)
        return HttpRequest(True, host, port, token)
    url = urlsplit(target)
    if url.scheme.lower() != "http" or not url.hostname:
        raise BadRequest(f"{target[:80]!r} is not an absolute http:// URL (use CONNECT for https)")
    try:
        port = url.port or 80
    except ValueError as exc:
        raise BadRequest(f"{target[:80]!r}: {exc}") from None
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    # the server is told the host that was checked, whatever Host the client sent (no other
    # virtual host behind an allowed address)
    kept = [(n, v) for n, v in headers if n.lower() not in _HOP_HEADERS and n.lower() != "host"]
    kept.insert(0, ("Host", url.netloc.rpartition("@")[2]))
    text = f"{method} {path} {version}\r\n"
    text += "".join(f"{n}: {v}\r\n" for n, v in kept)
    text += "Connection: close\r\n\r\n"
    return HttpRequest(False, canonical_host(url.hostname), port, token, text.encode("latin-1"))


def http_reply(status: int, reason: str, text: str) -> bytes:
    """A complete response carrying one line of `text`; the connection closes after it."""
    body = (" ".join(text.split()) + "\n").encode("utf-8")
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode("ascii") + body


CONNECTED = b"HTTP/1.1 200 Connection established\r\n\r\n"
NOT_OURS = (
    "soong-agent proxy: this proxy serves only the sandboxed commands of its runtime (the"
    " proxy URL of their environment carries their token)"
)


def unauthorized_reply() -> bytes:
    """``407``: a request without the token of a command of this runtime."""
    body = (NOT_OURS + "\n").encode("utf-8")
    return (
        "HTTP/1.1 407 Proxy Authentication Required\r\n"
        'Proxy-Authenticate: Basic realm="soong-agent"\r\n'
        f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode("ascii") + body


# --- SOCKS5 (RFC 1928, and RFC 1929 for the user name and password) ---------------------------

SOCKS_VERSION = 5
NO_AUTH, USER_PASSWORD, NO_METHOD = 0x00, 0x02, 0xFF
CMD_CONNECT = 1
ATYP_IPV4, ATYP_NAME, ATYP_IPV6 = 1, 3, 4
SOCKS_OK = 0x00
SOCKS_FAILURE = 0x01
SOCKS_NOT_ALLOWED = 0x02
SOCKS_HOST_UNREACHABLE = 0x04
SOCKS_REFUSED = 0x05
SOCKS_COMMAND_UNSUPPORTED = 0x07
SOCKS_ADDRESS_UNSUPPORTED = 0x08


def socks_reply(code: int) -> bytes:
    """A SOCKS5 reply with `code` and an empty IPv4 bound address."""
    return bytes([SOCKS_VERSION, code, 0, ATYP_IPV4, 0, 0, 0, 0, 0, 0])
