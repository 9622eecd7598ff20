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
   the host itself or that exact address is listed in ``allowed_hosts``;
4. the request goes to an address checked in step 3 (the URL carries the IP, the ``Host``
   header and the TLS SNI / certificate check carry the name), so a second DNS answer cannot
   swap in another address between the check and the connection.

The body is streamed and cut at ``max_bytes`` (after decompression, which is itself bounded),
then reduced to text: an HTML page to Markdown of its main content (`markdown.py`, imported on
the first HTML page; plain text when that fails), text and JSON as they are, anything else to a
one-line note. That reduction runs in a worker thread, after the network timeout.

Longer than our ~400-line habit on purpose: the gate, the pinned-address transport and the
bounded body reading are one security boundary, kept in one place to review.
"""

from __future__ import annotations

import asyncio
import codecs
import html as html_lib
import ipaddress
import logging
import re
import socket
import zlib
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Literal

import httpx

from soong_agent.domain.permissions.targets import DomainPattern
from soong_agent.ports.errors import ConfigError, PermissionDenied, ToolInputError
from soong_agent.ports.web import FetchResult

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str], Awaitable[list[str]]]
NetworkPolicy = Literal["allowlist", "deny"]

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
DEFAULT_PORTS = {"http": 80, "https": 443}
USER_AGENT = "soong-agent-web-fetch/1"
ACCEPT = "text/html,application/xhtml+xml,text/*;q=0.9,application/json;q=0.9,*/*;q=0.5"
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_log = logging.getLogger(__name__)


# --- host lists ------------------------------------------------------------------------------


def _ascii_host(host: str) -> str:
    """A host name as compared: IDNA (punycode), lower-case, no trailing dot; IPs normalised."""
    bare = host.strip().strip("[]").rstrip(".").lower()
    if not bare:
        raise ValueError("empty host")
    ip = _ip_or_none(bare)
    if ip is not None:
        return str(ip)
    return httpx.URL(scheme="http", host=bare).raw_host.decode("ascii").lower()


def _ip_or_none(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class _HostEntry:
    host: str
    port: int | None


def _host_entry(entry: str) -> _HostEntry:
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
        return _HostEntry(_ascii_host(host), port)
    except (ValueError, httpx.InvalidURL):
        raise ConfigError(problem) from None


def _domain_entry(entry: str) -> DomainPattern:
    """Parse an ``allowed_domains`` entry (see the module docstring) into IDNA form."""
    try:
        pattern = DomainPattern.parse(entry)
        ascii_domain = _ascii_host(pattern.domain)
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
    body: _Body


def _default_client() -> httpx.AsyncClient:
    # A fresh client per fetch, no keep-alive: a connection opened for one (host, SNI) is never
    # reused for another host that happens to share the address.
    return httpx.AsyncClient(
        trust_env=False,
        follow_redirects=False,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "no detail"


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
        self._hosts = tuple(_host_entry(e) for e in allowed_hosts if e.strip())
        self._domains = tuple(_domain_entry(e) for e in allowed_domains if e.strip())
        self._policy: NetworkPolicy = policy
        self._client = client
        self._client_factory = client_factory or _default_client
        self._resolve: Resolver = resolver or system_resolver
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
                + f"{type(exc).__name__}: {_one_line(str(exc))}"
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
                    body = await _read_body(response, max_bytes, target.host)
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
            host = _ascii_host(parsed.raw_host.decode("ascii"))
        except (ValueError, UnicodeDecodeError, httpx.InvalidURL):
            raise ToolInputError(f"{url!r} has an unusable host{where}") from None
        return _Target(
            url=parsed.copy_with(fragment=None),
            scheme=scheme,
            host=host,
            port=parsed.port or DEFAULT_PORTS[scheme],
        )

    # --- the gate ---------------------------------------------------------------------------

    def _listed(self, host: str, port: int) -> bool:
        return any(e.host == host and e.port in (None, port) for e in self._hosts)

    def _name_allowed(self, target: _Target) -> bool:
        if self._listed(target.host, target.port):
            return True
        if _ip_or_none(target.host) is not None:
            return any(d.domain == target.host and not d.subdomains_only for d in self._domains)
        return any(d.matches(target.host) for d in self._domains)

    async def _checked_addresses(self, target: _Target) -> list[IPAddress]:
        """The addresses `target` may be reached at, or PermissionDenied naming the host."""
        shown = f"{target.host}:{target.port}"
        if not self._name_allowed(target):
            raise PermissionDenied(
                f"network access to {shown} is not allowed: the host is not in "
                "tools.network.allowed_hosts and not under tools.network.allowed_domains "
                f"(URL {target.url})"
            )
        literal = _ip_or_none(target.host)
        addresses = [literal] if literal is not None else await self._lookup(target.host)
        host_listed = self._listed(target.host, target.port)
        for ip in addresses:
            reason = non_public_reason(ip)
            if reason is None or host_listed or self._listed(str(ip), target.port):
                continue
            raise PermissionDenied(
                f"network access to {shown} is not allowed: it resolves to {ip}, a {reason} "
                f"address; list {target.host!r} (or {str(ip)!r}) in tools.network.allowed_hosts "
                "to reach it"
            )
        return addresses

    async def _lookup(self, host: str) -> list[IPAddress]:
        try:
            found = await self._resolve(host)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            raise ToolInputError(f"cannot resolve {host}: {_one_line(reason)}") from None
        addresses: list[IPAddress] = []
        for text in found:
            ip = _ip_or_none(text.split("%", 1)[0])
            if ip is None:
                raise ToolInputError(f"cannot resolve {host}: the resolver gave {text!r}")
            if ip not in addresses:
                addresses.append(ip)
        if not addresses:
            raise ToolInputError(f"cannot resolve {host}: no addresses")
        return addresses

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
    if target.scheme == "https" and _ip_or_none(target.host) is None:
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


# --- the body --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Body:
    data: bytes
    truncated: bool
    unsupported: str | None = None  # a content-encoding that was not decoded


class _Inflater:
    """Bounded gzip/deflate decoding: never produces more than asked for per call."""

    def __init__(self, encoding: str) -> None:
        self._encoding = encoding
        self._raw_deflate_tried = False
        wbits = zlib.MAX_WBITS | 16 if encoding in ("gzip", "x-gzip") else zlib.MAX_WBITS
        self._z = zlib.decompressobj(wbits)
        self._started = False

    def feed(self, chunk: bytes, limit: int) -> bytes:
        try:
            out = self._z.decompress(chunk, limit)
        except zlib.error:
            if self._encoding != "deflate" or self._started or self._raw_deflate_tried:
                raise
            self._raw_deflate_tried = True  # "deflate" without the zlib wrapper
            self._z = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self._z.decompress(chunk, limit)
        self._started = True
        return out

    def rest(self, limit: int) -> bytes:
        return self._z.decompress(self._z.unconsumed_tail, limit) + self._z.flush()


async def _read_body(response: httpx.Response, max_bytes: int, host: str) -> _Body:
    encoding = response.headers.get("content-encoding", "").strip().lower()
    inflater: _Inflater | None = None
    unsupported: str | None = None
    if encoding in ("gzip", "x-gzip", "deflate"):
        inflater = _Inflater(encoding)
    elif encoding not in ("", "identity"):
        unsupported = encoding
    parts: list[bytes] = []
    size = 0
    truncated = False
    try:
        async for raw in response.aiter_raw():
            room = max_bytes - size
            data = raw if inflater is None else inflater.feed(raw, room + 1)
            if len(data) > room:
                parts.append(data[:room])
                size = max_bytes
                truncated = True
                break
            parts.append(data)
            size += len(data)
        if inflater is not None and not truncated:
            tail = inflater.rest(max_bytes - size + 1)
            truncated = len(tail) > max_bytes - size
            parts.append(tail[: max_bytes - size])
    except zlib.error as exc:
        raise ToolInputError(
            f"the {encoding} body from {host} could not be decoded: {exc}"
        ) from None
    return _Body(b"".join(parts), truncated, unsupported)


# --- text ------------------------------------------------------------------------------------

_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/javascript",
        "application/x-javascript",
        "application/ecmascript",
        "application/x-ndjson",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
    }
)
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)


def _media_type(content_type: str) -> tuple[str, str | None]:
    """(``type/subtype`` lower-case, charset or None) from a Content-Type value."""
    essence, _, params = content_type.partition(";")
    charset = None
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    return essence.strip().lower(), charset


def _decode(data: bytes, charset: str | None, *, complete: bool) -> str:
    if charset is None and data.startswith(codecs.BOM_UTF8):
        charset = "utf-8-sig"
    try:
        decoder = codecs.getincrementaldecoder(charset or "utf-8")(errors="replace")
    except LookupError:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    # A cut body may end inside a character: leave that partial character out.
    return str(decoder.decode(data, final=complete))


def _looks_textual(data: bytes) -> bool:
    head = data[:4096]
    if b"\x00" in head:
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return True


def page_text(
    data: bytes,
    content_type: str,
    *,
    complete: bool = True,
    encoding_note: str | None = None,
    base_url: str | None = None,
) -> str:
    """The readable text of a response body of the given Content-Type.

    `complete` is False for a body cut at the size limit (a partial last character is dropped);
    `encoding_note` names a content-encoding that could not be decoded; `base_url` is the URL
    the body came from, against which an HTML page's relative links are resolved.
    """
    media, charset = _media_type(content_type)
    if encoding_note is not None:
        return (
            f"binary content ({media or 'unknown type'}, {len(data)} bytes, "
            f"content-encoding {encoding_note}) not shown"
        )
    if not media:
        if not _looks_textual(data):
            return f"binary content (unknown type, {len(data)} bytes) not shown"
        start = data[:512].lstrip().lower()
        media = "text/html" if start.startswith((b"<!doctype html", b"<html")) else "text/plain"
    if media in _HTML_TYPES:
        if charset is None:
            found = _META_CHARSET.search(data[:4096])
            charset = found.group(1).decode("ascii") if found else None
        return html_page_text(_decode(data, charset, complete=complete), base_url=base_url)
    is_text = (
        media.startswith("text/")
        or media in _TEXT_TYPES
        or media.endswith(("+json", "+xml", "+yaml"))
    )
    if is_text:
        return _decode(data, charset, complete=complete)
    return f"binary content ({media}, {len(data)} bytes) not shown"


def html_page_text(html: str, *, base_url: str | None) -> str:
    """An HTML page as Markdown (`html_to_markdown`), or as plain text when that fails.

    The Markdown is never longer than the HTML it comes from (a page of short relative links
    would otherwise grow by the length of its URL per link). The extractor is imported here, on
    the first HTML page, not at start-up.
    """
    try:
        from soong_agent.adapters.web.markdown import html_to_markdown

        markdown = html_to_markdown(html, base_url=base_url)
    except Exception as exc:  # any failure of the extractor on this page: plain text instead
        _log.warning(
            "web_fetch: the page from %s could not be turned into Markdown (%s: %s); "
            "giving it as plain text",
            base_url or "an unknown URL",
            type(exc).__name__,
            _one_line(str(exc))[:200],
        )
        return html_to_text(html)
    if not markdown:
        return html_to_text(html)
    if len(markdown) > len(html):  # absolute links can outgrow a page of many short ones
        note = f"\n[the Markdown was cut to the {len(html)} characters of the page's HTML]"
        markdown = markdown[: max(0, len(html) - len(note))] + note
    return markdown


_SKIPPED = frozenset({"script", "style", "noscript", "svg", "template", "iframe", "object"})
_PARAGRAPHS = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "table", "blockquote"})
# fmt: off
_BLOCKS = _PARAGRAPHS | frozenset({
    "address", "article", "aside", "body", "br", "caption", "dd", "details", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "html", "li", "main",
    "nav", "ol", "option", "section", "summary", "tbody", "tfoot", "thead", "title", "tr", "ul",
})
# fmt: on
_CELLS = frozenset({"td", "th"})
# Inside <pre>, newlines and spaces travel as these stand-ins so whitespace collapsing and line
# stripping leave them alone; html_to_text turns them back at the end.
_PRE_KEEP = str.maketrans({"\n": "\x00", " ": "\x01", "\t": "\x02"})
_PRE_RESTORE = str.maketrans({"\x00": "\n", "\x01": " ", "\x02": "\t"})
_STAND_INS = str.maketrans({"\x00": None, "\x01": None, "\x02": None})


class _TextExtractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping: list[str] = []
        self._pre = 0

    def _break(self, newlines: int) -> None:
        """A block boundary; adjacent boundaries merge into the larger one."""
        if self.parts and self.parts[-1].strip("\n") == "":
            if len(self.parts[-1]) < newlines:
                self.parts[-1] = "\n" * newlines
            return
        self.parts.append("\n" * newlines)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._skipping or tag in _SKIPPED:
            if tag in _SKIPPED:
                self._skipping.append(tag)
            return
        self._open(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if not self._skipping and tag not in _SKIPPED:
            self._open(tag)

    def _open(self, tag: str) -> None:
        if tag == "br":
            self.parts.append("\n")
        elif tag in _PARAGRAPHS:
            self._break(2)
        elif tag in _BLOCKS:
            self._break(1)
        elif tag in _CELLS:
            self.parts.append(" ")
        if tag == "li":
            self.parts.append("- ")
        elif tag == "pre":
            self._pre += 1

    def handle_endtag(self, tag: str) -> None:
        if self._skipping:
            if tag in self._skipping:
                while self._skipping.pop() != tag:
                    pass
            return
        if tag == "pre" and self._pre:
            self._pre -= 1
        if tag in _PARAGRAPHS:
            self._break(2)
        elif tag in _BLOCKS and tag != "br":
            self._break(1)

    def handle_data(self, data: str) -> None:
        if self._skipping:
            return
        data = data.translate(_STAND_INS)
        if self._pre:
            self.parts.append(data.replace("\r\n", "\n").translate(_PRE_KEEP))
            return
        data = re.sub(r"\s+", " ", data)
        if data == " " and self.parts and self.parts[-1].strip("\n") == "":
            return  # whitespace between blocks
        self.parts.append(data)


def html_to_text(html: str) -> str:
    """Readable text of an HTML document: no scripts or styles, blocks on their own lines."""
    parser = _TextExtractor()
    try:
        parser.feed(html)
        parser.close()
    except AssertionError as exc:  # html.parser gives up on some malformed markup (``<![x``)
        _log.warning("web_fetch: HTML the parser rejects (%s); tags stripped instead", exc)
        return _stripped_tags(html)
    lines = [line.strip(" \t\xa0") for line in "".join(parser.parts).split("\n")]
    text = "\n".join(lines).translate(_PRE_RESTORE)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


_INVISIBLE_START = re.compile(r"<(script|style|noscript|template)\b|<!--", re.I)
_TAG = re.compile(r"<[^<>]*>")  # no "<" inside: linear even on a page of unclosed "<"


def _stripped_tags(html: str) -> str:
    """The crudest readable text: invisible blocks and tags removed, entities decoded."""
    lower = html.lower()
    kept: list[str] = []
    at = 0
    while (start := _INVISIBLE_START.search(html, at)) is not None:
        kept.append(html[at : start.start()])
        name = start.group(1)
        close = "-->" if name is None else f"</{name.lower()}"
        end = lower.find(close, start.end())
        after = -1 if end == -1 else lower.find(">", end)
        if after == -1:
            at = len(html)
            break
        at = after + 1
        kept.append(" ")
    kept.append(html[at:])
    text = html_lib.unescape(_TAG.sub(" ", "".join(kept)))
    lines = (" ".join(line.split()) for line in text.splitlines())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")
