"""The sessions the extraction job (MEM-3) waits on to be idle, served by one timer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class IdleWaits:
    """The sessions waiting to be idle and when (loop time) they will be, oldest first.

    Every wait lasts the same (`memory.idle_seconds`, fixed for the job's life: a changed value
    would only take effect after the waits already running), so the deadlines come in the order
    of the entries and one timer, set for the first of them, serves all (a runtime serving
    thousands of sessions keeps a dict entry for each, not a timer). `on_idle(session_id)` is
    called on the loop for each session whose wait ended.
    """

    def __init__(self, on_idle: Callable[[str], None]) -> None:
        self._on_idle = on_idle
        self._due: dict[str, float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def sessions(self) -> list[str]:
        """The sessions whose wait is running, oldest first."""
        return list(self._due)

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._due

    def start(self, session_id: str, seconds: float) -> None:
        """(Re)start the wait of `session_id`: it becomes the newest."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        self._due.pop(session_id, None)  # a new wait goes to the end: the newest
        self._due[session_id] = at = loop.time() + seconds
        if self._timer is None:
            self._timer = loop.call_at(at, self._fire)

    def end(self, session_id: str) -> None:
        """The wait of `session_id` ends without it being idle (the timer finds the next
        one when it fires)."""
        self._due.pop(session_id, None)

    def close(self) -> None:
        """Every wait ends at once; none starts again."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due.clear()

    def _fire(self) -> None:
        """The first wait (or one after it) ended: report every session idle by now, and set
        the timer for the next wait to end."""
        self._timer = None
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        due = self._due
        while due:
            session_id, at = next(iter(due.items()))
            if at > now:
                self._timer = loop.call_at(at, self._fire)
                return
            del due[session_id]
            self._on_idle(session_id)
