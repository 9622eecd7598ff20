"""An HTML page as Markdown for web_fetch: its main content, headings and links kept.

The page is parsed by BeautifulSoup (the standard library's parser, no lxml) and written out by
markdownify; what this module adds is the choice of what to keep, readability-style:

- never text: scripts, styles, ``noscript``, templates, SVG, frames, embedded objects, form
  controls, dialogs, navigation (``nav``, ``role=navigation|search``) and hidden elements
  (``hidden``, ``aria-hidden=true``, ``display: none``);
- the main content: the first ``main`` (or ``role=main``) with text, else the page's only
  (outermost) ``article``, else the body without the ``header``, ``footer`` and ``aside``
  (and ``role=banner|contentinfo|complementary``) outside its articles;
- the document title as a ``#`` line when the content has no ``h1`` of its own;
- links and images resolved against the page's URL (and its ``<base href>``); a link to a
  scheme other than http, https, mailto or ftp keeps only its text, an image without a usable
  source or alternative text is dropped, and so is a heading's ``¶``/``#`` permalink.

Imported only when an HTML page is fetched: bs4 and markdownify are not part of start-up.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import urljoin, urlsplit

from bs4 import BeautifulSoup, Tag
from markdownify import ATX, MarkdownConverter

_NEVER_TEXT = frozenset(
    {
        "script", "style", "noscript", "template", "svg", "canvas", "iframe", "frame",
        "frameset", "object", "embed", "applet", "audio", "video", "map", "button", "select",
        "input", "textarea", "dialog", "nav", "link", "meta",
    }
)  # fmt: skip
_NAVIGATION_ROLES = frozenset({"navigation", "search", "dialog", "alertdialog"})
_PAGE_LEVEL = frozenset({"header", "footer", "aside"})
_PAGE_LEVEL_ROLES = frozenset({"banner", "contentinfo", "complementary"})
_PERMALINK_MARKS = frozenset({"#", "¶", "§", "🔗", "link"})
_LINK_SCHEMES = frozenset({"http", "https", "mailto", "ftp"})
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)
_CODE_LANGUAGE = re.compile(r"(?:language|lang)-([\w+#.-]+)$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def html_to_markdown(html: str, *, base_url: str | None) -> str:
    """The main content of `html` as Markdown, or "" when it has no text.

    Raises whatever the parser or the converter raises on a page they cannot handle (bs4's
    ``ParserRejectedMarkup``, ``RecursionError`` for very deep nesting); the caller falls back.
    """
    soup = BeautifulSoup(html, "html.parser")
    base = _base_url(soup, base_url)
    title = _title(soup)
    _drop_never_text(soup)
    content = _main_content(soup)
    _resolve_links(content, base)
    converter = MarkdownConverter(
        heading_style=ATX,
        bullets="-",
        escape_asterisks=False,
        escape_underscores=False,
        escape_misc=False,
        code_language_callback=_code_language,
        table_infer_header=True,
    )
    markdown = _tidy(converter.convert_soup(content))
    if not markdown:
        return ""
    if title and content.find("h1") is None:
        markdown = f"# {title}\n\n{markdown}"
    return markdown


# --- what to keep ----------------------------------------------------------------------------


def _is_hidden(tag: Tag) -> bool:
    if tag.name in _NEVER_TEXT or tag.has_attr("hidden"):
        return True
    if _attr(tag, "aria-hidden").lower() == "true":
        return True
    if _attr(tag, "role").lower() in _NAVIGATION_ROLES:
        return True
    return bool(_HIDDEN_STYLE.search(_attr(tag, "style")))


def _outermost(root: Tag, hit: Callable[[Tag], bool]) -> list[Tag]:
    """The elements under `root` that `hit`, not looking inside one that does; document order.

    One pass over the tree: bs4's own ``find_all`` with a check per element (or its
    ``decomposed``, which searches the subtree) would make a deeply nested page quadratic.
    """
    found: list[Tag] = []
    stack = [child for child in reversed(root.contents) if isinstance(child, Tag)]
    while stack:
        tag = stack.pop()
        if hit(tag):
            found.append(tag)
        else:
            stack.extend(child for child in reversed(tag.contents) if isinstance(child, Tag))
    return found


def _drop_never_text(soup: BeautifulSoup) -> None:
    for tag in _outermost(soup, _is_hidden):
        tag.decompose()


def _has_text(tag: Tag) -> bool:
    return any(text.strip() for text in tag.strings)


def _is_main(tag: Tag) -> bool:
    return tag.name == "main" or _attr(tag, "role").lower() == "main"


def _is_page_chrome(tag: Tag) -> bool:
    if tag.name in _PAGE_LEVEL or tag.name in ("head", "title"):
        return True
    return _attr(tag, "role").lower() in _PAGE_LEVEL_ROLES


def _main_content(soup: BeautifulSoup) -> Tag:
    """The element holding the page's main content (see the module docstring)."""
    for tag in _outermost(soup, _is_main):
        if _has_text(tag):
            return tag
    articles = [tag for tag in _outermost(soup, lambda t: t.name == "article") if _has_text(tag)]
    if len(articles) == 1:
        return articles[0]
    body = soup.body or soup
    for tag in _outermost(body, lambda t: t.name == "article" or _is_page_chrome(t)):
        if tag.name != "article":  # an article keeps its own header, footer and asides
            tag.decompose()
    return body


