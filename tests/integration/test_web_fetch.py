"""web_fetch under the network allow-list (SBX-2), against loopback listeners only."""

from __future__ import annotations

import contextlib
import datetime
import gzip
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from soong_agent.adapters.inmemory.filesystem import InMemoryFileSystem
from soong_agent.adapters.web.fetcher import HttpxWebFetcher, html_to_text, non_public_reason
from soong_agent.application.tools.base import ToolContext
from soong_agent.application.tools.web import WebFetchArgs, web_fetch_tool
from soong_agent.ports.errors import ConfigError, PermissionDenied, ToolInputError
from soong_agent.ports.web import FetchResult, WebFetcher

Reply = tuple[int, dict[str, str], bytes]
Route = Callable[[str], Reply]

PAGE = b"""<!doctype html><html><head><title>Hello page</title>
<style>body { color: red }</style><script>var secret = "SCRIPT-BODY";</script></head>
<body><h1>Welcome</h1><p>First   paragraph with a <a href="/x">link text</a>.</p>
<noscript>NOSCRIPT-BODY</noscript><svg><text>SVG-BODY</text></svg>
<ul><li>one</li><li>two</li></ul><pre>  indented
    code</pre></body></html>"""


@dataclass
class Listener:
    """A loopback HTTP server that records every request it sees."""

    host: str
    port: int
    routes: dict[str, Reply | Route] = field(default_factory=dict)
    hits: list[tuple[str, str]] = field(default_factory=list)  # (path, Host header)

    @property
    def origin(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}"

    def url(self, path: str) -> str:
        return self.origin + path


def _serve(host: str) -> Generator[Listener, None, None]:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class Server(ThreadingHTTPServer):
        address_family = family
        daemon_threads = True

    listener = Listener(host, 0)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            listener.hits.append((self.path, self.headers.get("Host", "")))
            route = listener.routes.get(self.path.split("?")[0])
            if route is None:
                status, headers, body = 404, {"Content-Type": "text/plain"}, b"not found"
            elif callable(route):
                status, headers, body = route(self.path)
            else:
                status, headers, body = route
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):  # the client may stop reading at its size cap
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = Server((host, 0), Handler)
    listener.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def site() -> Iterator[Listener]:
    yield from _serve("127.0.0.1")


@pytest.fixture
def other() -> Iterator[Listener]:
    yield from _serve("127.0.0.1")


def html(body: bytes) -> Reply:
    return 200, {"Content-Type": "text/html; charset=utf-8"}, body


def redirect(location: str, status: int = 302) -> Reply:
    return status, {"Location": location}, b""


def fetcher(
    *,
    hosts: list[str] | None = None,
    domains: list[str] | None = None,
    policy: str = "allowlist",
    resolver: Callable[[str], Awaitable[list[str]]] | None = None,
    max_redirects: int = 5,
) -> HttpxWebFetcher:
    return HttpxWebFetcher(
        allowed_hosts=hosts or [],
        allowed_domains=domains or [],
        policy="deny" if policy == "deny" else "allowlist",
        resolver=resolver,
        max_redirects=max_redirects,
    )


def fake_dns(
    table: dict[str, list[str]], asked: list[str] | None = None
) -> Callable[[str], Awaitable[list[str]]]:
    async def resolve(host: str) -> list[str]:
        if asked is not None:
            asked.append(host)
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[host]

    return resolve


async def get(
    f: WebFetcher, url: str, *, max_bytes: int = 100_000, timeout_s: float = 5
) -> FetchResult:
    return await f.fetch(url, max_bytes=max_bytes, timeout_s=timeout_s)


# --- allowed hosts ---------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["127.0.0.1:{port}", "127.0.0.1"])
async def test_listed_loopback_host_gives_the_page_as_markdown(site: Listener, entry: str) -> None:
    site.routes["/page"] = html(PAGE)
    f = fetcher(hosts=[entry.format(port=site.port)])
    assert isinstance(f, WebFetcher)

    result = await get(f, site.url("/page"))

    assert result.status == 200
    assert result.final_url == site.url("/page")
    assert result.content_type.startswith("text/html")
    assert not result.truncated
    assert result.text == (
        "# Welcome\n\n"
        f"First paragraph with a [link text]({site.url('/x')}).\n\n"
        "- one\n- two\n\n"
        "```\n  indented\n    code\n```"
    )
    for hidden in ("SCRIPT-BODY", "color: red", "NOSCRIPT-BODY", "SVG-BODY"):
        assert hidden not in result.text
    assert site.hits == [("/page", f"127.0.0.1:{site.port}")]


