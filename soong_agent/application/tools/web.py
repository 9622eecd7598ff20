"""The web_fetch tool (TOOL-1): one GET through the `WebFetcher` port, under SBX-2."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput
from soong_agent.ports.web import FetchResult, WebFetcher


class WebFetchArgs(ToolArgs):
    url: str = Field(description="The http:// or https:// URL to fetch.")
    max_chars: int | None = Field(
        default=None, ge=1, description="Return at most this many characters of the page text."
    )


def url_host(url: str) -> str:
    """The lower-case host of `url` (a fetch's session scope), or the URL if it has no host."""
    try:
        host = urlsplit(url.strip()).hostname
    except ValueError:
        host = None
    return host.rstrip(".") if host else url.strip()


def _describe(args: WebFetchArgs, ctx: ToolContext) -> tuple[str, str]:
    return url_host(args.url), f"fetch {args.url}"


async def _preview(args: WebFetchArgs, ctx: ToolContext) -> str:
    """The approval prompt's view of a fetch: the URL and the host it names (with its ASCII
    form when the name is not ASCII, where look-alike letters hide)."""
    host = url_host(args.url)
    shown = host
    if not host.isascii():
        try:
            shown = f"{host} (ASCII form: {host.encode('idna').decode('ascii')})"
        except UnicodeError as exc:
            shown = f"{host} (not a valid host name: {exc})"
    return f"URL: {args.url.strip()}\nhost: {shown}"


def render_fetch(result: FetchResult, *, max_chars: int | None, max_bytes: int) -> str:
    """What the model reads: the final URL, status and type, then the text (cut if asked)."""
    content_type = result.content_type or "no content type"
    lines = [f"URL: {result.final_url} (status {result.status}, {content_type})"]
    if result.final_url != result.url:
        lines.append(f"[redirected from {result.url}]")
    text = result.text
    cut_note = ""
    if max_chars is not None and len(text) > max_chars:
        cut_note = f"\n[text cut at {max_chars} of {len(text)} characters]"
        text = text[:max_chars]
    lines.append("")
    lines.append(text if text.strip() else "(no text)")
    body = "\n".join(lines) + cut_note
    if result.truncated:
        body += f"\n[the page was cut at the {max_bytes}-byte download limit]"
    return body


def web_fetch_tool(*, fetcher: WebFetcher, max_bytes: int, timeout_s: float = 30) -> Tool:
    """The web_fetch tool over `fetcher`; downloads stop at `max_bytes`, requests at `timeout_s`."""

    async def web_fetch(args: WebFetchArgs, ctx: ToolContext) -> ToolOutput:
        result = await fetcher.fetch(args.url, max_bytes=max_bytes, timeout_s=timeout_s)
        return ToolOutput(render_fetch(result, max_chars=args.max_chars, max_bytes=max_bytes))

    return Tool(
        "web_fetch",
        "Fetch a web page (HTTP GET) and return its content: an HTML page as Markdown of its main "
        "content (headings, lists, links made absolute), "
        "text and JSON come as they are. Only hosts allowed by the network settings can be "
        "reached; redirects are followed under the same rule.",
        WebFetchArgs,
        web_fetch,
        permission_class="network",
        describe=_describe,
        preview=_preview,
    )
