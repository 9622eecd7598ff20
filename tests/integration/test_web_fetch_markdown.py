"""web_fetch gives an HTML page as Markdown of its main content (served on 127.0.0.1)."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from soong_agent.adapters.web import markdown as markdown_module
from soong_agent.adapters.web.fetcher import html_to_text, page_text
from soong_agent.application.tools.web import WebFetchArgs, web_fetch_tool
from tests.integration.test_web_fetch import (
    Listener,
    Reply,
    _ctx,
    _serve,
    fetcher,
    get,
    html,
    redirect,
)

DOC_PAGE = """<!doctype html><html><head><title>Guide - Example Docs</title>
<meta charset="utf-8"><style>.x { color: red }</style>
<script>window.SCRIPT_IN_HEAD = 1</script></head>
<body>
<header><a href="/">Example Docs HOME-LINK</a><nav><a href="/a">NAV-ITEM</a></nav></header>
<div class="layout">
<aside>SIDEBAR-TEXT <a href="/other">other page</a></aside>
<main>
<h1>Guide <a class="headerlink" href="#guide">¶</a></h1>
<p>Read <a href="../api.html">the API</a>, <a href="install?step=1#top">install steps</a>,
<a href="#usage">usage</a>, <a href="//mirror.example.test/x">the mirror</a>,
<a href="javascript:alert(1)">JS-LINK</a> and <a href="mailto:docs@example.test">mail us</a>.</p>
<script>var inMain = "SCRIPT-IN-MAIN";</script>
<div hidden>HIDDEN-TEXT</div><span style="display: none">DISPLAY-NONE</span>
<h2 id="usage">Usage</h2>
<p>Some <strong>bold</strong> and <code>snake_case</code> text.</p>
<p><img src="img/diagram.png" alt="a diagram"> <img src="data:image/png;base64,AAAA"
 alt="inline picture"> <img src="spacer.gif"></p>