async def test_unlisted_host_is_refused_before_any_request(site: Listener) -> None:
    site.routes["/"] = html(b"<p>hi</p>")
    f = fetcher(hosts=[f"127.0.0.1:{site.port + 1 if site.port < 65535 else 1}"])

    with pytest.raises(PermissionDenied, match=f"127.0.0.1:{site.port}"):
        await get(f, site.url("/"))
    with pytest.raises(PermissionDenied, match="localhost"):
        await get(f, f"http://localhost:{site.port}/")
    with pytest.raises(PermissionDenied):
        await get(fetcher(), site.url("/"))
    assert site.hits == []


async def test_redirect_to_an_unlisted_listener_is_refused(site: Listener, other: Listener) -> None:
    other.routes["/secret"] = html(b"<p>secret</p>")
    site.routes["/go"] = redirect(other.url("/secret"))
    site.routes["/go-by-name"] = redirect(f"http://localhost:{other.port}/secret", 307)
    f = fetcher(hosts=[f"127.0.0.1:{site.port}"])

    with pytest.raises(PermissionDenied, match=f"127.0.0.1:{other.port}"):
        await get(f, site.url("/go"))
    with pytest.raises(PermissionDenied, match="localhost"):
        await get(f, site.url("/go-by-name"))

    assert [path for path, _ in site.hits] == ["/go", "/go-by-name"]
    assert other.hits == []


async def test_redirect_to_another_scheme_is_refused(site: Listener) -> None:
    site.routes["/file"] = redirect("file:///etc/passwd")
    f = fetcher(hosts=["127.0.0.1"])

    with pytest.raises(ToolInputError, match="only http and https"):
        await get(f, site.url("/file"))


async def test_redirect_chain_within_allowed_hosts(site: Listener, other: Listener) -> None:
    site.routes["/start"] = redirect(other.url("/middle"), 301)
    other.routes["/middle"] = redirect(site.url("/almost"), 308)
    site.routes["/almost"] = redirect("end?x=1#frag", 303)  # relative
    site.routes["/end"] = (200, {"Content-Type": "text/plain"}, b"arrived")
    f = fetcher(hosts=[f"127.0.0.1:{site.port}", f"127.0.0.1:{other.port}"])

    result = await get(f, site.url("/start"))

    assert result.text == "arrived"
    assert result.url == site.url("/start")
    assert result.final_url == site.url("/end?x=1")
    assert [p for p, _ in site.hits] == ["/start", "/almost", "/end?x=1"]
    assert [p for p, _ in other.hits] == ["/middle"]


async def test_too_many_redirects(site: Listener) -> None:
    def loop(path: str) -> Reply:
        n = int(path.rsplit("/", 1)[1])
        return redirect(f"/loop/{n + 1}")

    for n in range(20):
        site.routes[f"/loop/{n}"] = loop
    f = fetcher(hosts=["127.0.0.1"], max_redirects=3)

    with pytest.raises(ToolInputError, match="more than 3 times"):
        await get(f, site.url("/loop/0"))
    assert len(site.hits) == 4

    site.routes["/hop"] = redirect("/loop/19")
    site.routes["/loop/19"] = (200, {"Content-Type": "text/plain"}, b"done")
    result = await get(fetcher(hosts=["127.0.0.1"], max_redirects=1), site.url("/hop"))
    assert result.text == "done"


# --- names, domains and DNS ------------------------------------------------------------------


async def test_domain_name_resolving_to_loopback_is_refused_unless_listed(site: Listener) -> None:
    site.routes["/"] = (200, {"Content-Type": "text/plain"}, b"internal")
    asked: list[str] = []
    dns = fake_dns({"api.example.test": ["127.0.0.1"]}, asked)
    url = f"http://api.example.test:{site.port}/"

    with pytest.raises(PermissionDenied, match="loopback") as denied:
        await get(fetcher(domains=["example.test"], resolver=dns), url)
    assert "api.example.test" in str(denied.value)
    assert asked == ["api.example.test"]
    assert site.hits == []

    # the host listed by name: reached, at the checked address, with the name in Host
    listed = fetcher(hosts=["API.Example.Test"], domains=["example.test"], resolver=dns)
    assert (await get(listed, url)).text == "internal"
    # that exact address listed
    by_ip = fetcher(hosts=["127.0.0.1"], domains=["example.test"], resolver=dns)
    assert (await get(by_ip, url)).text == "internal"
    assert site.hits == [("/", f"api.example.test:{site.port}")] * 2


