"""Requests to compact a run's context before its next model call (compact tool, run.compact)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from soong_agent.domain.compaction import CompactionReport


class CompactionRequests:
    """A run's pending compaction requests; the loop settles them at its next model call."""

    def __init__(self) -> None:
        self._pending: list[asyncio.Future[CompactionReport | None]] = []

    def __bool__(self) -> bool:
        return bool(self._pending)

    def request(self) -> asyncio.Future[CompactionReport | None]:
        """Ask for a compaction; the future gets its report (None: the run ended first)."""
        future: asyncio.Future[CompactionReport | None] = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        return future

    def settle(self, report: CompactionReport | None) -> None:
        """Answer every pending request with `report`."""
        pending, self._pending = self._pending, []
        for future in pending:
            if not future.done():
                future.set_result(report)
