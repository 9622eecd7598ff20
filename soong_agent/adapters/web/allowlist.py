"""The network allow-list (SBX-2, SBX-4): whether a host and port may be reached, and at which
checked addresses. One gate for `web_fetch` (`HttpxWebFetcher`) and the commands' filtering
proxy (`adapters.netproxy`), so both read ``tools.network`` the same way.

1. the host name is in ``allowed_hosts`` (``host`` or ``host:port``) or matches an
   ``allowed_domains`` entry (`DomainPattern`: ``example.com`` and its subdomains,
   ``*.example.com`` the subdomains only); an IP address matches an ``allowed_domains``
   entry only when it is that exact address;
2. the name is resolved (on the host) and every address must be public; loopback, private,
   link-local (cloud metadata), unspecified, multicast and other non-global addresses are
   refused unless the host itself or that exact address is listed in ``allowed_hosts``.

The caller connects to the addresses handed back, never resolves the name again, so a second
DNS answer cannot swap in another address between the check and the connection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from soong_agent.adapters.web.hosts import (
    IPAddress,
    domain_entry,
    host_entry,
    ip_or_none,
    non_public_reason,
    system_resolver,
)
from soong_agent.adapters.web.page_text import one_line
from soong_agent.ports.errors import PermissionDenied, ToolInputError

Resolver = Callable[[str], Awaitable[list[str]]]


class NetworkAllowList:
    """``tools.network.allowed_hosts`` / ``allowed_domains``, parsed once (a malformed entry is
    a ConfigError naming it). Host names given to it are already in their compared form
    (`hosts.ascii_host`)."""

    def __init__(
        self,
        *,
        allowed_hosts: Sequence[str],
        allowed_domains: Sequence[str],
        resolver: Resolver | None = None,
    ) -> None:
        self._hosts = tuple(host_entry(e) for e in allowed_hosts if e.strip())
        self._domains = tuple(domain_entry(e) for e in allowed_domains if e.strip())
        self._resolve: Resolver = resolver or system_resolver

    @property
    def empty(self) -> bool:
        """True when nothing is allowed."""
        return not self._hosts and not self._domains

    def listed(self, host: str, port: int) -> bool:
        """Whether `host` (a name or an address) is literally in ``allowed_hosts`` for `port`."""
        return any(e.host == host and e.port in (None, port) for e in self._hosts)

    def name_allowed(self, host: str, port: int) -> bool:
        """Whether `host:port` is admitted by name, before any address is looked at."""
        if self.listed(host, port):
            return True
        if ip_or_none(host) is not None:
            return any(d.domain == host and not d.subdomains_only for d in self._domains)
        return any(d.matches(host) for d in self._domains)

    async def addresses(self, host: str, port: int, *, where: str = "") -> list[IPAddress]:
        """The addresses `host:port` may be reached at.

        Raises PermissionDenied naming the host (and `where`, e.g. the URL) when the name is
        not allowed or an address it resolves to is not public and not listed, and
        ToolInputError when the name does not resolve.
        """
        shown = f"{host}:{port}"
        if not self.name_allowed(host, port):
            raise PermissionDenied(
                f"network access to {shown} is not allowed: the host is not in "
                f"tools.network.allowed_hosts and not under tools.network.allowed_domains{where}"
            )
        literal = ip_or_none(host)
        found = [literal] if literal is not None else await self._lookup(host)
        host_listed = self.listed(host, port)
        for ip in found:
            reason = non_public_reason(ip)
            if reason is None or self.listed(str(ip), port):
                continue
            # a listed name may lead to a private or loopback address (a company registry),
            # never to a link-local one (the cloud metadata service): that takes its address
            if host_listed and reason != "link-local":
                continue
            raise PermissionDenied(
                f"network access to {shown} is not allowed: it resolves to {ip}, a {reason} "
                f"address; list {_to_list(host, ip, reason)} in tools.network.allowed_hosts "
                "to reach it"
            )
        return found

    async def _lookup(self, host: str) -> list[IPAddress]:
        try:
            found = await self._resolve(host)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ToolInputError(f"cannot resolve {host}: {one_line(reason)}") from None
        addresses: list[IPAddress] = []
        for text in found:
            ip = ip_or_none(text.split("%", 1)[0])
            if ip is None:
                raise ToolInputError(f"cannot resolve {host}: the resolver gave {text!r}")
            if ip not in addresses:
                addresses.append(ip)
        if not addresses:
            raise ToolInputError(f"cannot resolve {host}: no addresses")
        return addresses


def _to_list(host: str, ip: IPAddress, reason: str) -> str:
    """What an allow-list entry must name to reach `ip` through `host`."""
    if reason == "link-local":
        return repr(str(ip))
    return f"{host!r} (or {str(ip)!r})"