async def test_any_non_public_address_refuses_the_host(site: Listener) -> None:
    dns = fake_dns(
        {
            "mixed.example.test": ["127.0.0.1", "10.1.2.3"],
            "metadata.example.test": ["169.254.169.254"],
            "mapped.example.test": ["::ffff:127.0.0.1"],
        }
    )
    f = fetcher(hosts=["127.0.0.1"], domains=["example.test"], resolver=dns)

    with pytest.raises(PermissionDenied, match=r"10\.1\.2\.3, a private"):
        await get(f, f"http://mixed.example.test:{site.port}/")
    with pytest.raises(PermissionDenied, match="link-local"):
        await get(f, "http://metadata.example.test/latest/meta-data/")
    with pytest.raises(PermissionDenied, match="loopback"):
        await get(f, f"http://mapped.example.test:{site.port}/")
    assert site.hits == []


async def test_a_listed_name_never_leads_to_the_metadata_service() -> None:
    """A name in allowed_hosts may resolve to a private address (a company registry), but a
    link-local one (169.254.169.254, the cloud metadata service) only when that address itself
    is listed: whoever controls the name's DNS does not get the metadata."""
    dns = fake_dns({"pkg.example.test": ["169.254.169.254"]})
    by_name = fetcher(hosts=["pkg.example.test"], resolver=dns)
    with pytest.raises(PermissionDenied, match=r"link-local address; list '169\.254\.169\.254'"):
        await get(by_name, "http://pkg.example.test/latest/meta-data/")


async def test_lookalike_domain_is_not_a_subdomain(site: Listener) -> None:
    asked: list[str] = []
    dns = fake_dns({"evilexample.test": ["127.0.0.1"], "example.test": ["127.0.0.1"]}, asked)
    f = fetcher(hosts=["127.0.0.1"], domains=["example.test"], resolver=dns)

    with pytest.raises(PermissionDenied, match=r"evilexample\.test"):
        await get(f, f"http://evilexample.test:{site.port}/")
    assert asked == []  # refused on the name, before any lookup
    site.routes["/"] = (200, {"Content-Type": "text/plain"}, b"ok")
    assert (await get(f, f"http://EXAMPLE.test.:{site.port}/")).text == "ok"
    assert len(site.hits) == 1


async def test_unresolvable_name_is_a_tool_input_error() -> None:
    f = fetcher(domains=["example.test"], resolver=fake_dns({}))
    with pytest.raises(ToolInputError, match=r"cannot resolve nowhere\.example\.test"):
        await get(f, "http://nowhere.example.test/")


def test_address_classes() -> None:
    import ipaddress

    def reason(text: str) -> str | None:
        return non_public_reason(ipaddress.ip_address(text))

    assert reason("127.0.0.1") == "loopback"
    assert reason("::1") == "loopback"
    assert reason("10.0.0.1") == reason("172.16.5.4") == reason("192.168.1.1") == "private"
    assert reason("fd00::1") == "private"
    assert reason("169.254.169.254") == reason("fe80::1") == "link-local"
    assert reason("0.0.0.0") == reason("::") == "unspecified"
    assert reason("224.0.0.1") == reason("ff02::1") == "multicast"
    assert reason("100.64.0.1") == "reserved, not public"
    assert reason("2002:7f00:1::") == "loopback"  # 6to4 around 127.0.0.1
    assert reason("8.8.8.8") is None
    assert reason("2606:4700::1111") is None


def test_bad_host_entries_are_config_errors() -> None:
    for entry in ["http://example.com", "example.com:http", "[::1", "host:0"]:
        with pytest.raises(ConfigError, match="allowed_hosts"):
            fetcher(hosts=[entry])


# --- policy, schemes, limits, errors ---------------------------------------------------------


async def test_policy_deny_refuses_everything(site: Listener) -> None:
    f = fetcher(hosts=["127.0.0.1"], policy="deny")
    with pytest.raises(PermissionDenied, match="network_policy"):
        await get(f, site.url("/"))
    assert site.hits == []


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://127.0.0.1/", "not a url"]
)
async def test_only_http_urls(url: str) -> None:
    with pytest.raises(ToolInputError):
        await get(fetcher(hosts=["127.0.0.1"]), url)