def _title(soup: BeautifulSoup) -> str:
    tag = soup.title
    return " ".join(tag.get_text(" ").split()) if tag is not None else ""


# --- links -----------------------------------------------------------------------------------


def _base_url(soup: BeautifulSoup, page_url: str | None) -> str:
    """The URL links are resolved against: the page's, moved by a usable ``<base href>``."""
    page = page_url or ""
    base = soup.find("base", href=True)
    if isinstance(base, Tag):
        moved = _absolute(page, _attr(base, "href"), {"http", "https"})
        if moved is not None:
            return moved
    return page


def _absolute(base: str, ref: str, schemes: frozenset[str] | set[str]) -> str | None:
    """`ref` resolved against `base`, or None for an empty, malformed or unwanted link."""
    ref = ref.strip()
    if not ref:
        return None
    try:
        url = urljoin(base, ref)
        scheme = urlsplit(url).scheme.lower()
    except ValueError:  # e.g. a bracketed host that is not an IPv6 address: not a link
        return None
    if scheme not in schemes:
        return None
    # Markdown link targets end at a space or an unbalanced parenthesis.
    return url.replace(" ", "%20").replace("(", "%28").replace(")", "%29")


def _resolve_links(content: Tag, base: str) -> None:
    for link in content.find_all("a"):
        if _attr(link, "href").startswith("#") and link.get_text().strip() in _PERMALINK_MARKS:
            link.decompose()  # a heading's own "¶" / "#" permalink: noise in the text
            continue
        href = _absolute(base, _attr(link, "href"), _LINK_SCHEMES)
        if href is None:
            del link["href"]  # markdownify writes a link without href as its text
        else:
            link["href"] = href
    for image in content.find_all("img"):
        src = _absolute(base, _attr(image, "src"), {"http", "https"})
        alt = " ".join(_attr(image, "alt").split())
        if src is not None and alt:
            image.attrs = {"src": src, "alt": alt}
        elif alt:
            image.replace_with(alt)
        else:
            image.decompose()


# --- helpers ---------------------------------------------------------------------------------


def _attr(tag: Tag, name: str) -> str:
    """An attribute as one string ("" when absent; a multi-valued one joined by spaces)."""
    value = tag.get(name)
    if value is None:
        return ""
    return value if isinstance(value, str) else " ".join(value)


def _code_language(pre: Tag) -> str | None:
    """The language a ``<pre>`` (or its ``<code>``) names in a ``language-*`` class."""
    code = pre.find("code")
    for tag in (pre, code):
        if isinstance(tag, Tag):
            for name in _attr(tag, "class").split():
                found = _CODE_LANGUAGE.match(name)
                if found:
                    return found.group(1)
    return None


def _tidy(markdown: str) -> str:
    """No trailing spaces, no runs of blank lines outside code blocks, no-break spaces as spaces."""
    lines: list[str] = []
    in_code = False
    for raw in markdown.replace("\xa0", " ").split("\n"):
        line = raw.rstrip()
        if _FENCE.match(line):
            in_code = not in_code
        elif not in_code and not line and lines and not lines[-1]:
            continue
        lines.append(line)
    return "\n".join(lines).strip("\n")
