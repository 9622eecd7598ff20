"""Closing what a runtime opened (pools, background processes, MCP sessions, files)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

__all__ = ["close_all"]

log = logging.getLogger(__name__)


async def close_all(closables: list[Callable[[], Awaitable[None]]]) -> None:
    """Close each of `closables` (emptying the list), the last made first, each on its own:
    one that fails does not leave the rest open (a background process running on, a pool
    holding its connections). The first failure is raised once all have been closed; the
    others are logged."""
    first: Exception | None = None
    while closables:
        close = closables.pop()
        try:
            await close()
        except Exception as exc:  # the rest are closed first; then it is raised
            if first is None:
                first = exc
            else:
                log.warning("closing %s failed too: %s: %s", close, type(exc).__name__, exc)
    if first is not None:
        raise first