async def test_credentials_in_url_are_refused(site: Listener) -> None:
    with pytest.raises(ToolInputError, match="user name or password"):
        await get(fetcher(hosts=["127.0.0.1"]), f"http://me:pw@127.0.0.1:{site.port}/")
    assert site.hits == []


async def test_size_cap_truncates(site: Listener) -> None:
    site.routes["/big"] = (200, {"Content-Type": "text/plain"}, b"a" * 200_000)
    site.routes["/bomb"] = (
        200,
        {"Content-Type": "text/plain", "Content-Encoding": "gzip"},
        gzip.compress(b"b" * 5_000_000),
    )
    site.routes["/small-gz"] = (
        200,
        {"Content-Type": "application/json", "Content-Encoding": "gzip"},
        gzip.compress(b'{"ok": true}'),
    )
    f = fetcher(hosts=["127.0.0.1"])

    big = await get(f, site.url("/big"), max_bytes=1000)
    assert big.truncated and big.text == "a" * 1000
    bomb = await get(f, site.url("/bomb"), max_bytes=5000)
    assert bomb.truncated and bomb.text == "b" * 5000
    small = await get(f, site.url("/small-gz"), max_bytes=5000)
    assert not small.truncated and small.text == '{"ok": true}'
    exact = await get(f, site.url("/big"), max_bytes=200_000)
    assert not exact.truncated and len(exact.text) == 200_000


async def test_content_types(site: Listener) -> None:
    site.routes["/json"] = (200, {"Content-Type": "application/json"}, b'{"a": [1, 2]}')
    site.routes["/latin"] = (
        200,
        {"Content-Type": "text/plain; charset=iso-8859-1"},
        "café".encode("latin-1"),
    )
    site.routes["/png"] = (200, {"Content-Type": "image/png"}, b"\x89PNG\r\n\x1a\n" + b"\x00" * 50)
    site.routes["/bad-utf8"] = (200, {"Content-Type": "text/plain"}, b"ok \xff end")
    site.routes["/missing"] = (404, {"Content-Type": "text/html"}, b"<h1>Not here</h1>")
    f = fetcher(hosts=["127.0.0.1"])

    assert (await get(f, site.url("/json"))).text == '{"a": [1, 2]}'
    assert (await get(f, site.url("/latin"))).text == "café"
    png = await get(f, site.url("/png"))
    assert png.text == "binary content (image/png, 58 bytes) not shown"
    assert (await get(f, site.url("/bad-utf8"))).text == "ok \ufffd end"
    missing = await get(f, site.url("/missing"))
    assert missing.status == 404 and missing.text == "# Not here"


async def test_transport_failure_names_the_host() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ToolInputError, match=r"127\.0\.0\.1") as failed:
        await get(fetcher(hosts=["127.0.0.1"]), f"http://127.0.0.1:{port}/")
    assert "\n" not in str(failed.value)


async def test_timeout_names_the_host(site: Listener) -> None:
    def slow(path: str) -> Reply:
        time.sleep(1.5)
        return 200, {"Content-Type": "text/plain"}, b"late"

    site.routes["/slow"] = slow
    started = time.monotonic()
    with pytest.raises(ToolInputError, match=r"127\.0\.0\.1 timed out"):
        await get(fetcher(hosts=["127.0.0.1"]), site.url("/slow"), timeout_s=0.3)
    assert time.monotonic() - started < 1.2


async def test_ipv6_loopback_listener() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        gen = _serve("::1")
        listener = next(gen)
    except OSError:
        pytest.skip("no IPv6 loopback")
    try:
        listener.routes["/"] = (200, {"Content-Type": "text/plain"}, b"six")
        f = fetcher(hosts=[f"[::1]:{listener.port}"])
        assert (await get(f, listener.url("/"))).text == "six"
        with pytest.raises(PermissionDenied):
            await get(fetcher(hosts=["127.0.0.1"]), listener.url("/"))
        assert len(listener.hits) == 1
    finally:
        gen.close()


