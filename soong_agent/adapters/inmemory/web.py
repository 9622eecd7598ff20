"""A web fetcher that serves scripted pages under the same network policy as the real one.

It keeps the rules of `HttpxWebFetcher` (the shared contract suite runs on both):

- policy ``"deny"`` refuses every URL with `PermissionDenied`;
- only http and https URLs without user name or password are fetched, else `ToolInputError`;
- every hop, redirects included, must be to a host in `allowed_hosts` (``host`` or
  ``host:port``) or at or below an `allowed_domains` entry, else `PermissionDenied` naming
  ``host:port``; an IP literal that is not public (loopback, private …) must itself be listed,
  and so must a name `resolve` maps to such an address (names it does not map count as public);
- more than `max_redirects` redirects, a URL of a host that serves nothing, or a page slower
  than `timeout_s` raise `ToolInputError` naming the host;
- the body is cut at `max_bytes` (``truncated``), HTML reduced to its text, other text decoded,
  anything else replaced by a one-line note.

A URL of a host that has scripted pages but not this one answers 404. `requests` records the
URLs actually requested, hop by hop.
"""

from __future__ import annotations

import asyncio
import codecs
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Literal
from urllib.parse import urljoin, urlsplit, urlunsplit

from soong_agent.ports.errors import ConfigError, PermissionDenied, ToolInputError
from soong_agent.ports.web import FetchResult

_PORTS = {"http": 80, "https": 443}
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_TEXT_TYPES = frozenset({"application/json", "application/xml", "application/javascript"})


@dataclass(frozen=True, slots=True)
class ScriptedPage:
    """One response: status, content type, body; `location` makes it a redirect."""

    body: bytes | str = b""
    content_type: str = "text/plain; charset=utf-8"
    status: int = 200
    location: str | None = None
    delay_s: float = 0.0

    @classmethod
    def html(cls, html: str, *, status: int = 200) -> ScriptedPage:
        """An HTML page."""
        return cls(html, "text/html; charset=utf-8", status)

    @classmethod
    def redirect(cls, location: str, *, status: int = 302) -> ScriptedPage:
        """A redirect to `location` (absolute or relative to the page)."""
        return cls(b"", "", status, location)


@dataclass(frozen=True, slots=True)
class _Target:
    url: str  # without fragment
    scheme: str
    host: str
    port: int


class ScriptedWebFetcher:
    """A `WebFetcher` over `pages` (by URL, fragment-less); see the module docstring."""

    def __init__(
        self,
        pages: Mapping[str, ScriptedPage | str] | None = None,
        *,
        allowed_hosts: Sequence[str] = (),
        allowed_domains: Sequence[str] = (),
        policy: Literal["allowlist", "deny"] = "allowlist",
        resolve: Mapping[str, Sequence[str]] | None = None,
        max_redirects: int = 5,
    ) -> None:
        if max_redirects < 0:
            raise ValueError("max_redirects must be 0 or more")
        self.pages: dict[str, ScriptedPage] = {}
        for url, page in (pages or {}).items():
            self.add(url, page)
        self._hosts = tuple(_host_entry(e) for e in allowed_hosts if e.strip())
        self._domains = tuple(
            e.strip().lower().removeprefix("*.").removeprefix(".").rstrip(".")
            for e in allowed_domains
            if e.strip()
        )
        self._policy = policy
        self._resolve = {k.lower(): tuple(v) for k, v in (resolve or {}).items()}
        self._max_redirects = max_redirects
        self.requests: list[str] = []

    def add(self, url: str, page: ScriptedPage | str) -> None:
        """Serve `page` (a ScriptedPage, or text served as text/plain) at `url`."""
        self.pages[_target(url).url] = ScriptedPage(page) if isinstance(page, str) else page

    async def fetch(self, url: str, *, max_bytes: int, timeout_s: float) -> FetchResult:
        """GET `url` from the scripted pages, under the policy."""
        if self._policy == "deny":
            raise PermissionDenied(
                f"web access is switched off (permissions.network_policy = 'deny'); {url} "
                "was not fetched"
            )
        if max_bytes <= 0:
            raise ValueError("max_bytes must be positive")
        target = _target(url)
        for hop in range(self._max_redirects + 1):
            self._check(target)
            page = await self._serve(target, timeout_s)
            if page.status in _REDIRECTS and page.location:
                if hop == self._max_redirects:
                    raise ToolInputError(
                        f"{url} redirects more than {self._max_redirects} times "
                        f"(the last hop, {target.url}, points to {page.location})"
                    )
                target = _target(urljoin(target.url, page.location.strip()), came_from=target)
                continue
            data = page.body.encode("utf-8") if isinstance(page.body, str) else page.body
            truncated = len(data) > max_bytes
            return FetchResult(
                url=url,
                final_url=target.url,
                status=page.status,
                content_type=page.content_type,
                text=_text(data[:max_bytes], page.content_type, complete=not truncated),
                truncated=truncated,
            )
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    async def _serve(self, target: _Target, timeout_s: float) -> ScriptedPage:
        origin = f"{target.scheme}://{target.host}:{target.port}"
        if not any(_origin(known) == origin for known in self.pages):
            raise ToolInputError(
                f"fetching from {target.host} failed: ConnectError: nothing serves {origin}"
            )
        self.requests.append(target.url)
        page = self.pages.get(target.url) or ScriptedPage(b"not found", status=404)
        if page.delay_s > timeout_s:
            await asyncio.sleep(max(0.0, timeout_s))
            raise ToolInputError(f"fetching from {target.host} timed out after {timeout_s:g} s")
        await asyncio.sleep(page.delay_s)
        return page

    def _listed(self, host: str, port: int) -> bool:
        return any(h == host and p in (None, port) for h, p in self._hosts)

    def _check(self, target: _Target) -> None:
        shown = f"{target.host}:{target.port}"
        listed = self._listed(target.host, target.port)
        ip = _ip(target.host)
        under_domain = ip is None and any(
            target.host == d or target.host.endswith("." + d) for d in self._domains
        )
        if not (listed or under_domain):
            raise PermissionDenied(
                f"network access to {shown} is not allowed: the host is not in "
                "tools.network.allowed_hosts and not under tools.network.allowed_domains "
                f"(URL {target.url})"
            )
        addresses = [target.host] if ip is not None else self._resolve.get(target.host, ())
        for address in addresses:
            parsed = _ip(address)
            if parsed is None:
                raise ToolInputError(f"cannot resolve {target.host}: the resolver gave {address!r}")
            if parsed.is_global or listed or self._listed(str(parsed), target.port):
                continue
            raise PermissionDenied(
                f"network access to {shown} is not allowed: it resolves to {parsed}, a "
                f"non-public address; list {target.host!r} (or {str(parsed)!r}) in "
                "tools.network.allowed_hosts to reach it"
            )


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def _host_entry(entry: str) -> tuple[str, int | None]:
    text = entry.strip().lower()
    problem = f"tools.network.allowed_hosts: {entry!r} is not a host or host:port"
    if "://" in text:
        raise ConfigError(f"{problem} (give the host without a scheme)")
    parts = urlsplit(f"//{text}")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(problem) from None
    if not parts.hostname:
        raise ConfigError(problem)
    host = parts.hostname.rstrip(".")
    ip = _ip(host)
    return (str(ip) if ip is not None else host), port