<h3>Details</h3>
<pre><code class="language-python">print("hi")
</code></pre>
<table><tr><th>Key</th><th>Value</th></tr><tr><td>a</td><td>1</td></tr></table>
</main></div>
<footer>FOOTER-TEXT © 2026</footer>
</body></html>"""

BOILERPLATE = (
    "SCRIPT_IN_HEAD",
    "SCRIPT-IN-MAIN",
    "color: red",
    "HOME-LINK",
    "NAV-ITEM",
    "SIDEBAR-TEXT",
    "FOOTER-TEXT",
    "HIDDEN-TEXT",
    "DISPLAY-NONE",
    "¶",
    "spacer",
    "javascript:",
    "data:image",
)


@pytest.fixture
def site() -> Iterator[Listener]:
    yield from _serve("127.0.0.1")


def text_reply(body: bytes, content_type: str) -> Reply:
    return 200, {"Content-Type": content_type}, body


async def test_main_content_with_headings_and_absolute_links(site: Listener) -> None:
    site.routes["/start"] = redirect("/docs/guide/page.html")
    site.routes["/docs/guide/page.html"] = html(DOC_PAGE.encode())

    result = await get(fetcher(hosts=["127.0.0.1"]), site.url("/start"))

    page = site.url("/docs/guide/page.html")
    assert result.final_url == page
    # resolved against the final URL, not the one asked for
    assert result.text == (
        "# Guide\n\n"
        f"Read [the API]({site.url('/docs/api.html')}), "
        f"[install steps]({site.url('/docs/guide/install?step=1#top')}),\n"
        f"[usage]({page}#usage), [the mirror](http://mirror.example.test/x),\n"
        "JS-LINK and [mail us](mailto:docs@example.test).\n\n"
        "## Usage\n\n"
        "Some **bold** and `snake_case` text.\n\n"
        f"![a diagram]({site.url('/docs/guide/img/diagram.png')}) inline picture\n\n"
        "### Details\n\n"
        '```python\nprint("hi")\n```\n\n'
        "| Key | Value |\n| --- | --- |\n| a | 1 |"
    )
    for hidden in BOILERPLATE:
        assert hidden not in result.text


async def test_single_article_base_href_and_title_line(site: Listener) -> None:
    site.routes["/news"] = html(
        b"<html><head><title>Release  notes</title><base href='/static/v2/'></head><body>"
        b"<header>SITE-BANNER</header><div role='navigation'>ROLE-NAV</div>"
        b"<article><header><p>Posted today</p></header><h2>Version 2</h2>"
        b"<p>See <a href='changes.html'>the changes</a>.</p>"
        b"<aside>kept inside the article</aside><footer>ARTICLE-FOOTER</footer></article>"
        b"<div>COMMENTS-OUTSIDE</div></body></html>"
    )

    text = (await get(fetcher(hosts=["127.0.0.1"]), site.url("/news"))).text

    assert text.startswith("# Release notes\n\nPosted today\n\n## Version 2\n\n")
    assert f"[the changes]({site.url('/static/v2/changes.html')})" in text
    assert "kept inside the article" in text
    for hidden in ("SITE-BANNER", "ROLE-NAV", "COMMENTS-OUTSIDE"):
        assert hidden not in text


async def test_page_without_landmarks_keeps_the_body_without_its_chrome(site: Listener) -> None:
    site.routes["/plain"] = html(
        b"<title>T</title><header>TOP-BAR</header><div role='banner'>BANNER</div>"
        b"<h1>Plain page</h1><article><p>first post</p></article><article><p>second post</p>"
        b"</article><ol><li>a<ul><li>b</li></ul></li></ol><p>x<br>y</p>"
        b"<div role='contentinfo'>CONTACT</div><footer>BOTTOM</footer>"
    )

    text = (await get(fetcher(hosts=["127.0.0.1"]), site.url("/plain"))).text

    assert text == ("# Plain page\n\nfirst post\n\nsecond post\n\n1. a\n   - b\n\nx\ny")


async def test_long_page_is_bounded_by_the_download_limit(site: Listener) -> None:
    paragraphs = b"".join(
        b'<p class="para">Paragraph %d with <a class="internal" href="/p/%d">a link</a>.</p>\n'
        % (n, n)
        for n in range(20_000)
    )
    site.routes["/long"] = html(b"<html><body><h1>Long</h1>" + paragraphs + b"</body></html>")
    f = fetcher(hosts=["127.0.0.1"])

    result = await get(f, site.url("/long"), max_bytes=20_000)

    assert result.truncated
    assert result.text.startswith(f"# Long\n\nParagraph 0 with [a link]({site.url('/p/0')}).")
    assert len(result.text) <= 20_000
    assert "Paragraph 1000 " not in result.text and "cut to the" not in result.text

    tool = web_fetch_tool(fetcher=f, max_bytes=20_000, timeout_s=5)
    out = await tool.handler(WebFetchArgs(url=site.url("/long")), _ctx())
    assert out.content.endswith("[the page was cut at the 20000-byte download limit]")


async def test_markdown_never_outgrows_its_html(site: Listener) -> None:
    """Short relative links under a long URL: the Markdown is cut to the HTML's length."""
    path = "/" + "d" * 1500
    site.routes[path] = html(b"<h1>Many</h1>" + b"<a href='#s'>x</a> " * 2000)

    result = await get(fetcher(hosts=["127.0.0.1"]), site.url(path))

    size = len("<h1>Many</h1>") + len("<a href='#s'>x</a> ") * 2000
    assert result.text.startswith(f"# Many\n\n[x]({site.url(path)}#s) [x]")
    assert result.text.endswith(
        f"\n[the Markdown was cut to the {size} characters of the page's HTML]"
    )
    assert len(result.text) == size


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("text/plain; charset=utf-8", b"<h1>not a heading</h1>\n  * keep   spacing\n\n\n[x](y)\n"),
        ("text/markdown", b"# Title\n\nsome_snake_case *and* <b>tags</b>\n"),
        ("text/csv", b"a,b\n1,<p>2</p>\n"),
        ("application/json", b'{"html": "<a href=\\"/x\\">x</a>"}'),
        ("", b"no content type, <i>not</i> a page\n"),
    ],
)
async def test_non_html_text_is_given_unchanged(
    site: Listener, content_type: str, body: bytes
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    site.routes["/file"] = (200, headers, body)

    result = await get(fetcher(hosts=["127.0.0.1"]), site.url("/file"))

    assert result.text == body.decode()


async def test_extractor_failure_falls_back_to_plain_text(
    site: Listener, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    threads: list[int] = []

    def broken(html: str, *, base_url: str | None) -> str:
        threads.append(threading.get_ident())
        raise ValueError("cannot make sense of this page")

    monkeypatch.setattr(markdown_module, "html_to_markdown", broken)
    site.routes["/page"] = html(DOC_PAGE.encode())

    with caplog.at_level(logging.WARNING, logger="soong_agent.adapters.web.fetcher"):
        result = await get(fetcher(hosts=["127.0.0.1"]), site.url("/page"))

    assert result.text == html_to_text(DOC_PAGE)
    assert "Guide" in result.text and "SCRIPT-IN-MAIN" not in result.text
    assert threads and threads[0] != threading.get_ident()  # converted off the event loop
    assert "could not be turned into Markdown (ValueError: cannot make sense" in caplog.text
    assert site.url("/page") in caplog.text


async def test_missing_extractor_falls_back_to_plain_text(
    site: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "soong_agent.adapters.web.markdown", None)  # ImportError
    site.routes["/page"] = html(b"<h1>Title</h1><p>Body <a href='/x'>link</a></p>")

    result = await get(fetcher(hosts=["127.0.0.1"]), site.url("/page"))

    assert result.text == "Title\n\nBody link"


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        # nesting deeper than the converter's recursion can follow
        (b"<p>before</p>" + b"<div>" * 2000 + b"deep text" + b"</div>" * 2000, "deep text"),
        # a marked section the standard library's parser rejects (in bs4 and in html_to_text)
        (b"<h1>Top</h1><p>one</p><![bogus <script>SCRIPT-X</script><p>two</p>", "two"),
        # not HTML at all, though served as such
        (b"\x00\x01<<<<<<>>>>&&&;;; plain words", "plain words"),
    ],
)
async def test_page_the_extractor_cannot_parse_still_gives_text(
    site: Listener, page: bytes, expected: str
) -> None:
    site.routes["/odd"] = html(page)

    result = await get(fetcher(hosts=["127.0.0.1"]), site.url("/odd"))

    assert result.status == 200
    assert expected in result.text
    assert "SCRIPT-X" not in result.text
    assert "<div>" not in result.text


def test_extractor_is_imported_only_for_an_html_page() -> None:
    code = (
        "import sys\n"
        "from soong_agent.adapters.web.fetcher import page_text\n"
        "heavy = ('bs4', 'markdownify', 'soong_agent.adapters.web.markdown')\n"
        "assert not [m for m in heavy if m in sys.modules], sys.modules.keys()\n"
        "assert page_text(b'plain', 'text/plain') == 'plain'\n"
        "assert not [m for m in heavy if m in sys.modules]\n"
        "assert page_text(b'<h1>x</h1>', 'text/html') == '# x'\n"
        "assert all(m in sys.modules for m in heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


def test_charset_from_meta_and_header_is_used_before_conversion() -> None:
    latin = "<meta charset='iso-8859-1'><h1>Caf\xe9</h1>".encode("latin-1")
    assert page_text(latin, "text/html") == "# Café"
    header = "<h1>Gr\xfc\xdfe</h1>".encode("cp1252")
    assert page_text(header, "text/html; charset=windows-1252") == "# Grüße"