def _certificates(tmp: Path, name: str) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for `name` (files: ca, cert, key)."""
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    files = tmp / "ca.pem", tmp / "cert.pem", tmp / "key.pem"
    files[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


async def test_https_is_pinned_to_the_checked_address_and_verified_by_name(
    tmp_path: Path,
) -> None:
    ca, cert, key = _certificates(tmp_path, "secure.example.test")
    seen_sni: list[str | None] = []
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)

    def record_sni(sock: ssl.SSLObject, name: str | None, ctx: ssl.SSLContext) -> None:
        seen_sni.append(name)

    server_ctx.sni_callback = record_sni

    class TlsServer(ThreadingHTTPServer):
        daemon_threads = True

        def get_request(self) -> tuple[socket.socket, Any]:
            sock, addr = super().get_request()
            try:
                return server_ctx.wrap_socket(sock, server_side=True), addr
            except (ssl.SSLError, OSError):
                sock.close()
                raise

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = self.headers.get("Host", "").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = TlsServer(("127.0.0.1", 0), Handler)
    port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    client_ctx = ssl.create_default_context(cafile=str(ca))
    dns = fake_dns({"secure.example.test": ["127.0.0.1"], "other.example.test": ["127.0.0.1"]})
    try:
        f = HttpxWebFetcher(
            allowed_hosts=["secure.example.test", "other.example.test"],
            allowed_domains=[],
            policy="allowlist",
            resolver=dns,
            client_factory=lambda: httpx.AsyncClient(trust_env=False, verify=client_ctx),
        )
        result = await get(f, f"https://secure.example.test:{port}/")
        assert result.text == f"secure.example.test:{port}"
        assert seen_sni == ["secure.example.test"]

        # same address, a name the certificate does not cover: the TLS check fails
        with pytest.raises(ToolInputError, match=r"other\.example\.test") as mismatch:
            await get(f, f"https://other.example.test:{port}/")
        assert "CERTIFICATE_VERIFY_FAILED" in str(mismatch.value)
    finally:
        server.shutdown()
        server.server_close()


def test_html_to_text_details() -> None:
    """The plain-text rendering a page falls back to when it cannot be made Markdown."""
    text = html_to_text(
        "<div>a<br>b</div><table><tr><td>x</td><td>y</td></tr></table>"
        "<p>&amp; &lt;tag&gt; &nbsp;spaced</p><template>T</template><svg/>after"
    )
    assert text == "a\nb\n\nx y\n\n& <tag> spaced\n\nafter"


# --- the tool --------------------------------------------------------------------------------


def _ctx() -> ToolContext:
    return ToolContext(fs=InMemoryFileSystem(), session_id="s", run_id="r")


async def test_tool_result_text(site: Listener) -> None:
    site.routes["/start"] = redirect("/page")
    site.routes["/page"] = html(PAGE)
    tool = web_fetch_tool(fetcher=fetcher(hosts=["127.0.0.1"]), max_bytes=100_000, timeout_s=5)
    args = WebFetchArgs(url=site.url("/start"))

    assert tool.name == "web_fetch" and tool.permission_class == "network"
    assert tool.describe(args, _ctx()) == ("127.0.0.1", f"fetch {site.url('/start')}")
    assert tool.describe(WebFetchArgs(url="https://Docs.Example.COM/a"), _ctx())[0] == (
        "docs.example.com"
    )
    out = await tool.handler(args, _ctx())

    first, *rest = out.content.splitlines()
    assert first == f"URL: {site.url('/page')} (status 200, text/html; charset=utf-8)"
    assert rest[0] == f"[redirected from {site.url('/start')}]"
    assert "Welcome" in out.content and "SCRIPT-BODY" not in out.content
    assert not out.is_error

    assert f"[link text]({site.url('/x')})" in out.content

    cut = await tool.handler(WebFetchArgs(url=site.url("/page"), max_chars=12), _ctx())
    assert cut.content.splitlines()[-1].startswith("[text cut at 12 of ")
    assert "\n\n# Welcome\n\nF\n[text cut" in cut.content and "paragraph" not in cut.content


async def test_tool_marks_a_download_cut_and_lets_denials_through(site: Listener) -> None:
    class Stub:
        async def fetch(self, url: str, *, max_bytes: int, timeout_s: float) -> FetchResult:
            assert (max_bytes, timeout_s) == (10, 30)
            return FetchResult(url, url, 200, "", "0123456789", truncated=True)

    tool = web_fetch_tool(fetcher=Stub(), max_bytes=10)
    out = await tool.handler(WebFetchArgs(url="http://x.test/"), _ctx())
    assert out.content == (
        "URL: http://x.test/ (status 200, no content type)\n\n0123456789\n"
        "[the page was cut at the 10-byte download limit]"
    )

    denied = web_fetch_tool(fetcher=fetcher(hosts=[]), max_bytes=1000)
    with pytest.raises(PermissionDenied):
        await denied.handler(WebFetchArgs(url=site.url("/")), _ctx())
    assert site.hits == []