def _origin(url: str) -> str:
    target = _target(url)
    return f"{target.scheme}://{target.host}:{target.port}"


def _target(url: str, *, came_from: _Target | None = None) -> _Target:
    where = f" (redirect from {came_from.url})" if came_from is not None else ""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ToolInputError(f"{url!r} is not a valid URL{where}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _PORTS:
        raise ToolInputError(f"only http and https URLs can be fetched, not {url!r}{where}")
    if not parts.hostname:
        raise ToolInputError(f"{url!r} has no host{where}")
    if parts.username is not None or parts.password is not None:
        raise ToolInputError(f"URLs with a user name or password are not fetched{where}")
    host = parts.hostname.rstrip(".")
    ip = _ip(host)
    host = str(ip) if ip is not None else host
    whole = urlunsplit((scheme, parts.netloc.lower(), parts.path or "/", parts.query, ""))
    return _Target(whole, scheme, host, port or _PORTS[scheme])


def _text(data: bytes, content_type: str, *, complete: bool) -> str:
    media, _, params = content_type.partition(";")
    media = media.strip().lower()
    found = re.search(r"charset\s*=\s*\"?([A-Za-z0-9._:-]+)", params)
    try:
        decoder = codecs.getincrementaldecoder(found.group(1) if found else "utf-8")("replace")
    except LookupError:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
    if media in ("text/html", "application/xhtml+xml"):
        return _html_text(decoder.decode(data, final=complete))
    if media.startswith("text/") or media in _TEXT_TYPES or media.endswith("+json"):
        return str(decoder.decode(data, final=complete))
    return f"binary content ({media or 'unknown type'}, {len(data)} bytes) not shown"


_HIDDEN = frozenset({"script", "style", "noscript", "svg", "template", "iframe", "object"})
_BLOCKS = frozenset(
    {
        *("address", "article", "aside", "blockquote", "body", "br", "dd", "div", "dl", "dt"),
        *("footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "head", "header", "hr", "html"),
        *("li", "main", "nav", "ol", "p", "pre", "section", "table", "title", "tr", "ul"),
    }
)


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.hidden: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN:
            self.hidden.append(tag)
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.hidden:
            while self.hidden.pop() != tag:
                pass
        elif tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.parts.append(data)


def _html_text(html: str) -> str:
    """The text of an HTML page, one line per element run (simpler than the real extractor)."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).split("\n"))
    return "\n".join(line for line in lines if line)
