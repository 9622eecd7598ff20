"""A fetched page reduced to text (SBX-2): an HTML page to Markdown of its main content
(`markdown.py`, imported on the first HTML page; plain text when that fails), text and JSON as
they are, anything else to a one-line note."""

from __future__ import annotations

import codecs
import html as html_lib
import logging
import re
from html.parser import HTMLParser

_log = logging.getLogger("soong_agent.adapters.web.fetcher")


def one_line(text: str) -> str:
    """`text` on one line ("no detail" when empty)."""
    return " ".join(text.split()) or "no detail"


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
            one_line(str(exc))[:200],
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
