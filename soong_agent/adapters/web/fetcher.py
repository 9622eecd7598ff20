"""`HttpxWebFetcher`: one GET under the network allow-list (SBX-2), redirects checked hop by hop.

Every hop (the first request and each redirect) goes through the same gate:

1. the scheme is http or https;
2. the host name is in ``allowed_hosts`` (``host`` or ``host:port``) or matches an
   ``allowed_domains`` entry: ``example.com`` admits ``example.com`` and every subdomain
   (``api.example.com``), ``*.example.com`` admits the subdomains only, never ``example.com``
   itself (``.example.com`` is read as ``example.com``). This is the one domain syntax of
   ``domain:`` permission rules too (`DomainPattern`); names are compared in their IDNA
   (punycode) form, case-insensitively, without a trailing dot. An IP address matches an
   ``allowed_domains`` entry only when it is that exact address;
3. the name is resolved and every address must be public; loopback, private, link-local
   (cloud metadata), unspecified, multicast and other non-global addresses are refused unless
   the host itself or that exact address is listed in ``allowed_hosts`` (steps 2 and 3 are
   `allowlist.NetworkAllowList`, which the commands' filtering proxy uses too);
4. the request goes to an address checked in step 3 (the URL carries the IP, the ``Host``
   header and the TLS SNI / certificate check carry the name), so a second DNS answer cannot
   swap in another address between the check and the connection.

The body is streamed and cut at ``max_bytes`` (after decompression, which is itself bounded),
then reduced to text: an HTML page to Markdown of its main content (`markdown.py`, imported on
the first HTML page; plain text when that fails), text and JSON as they are, anything else to a
one-line note. That reduction runs in a worker thread, after the network timeout.

The gate and the pinned-address transport are here; the host lists and address checks in
`hosts`, the bounded body reading in `body`, the text reduction in `page_text` (its functions
imported from here too): one security boundary, in one package to review.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Literal

import httpx

from soong_agent.adapters.web.allowlist import NetworkAllowList, Resolver
from soong_agent.adapters.web.body import Body, read_body
from soong_agent.adapters.web.hosts import (
    IPAddress,
    ascii_host,
    ip_or_none,
    non_public_reason,
    system_resolver,
)
from soong_agent.adapters.web.page_text import html_page_text, html_to_text, one_line, page_text
from soong_agent.ports.errors import PermissionDenied, ToolInputError
from soong_agent.ports.web import FetchResult

NetworkPolicy = Literal["allowlist", "deny"]

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
DEFAULT_PORTS = {"http": 80, "https": 443}
USER_AGENT = "soong-agent-web-fetch/1"
ACCEPT = "text/html,application/xhtml+xml,text/*;q=0.9,application/json;q=0.9,*/*;q=0.5"
_log = logging.getLogger(__name__)


# --- the fetcher ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Target:
    url: httpx.URL  # fragment removed
    scheme: str
    host: str  # as compared: punycode, lower-case, no trailing dot
    port: int  # effective port


@dataclass(slots=True)
class _Progress:
    host: str


@dataclass(frozen=True, slots=True)
class _Fetched:
    final_url: str
    status: int
    content_type: str
    body: Body


def _default_client() -> httpx.AsyncClient:
    # A fresh client per fetch, no keep-alive: a connection opened for one (host, SNI) is never
    # reused for another host that happens to share the address.
    return httpx.AsyncClient(
        trust_env=False,
        follow_redirects=False,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


class HttpxWebFetcher:
    """A `WebFetcher` over httpx that reaches only allowed hosts (SBX-2).

    Give either `client` (used as is, never closed here; it must have ``trust_env=False``) or
    `client_factory` (called once per fetch; the client is closed afterwards). With neither, each
    fetch uses a fresh client with ``trust_env=False`` and no keep-alive.
    """

    def __init__(
        self,
        *,
        allowed_hosts: Sequence[str],
        allowed_domains: Sequence[str],
        policy: NetworkPolicy,
        client: httpx.AsyncClient | None = None,
        client_factory: Callable[[], httpx.AsyncClient] | None = None,
        resolver: Resolver | None = None,
        max_redirects: int = 5,
    ) -> None:
        if client is not None and client_factory is not None:
            raise ValueError("give client or client_factory, not both")
        if client is not None and client.trust_env:
            raise ValueError("the web fetch client must be created with trust_env=False")
        if max_redirects < 0:
            raise ValueError("max_redirects must be 0 or more")
        self._allow = NetworkAllowList(
            allowed_hosts=allowed_hosts, allowed_domains=allowed_domains, resolver=resolver
        )
        self._policy: NetworkPolicy = policy
        self._client = client
        self._client_factory = client_factory or _default_client
        self._max_redirects = max_redirects

    async def fetch(self, url: str, *, max_bytes: int, timeout_s: float) -> FetchResult:
        """GET `url` (following checked redirects) and return its text, cut at `max_bytes`."""
        if self._policy == "deny":
            raise PermissionDenied(
                f"web access is switched off (permissions.network_policy = 'deny'); {url} "
                "was not fetched"
            )
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        target = self._target(url)
        progress = _Progress(target.host)
        try:
            async with asyncio.timeout(timeout_s):
                fetched = await self._fetch(url, target, progress, max_bytes, timeout_s)
        except (TimeoutError, httpx.TimeoutException):
            raise ToolInputError(
                f"fetching from {progress.host} timed out after {timeout_s:g} s"
            ) from None
        except (httpx.HTTPError, httpx.StreamError, httpx.InvalidURL, OSError) as exc:
            raise ToolInputError(
                f"fetching from {progress.host} failed: "
                + f"{type(exc).__name__}: {one_line(str(exc))}"
            ) from None
        # Outside the network timeout and off the event loop: a large page takes seconds to
        # turn into Markdown.
        text = await asyncio.to_thread(
            page_text,
            fetched.body.data,
            fetched.content_type,
            complete=not fetched.body.truncated,
            encoding_note=fetched.body.unsupported,
            base_url=fetched.final_url,
        )
        return FetchResult(
            url=url,
            final_url=fetched.final_url,
            status=fetched.status,
            content_type=fetched.content_type,
            text=text,
            truncated=fetched.body.truncated,
        )

    # --- one request after another ---------------------------------------------------------

    async def _fetch(
        self,
        url: str,
        target: _Target,
        progress: _Progress,
        max_bytes: int,
        timeout_s: float,
    ) -> _Fetched:
        async with AsyncExitStack() as stack:
            client = self._client
            if client is None:
                client = self._client_factory()
                stack.push_async_callback(client.aclose)
                if client.trust_env:
                    raise ValueError("the web fetch client must be created with trust_env=False")
            for hop in range(self._max_redirects + 1):
                progress.host = target.host
                addresses = await self._checked_addresses(target)
                response = await self._send(client, target, addresses, timeout_s)
                try:
                    location = response.headers.get("location")
                    if response.status_code in REDIRECT_STATUSES and location:
                        if hop == self._max_redirects:
                            raise ToolInputError(
                                f"{url} redirects more than {self._max_redirects} times "
                                f"(the last hop, {target.url}, points to {location})"
                            )
                        target = self._target(
                            str(target.url.join(location.strip())), came_from=target.url
                        )
                        continue
                    body = await read_body(response, max_bytes, target.host)
                finally:
                    await response.aclose()
                return _Fetched(
                    final_url=str(target.url),
                    status=response.status_code,
                    content_type=response.headers.get("content-type", "").strip(),
                    body=body,
                )
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _target(self, url: str, *, came_from: httpx.URL | None = None) -> _Target:
        where = f" (redirect from {came_from})" if came_from is not None else ""
        try:
            parsed = httpx.URL(url.strip())
        except httpx.InvalidURL as exc:
            raise ToolInputError(f"{url!r} is not a valid URL{where}: {exc}") from None
        scheme = parsed.scheme.lower()
        if scheme not in DEFAULT_PORTS:
            raise ToolInputError(f"only http and https URLs can be fetched, not {url!r}{where}")
        if not parsed.raw_host:
            raise ToolInputError(f"{url!r} has no host{where}")
        if parsed.userinfo:
            raise ToolInputError(f"URLs with a user name or password are not fetched{where}")
        try:
            host = ascii_host(parsed.raw_host.decode("ascii"))
        except (ValueError, UnicodeDecodeError, httpx.InvalidURL):
            raise ToolInputError(f"{url!r} has an unusable host{where}") from None
        return _Target(
            url=parsed.copy_with(fragment=None),
            scheme=scheme,
            host=host,
            port=parsed.port or DEFAULT_PORTS[scheme],
        )

    # --- the gate ---------------------------------------------------------------------------

    async def _checked_addresses(self, target: _Target) -> list[IPAddress]:
        """The addresses `target` may be reached at, or PermissionDenied naming the host."""
        return await self._allow.addresses(target.host, target.port, where=f" (URL {target.url})")

    # --- sending to a checked address -----------------------------------------------------

    async def _send(
        self,
        client: httpx.AsyncClient,
        target: _Target,
        addresses: list[IPAddress],
        timeout_s: float,
    ) -> httpx.Response:
        failure: httpx.ConnectError | None = None
        for ip in addresses:
            request = _pinned_request(target, ip, timeout_s)
            try:
                return await client.send(request, stream=True, follow_redirects=False)
            except httpx.ConnectError as exc:  # try the next checked address
                failure = exc
        assert failure is not None
        raise failure


def _pinned_request(target: _Target, ip: IPAddress, timeout_s: float) -> httpx.Request:
    """A GET sent to `ip` that still names the host (Host header, TLS SNI and certificate)."""
    netloc = target.url.netloc.decode("ascii")
    extensions: dict[str, object] = {"timeout": httpx.Timeout(timeout_s).as_dict()}
    if target.scheme == "https" and ip_or_none(target.host) is None:
        extensions["sni_hostname"] = target.url.raw_host.decode("ascii")
    return httpx.Request(
        "GET",
        target.url.copy_with(host=str(ip)),
        headers={
            "Host": netloc,
            "User-Agent": USER_AGENT,
            "Accept": ACCEPT,
            "Accept-Encoding": "gzip, deflate",
            "Connection": "close",
        },
        extensions=extensions,
    )


__all__ = [
    "HttpxWebFetcher",
    "IPAddress",
    "html_page_text",
    "html_to_text",
    "non_public_reason",
    "page_text",
    "system_resolver",
]
