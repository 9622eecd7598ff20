"""The web fetch port: one HTTP GET under the network policy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class FetchResult:
    """A fetched page: the final URL after redirects, status, content type, extracted text."""

    url: str
    final_url: str
    status: int
    content_type: str
    text: str
    truncated: bool = False


@runtime_checkable
class WebFetcher(Protocol):
    """Fetches URLs; every hop (redirects included) must pass the network policy.

    A host outside the policy raises `PermissionDenied` naming the host; transport failures
    raise `ToolInputError` with a one-line reason.
    """

    async def fetch(self, url: str, *, max_bytes: int, timeout_s: float) -> FetchResult:
        """GET `url` and return its text (HTML reduced to readable text)."""
        ...
