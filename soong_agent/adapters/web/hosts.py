"""Who `HttpxWebFetcher` may reach (SBX-2): the ``allowed_hosts`` and ``allowed_domains``
entries read, host names in their IDNA form, and why an address is not public."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass

import httpx

from soong_agent.domain.permissions.targets import DomainPattern
from soong_agent.ports.errors import ConfigError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def ascii_host(host: str) -> str:
    """A host name as compared: IDNA (punycode), lower-case, no trailing dot; IPs normalised."""
    bare = host.strip().strip("[]").rstrip(".").lower()
    if not bare:
        raise ValueError("empty host")
    ip = ip_or_none(bare)
    if ip is not None:
        return str(ip)
    return httpx.URL(scheme="http", host=bare).raw_host.decode("ascii").lower()


def ip_or_none(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class HostEntry:
    host: str
    port: int | None


def host_entry(entry: str) -> HostEntry:
    """Parse an ``allowed_hosts`` entry: ``name``, ``name:port``, ``1.2.3.4``, ``[::1]:8080``."""
    text = entry.strip()
    problem = f"tools.network.allowed_hosts: {entry!r} is not a host or host:port"
    if "://" in text:
        raise ConfigError(f"{problem} (give the host without a scheme)")
    host, port_text = text, ""
    if text.startswith("["):
        close = text.find("]")
        if close == -1:
            raise ConfigError(problem)
        host, rest = text[1:close], text[close + 1 :]
        if rest:
            if not rest.startswith(":"):
                raise ConfigError(problem)
            port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    port: int | None = None
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ConfigError(problem)
        port = int(port_text)
    try:
        return HostEntry(ascii_host(host), port)
    except (ValueError, httpx.InvalidURL):
        raise ConfigError(problem) from None


def domain_entry(entry: str) -> DomainPattern:
    """Parse an ``allowed_domains`` entry (see the module docstring) into IDNA form."""
    try:
        pattern = DomainPattern.parse(entry)
        ascii_domain = ascii_host(pattern.domain)
    except (ValueError, httpx.InvalidURL):
        raise ConfigError(
            f"tools.network.allowed_domains: {entry!r} is not a domain (example.com: the domain "
            "and its subdomains; *.example.com: its subdomains only)"
        ) from None
    return DomainPattern(ascii_domain, subdomains_only=pattern.subdomains_only)


# --- addresses -------------------------------------------------------------------------------


def non_public_reason(ip: IPAddress) -> str | None:
    """Why `ip` must not be reached without an explicit entry, or None for a public address."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and ip in _NAT64:
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return non_public_reason(embedded)
    checks = (
        (ip.is_loopback, "loopback"),
        (ip.is_unspecified, "unspecified"),
        (ip.is_link_local, "link-local"),
        (ip.is_multicast, "multicast"),
        (ip.is_private, "private"),
        (ip.is_reserved or not ip.is_global, "reserved, not public"),
    )
    for hit, reason in checks:
        if hit:
            return reason
    return None


async def system_resolver(host: str) -> list[str]:
    """The addresses the system resolver gives for `host` (getaddrinfo, TCP)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]
