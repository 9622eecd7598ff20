"""Text the hub shows people: one line, and never a secret of the server's spec."""

from __future__ import annotations

import re
from collections.abc import Iterable

from soong_agent.ports.mcp import McpServerSpec

MIN_SECRET_LENGTH = 4
"""Values shorter than this are not searched for (a value like `1` would blank every digit)."""

REDACTED = "[redacted]"


class Scrubber:
    """Replaces every value of a spec's `env` and `headers` (and each word of a header value,
    so `Bearer <token>` hides the token alone too) in text meant for people."""

    def __init__(self, secrets: Iterable[str]) -> None:
        found: set[str] = set()
        for value in secrets:
            found.add(value)
            found.update(value.split())
        self._values = sorted(
            (value for value in found if len(value) >= MIN_SECRET_LENGTH), key=len, reverse=True
        )

    @classmethod
    def for_spec(cls, spec: McpServerSpec) -> Scrubber:
        """A scrubber of `spec`'s env values, header values and OAuth client secret."""
        return cls(spec.secrets())

    def __call__(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, REDACTED)
        return text


def one_line(text: str, limit: int = 300) -> str:
    """`text` on one line (runs of white space made one space), cut at `limit` characters."""
    flat = re.sub(r"\s+", " ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def safe_url(url: str | None) -> str:
    """`url` without user info, query or fragment (they may carry credentials)."""
    if not url:
        return ""
    match = re.match(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?:[^@/]*@)?(?P<rest>[^?#]*)", url)
    if match is None:
        return url.split("?", 1)[0].split("#", 1)[0]
    return match["scheme"] + match["rest"]
