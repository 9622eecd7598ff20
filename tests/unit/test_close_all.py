"""Closing a runtime's resources: every one is closed even when one fails (a pool that cannot
close must not leave a background process running), the last made first, and the first
failure is raised once all are closed."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from soong_agent.entrypoints.closing import close_all


async def test_every_resource_is_closed_even_when_one_fails() -> None:
    closed: list[str] = []

    def closer(name: str, fails: bool = False) -> Callable[[], Awaitable[None]]:
        async def close() -> None:
            closed.append(name)
            if fails:
                raise OSError(f"{name} would not close")

        return close

    closables = [
        closer("background commands"),
        closer("pool", fails=True),
        closer("mcp", fails=True),
        closer("store"),
    ]
    with pytest.raises(OSError, match="mcp would not close"):
        await close_all(closables)
    assert closed == ["store", "mcp", "pool", "background commands"]
    assert closables == []


async def test_nothing_to_close_is_fine() -> None:
    await close_all([])
