"""The WebFetcher contract: ScriptedWebFetcher and HttpxWebFetcher against loopback servers.

Each case describes two sites (`site`, `other`) as scripted pages; the real fetcher reaches them
on two loopback HTTP servers, the fake serves the same pages from memory. Both sit behind the
same allow-list and must give the same results and refusals.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal, Protocol

import pytest

from soong_agent.adapters.web.fetcher import HttpxWebFetcher
from soong_agent.ports.errors import PermissionDenied, ToolInputError
from soong_agent.ports.web import FetchResult, WebFetcher
from soong_agent.testing import ScriptedPage, ScriptedWebFetcher

Policy = Literal["allowlist", "deny"]

PAGE = """<!doctype html><html><head><title>Hello page</title>
<style>body { color: red }</style><script>var secret = "SCRIPT-BODY";</script></head>
<body><h1>Welcome</h1><p>First   paragraph with a <a href="/x">link text</a>.</p>
<ul><li>one</li><li>two</li></ul></body></html>"""


@dataclass
class Site:
    """One origin: its pages by path and the paths requested from it."""

    host: str
    port: int
    pages: dict[str, ScriptedPage] = field(default_factory=dict)
    hits: list[str] = field(default_factory=list)

    @property
    def entry(self) -> str:
        return f"{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"


class Kit(Protocol):
    site: Site
    other: Site

    def fetcher(
        self, *, hosts: list[str], policy: Policy = "allowlist", max_redirects: int = 5
    ) -> WebFetcher: ...

    def hits(self, site: Site) -> list[str]: ...


# --- the fake: pages in memory ----------------------------------------------------------------


class FakeKit:
    def __init__(self) -> None:
        self.site = Site("127.0.0.1", 18080)
        self.other = Site("127.0.0.1", 18081)
        self._fetchers: list[ScriptedWebFetcher] = []

    def fetcher(
        self, *, hosts: list[str], policy: Policy = "allowlist", max_redirects: int = 5
    ) -> WebFetcher:
        sites = (self.site, self.other)
        pages = {s.url(path): page for s in sites for path, page in s.pages.items()}
        made = ScriptedWebFetcher(
            pages, allowed_hosts=hosts, policy=policy, max_redirects=max_redirects
        )
        self._fetchers.append(made)
        return made

    def hits(self, site: Site) -> list[str]:
        prefix = site.url("")
        return [
            url.removeprefix(prefix)
            for f in self._fetchers
            for url in f.requests
            if url.startswith(prefix + "/")
        ]


# --- the real one: loopback HTTP servers --------------------------------------------------------


@contextlib.contextmanager
def serving(site: Site) -> Iterator[None]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            site.hits.append(self.path)
            page = site.pages.get(path) or ScriptedPage(b"not found", status=404)
            time.sleep(page.delay_s)
            body = page.body.encode() if isinstance(page.body, str) else page.body
            self.send_response(page.status)
            if page.content_type:
                self.send_header("Content-Type", page.content_type)
            if page.location:
                self.send_header("Location", page.location)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

    server = Server((site.host, 0), Handler)
    site.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


class RealKit:
    def __init__(self) -> None:
        self.site = Site("127.0.0.1", 0)
        self.other = Site("127.0.0.1", 0)

    def fetcher(
        self, *, hosts: list[str], policy: Policy = "allowlist", max_redirects: int = 5
    ) -> WebFetcher:
        return HttpxWebFetcher(
            allowed_hosts=hosts, allowed_domains=[], policy=policy, max_redirects=max_redirects
        )

    def hits(self, site: Site) -> list[str]:
        return list(site.hits)


def _fake() -> Iterator[Kit]:
    yield FakeKit()


def _real() -> Iterator[Kit]:
    kit = RealKit()
    with serving(kit.site), serving(kit.other):
        yield kit


KITS: dict[str, Callable[[], Iterator[Kit]]] = {"scripted": _fake, "httpx": _real}


@pytest.fixture(params=sorted(KITS))
def kit(request: pytest.FixtureRequest) -> Iterator[Kit]:
    yield from KITS[request.param]()


async def get(
    f: WebFetcher, url: str, *, max_bytes: int = 100_000, timeout_s: float = 5
) -> FetchResult:
    return await f.fetch(url, max_bytes=max_bytes, timeout_s=timeout_s)


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the contract --------------------------------------------------------------------------------


def test_implements_the_port(kit: Kit) -> None:
    assert isinstance(kit.fetcher(hosts=[]), WebFetcher)


async def test_a_listed_host_gives_its_text(kit: Kit) -> None:
    kit.site.pages["/a.txt"] = ScriptedPage("plain text\nline two")
    f = kit.fetcher(hosts=[kit.site.entry])
    result = await get(f, kit.site.url("/a.txt"))
    assert result == FetchResult(
        url=kit.site.url("/a.txt"),
        final_url=kit.site.url("/a.txt"),
        status=200,
        content_type="text/plain; charset=utf-8",
        text="plain text\nline two",
        truncated=False,
    )
    assert kit.hits(kit.site) == ["/a.txt"]


async def test_a_host_entry_without_port_allows_every_port(kit: Kit) -> None:
    kit.site.pages["/a"] = ScriptedPage("ok")
    result = await get(kit.fetcher(hosts=[kit.site.host]), kit.site.url("/a"))
    assert result.text == "ok"


async def test_html_is_reduced_to_readable_text(kit: Kit) -> None:
    kit.site.pages["/page"] = ScriptedPage.html(PAGE)
    result = await get(kit.fetcher(hosts=[kit.site.entry]), kit.site.url("/page"))
    assert result.content_type.startswith("text/html")
    # The real fetcher gives Markdown (`# Welcome`, `[link text](…/x)`), the fake plain text.
    for shown in ("Welcome", "First paragraph with a", "link text", "one", "two"):
        assert shown in result.text
    for hidden in ("SCRIPT-BODY", "color: red", "<p>", "<li>"):
        assert hidden not in result.text


async def test_json_is_text_and_binary_is_a_note(kit: Kit) -> None:
    kit.site.pages["/j"] = ScriptedPage('{"a": 1}', "application/json")
    kit.site.pages["/b"] = ScriptedPage(b"\x89PNG\r\n\x1a\n" + bytes(100), "image/png")
    f = kit.fetcher(hosts=[kit.site.entry])
    assert (await get(f, kit.site.url("/j"))).text == '{"a": 1}'
    note = (await get(f, kit.site.url("/b"))).text
    assert "image/png" in note and "PNG" not in note


async def test_an_error_status_is_a_result_not_an_exception(kit: Kit) -> None:
    kit.site.pages["/exists"] = ScriptedPage("x")
    result = await get(kit.fetcher(hosts=[kit.site.entry]), kit.site.url("/missing"))
    assert result.status == 404


async def test_an_unlisted_host_is_refused_before_any_request(kit: Kit) -> None:
    kit.site.pages["/"] = ScriptedPage("hi")
    f = kit.fetcher(hosts=[kit.other.entry])
    with pytest.raises(PermissionDenied, match=kit.site.entry):
        await get(f, kit.site.url("/"))
    with pytest.raises(PermissionDenied, match="localhost"):
        await get(f, f"http://localhost:{kit.site.port}/")
    with pytest.raises(PermissionDenied):
        await get(kit.fetcher(hosts=[]), kit.site.url("/"))
    assert kit.hits(kit.site) == []


async def test_policy_deny_refuses_even_listed_hosts(kit: Kit) -> None:
    kit.site.pages["/"] = ScriptedPage("hi")
    with pytest.raises(PermissionDenied):
        await get(kit.fetcher(hosts=[kit.site.entry], policy="deny"), kit.site.url("/"))
    assert kit.hits(kit.site) == []


async def test_redirects_within_the_allow_list_are_followed(kit: Kit) -> None:
    kit.site.pages["/go"] = ScriptedPage.redirect(kit.other.url("/there"))
    kit.other.pages["/there"] = ScriptedPage.redirect("/final", status=301)
    kit.other.pages["/final"] = ScriptedPage("arrived")
    f = kit.fetcher(hosts=[kit.site.entry, kit.other.entry])
    result = await get(f, kit.site.url("/go#frag"))
    assert (result.status, result.text) == (200, "arrived")
    assert result.url == kit.site.url("/go#frag")
    assert result.final_url == kit.other.url("/final")


async def test_a_redirect_to_an_unlisted_host_is_refused(kit: Kit) -> None:
    kit.site.pages["/go"] = ScriptedPage.redirect(kit.other.url("/secret"))
    kit.other.pages["/secret"] = ScriptedPage("secret")
    with pytest.raises(PermissionDenied, match=kit.other.entry):
        await get(kit.fetcher(hosts=[kit.site.entry]), kit.site.url("/go"))
    assert kit.hits(kit.other) == []


async def test_a_redirect_to_another_scheme_is_refused(kit: Kit) -> None:
    kit.site.pages["/go"] = ScriptedPage.redirect("file:///etc/passwd")
    with pytest.raises(ToolInputError, match="http"):
        await get(kit.fetcher(hosts=[kit.site.entry]), kit.site.url("/go"))


async def test_too_many_redirects(kit: Kit) -> None:
    for i in range(4):
        kit.site.pages[f"/r{i}"] = ScriptedPage.redirect(f"/r{i + 1}")
    kit.site.pages["/r4"] = ScriptedPage("end")
    f = kit.fetcher(hosts=[kit.site.entry], max_redirects=3)
    with pytest.raises(ToolInputError, match="redirects more than 3 times"):
        await get(f, kit.site.url("/r0"))
    ok = kit.fetcher(hosts=[kit.site.entry], max_redirects=4)
    assert (await get(ok, kit.site.url("/r0"))).text == "end"


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "not a url", "http://"])
async def test_only_http_urls_with_a_host(kit: Kit, url: str) -> None:
    with pytest.raises(ToolInputError):
        await get(kit.fetcher(hosts=[kit.site.entry]), url)


async def test_credentials_in_the_url_are_refused(kit: Kit) -> None:
    kit.site.pages["/"] = ScriptedPage("hi")
    url = f"http://user:pw@{kit.site.entry}/"
    with pytest.raises(ToolInputError, match="user name or password"):
        await get(kit.fetcher(hosts=[kit.site.entry]), url)
    assert kit.hits(kit.site) == []


async def test_the_body_is_cut_at_max_bytes(kit: Kit) -> None:
    kit.site.pages["/big"] = ScriptedPage("0123456789" * 10)
    kit.site.pages["/utf8"] = ScriptedPage("aé€")  # 1 + 2 + 3 bytes
    f = kit.fetcher(hosts=[kit.site.entry])
    cut = await get(f, kit.site.url("/big"), max_bytes=15)
    assert (cut.text, cut.truncated) == ("012345678901234", True)
    whole = await get(f, kit.site.url("/big"), max_bytes=100)
    assert (len(whole.text), whole.truncated) == (100, False)
    # a character cut in the middle is left out
    assert (await get(f, kit.site.url("/utf8"), max_bytes=4)).text == "aé"
    with pytest.raises(ValueError):
        await get(f, kit.site.url("/big"), max_bytes=0)


async def test_a_slow_page_times_out_naming_the_host(kit: Kit) -> None:
    kit.site.pages["/slow"] = ScriptedPage("late", delay_s=2)
    started = time.monotonic()
    with pytest.raises(ToolInputError, match=f"{kit.site.host}.*timed out"):
        await get(kit.fetcher(hosts=[kit.site.entry]), kit.site.url("/slow"), timeout_s=0.3)
    assert time.monotonic() - started < 1.9


async def test_nothing_listening_is_a_tool_input_error(kit: Kit) -> None:
    port = unused_port()
    f = kit.fetcher(hosts=[f"127.0.0.1:{port}"])
    with pytest.raises(ToolInputError, match=r"127\.0\.0\.1"):
        await get(f, f"http://127.0.0.1:{port}/")
