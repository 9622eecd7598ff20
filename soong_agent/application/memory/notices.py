"""What the memory extraction job (MEM-3) reports: rejections and failures, as notices.

A notice is logged (logger ``soong_agent.memory``), kept among the job's recent notices, and
held for the next run of its session started by this runtime, which records it as a
``memory_rejected`` (source ``extraction``) or non-fatal ``error`` event.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Any

from soong_agent.ports.events import ErrorEvent, MemoryRejected

log = logging.getLogger("soong_agent.memory")

NOTICES_KEPT = 200
"""The recent notices kept, and the notices held for one session, at most."""


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the job reports to a run of `session_id`: an event class and its fields."""

    session_id: str
    event: type[MemoryRejected] | type[ErrorEvent]
    fields: dict[str, Any]

    def line(self) -> str:
        if self.event is MemoryRejected:
            return (
                f"memory {self.fields['name']!r} not kept (extraction, session "
                f"{self.session_id}): {'; '.join(self.fields['reasons'])}"
            )
        return f"memory extraction (session {self.session_id}): {self.fields['message']}"


class Notices:
    """The job's notices: `recent` (newest last) and those not yet handed to a run."""

    def __init__(self) -> None:
        self.recent: deque[Notice] = deque(maxlen=NOTICES_KEPT)
        self._undelivered: dict[str, list[Notice]] = {}

    def add(
        self, session_id: str, event: type[MemoryRejected] | type[ErrorEvent], **fields: Any
    ) -> None:
        """Report `event` with `fields` to `session_id` (an error is never fatal)."""
        if event is ErrorEvent:
            fields.setdefault("fatal", False)
        notice = Notice(session_id, event, fields)
        self.recent.append(notice)
        undelivered = self._undelivered.setdefault(session_id, [])
        undelivered.append(notice)
        del undelivered[:-NOTICES_KEPT]
        log.warning("%s", notice.line())

    def take(self, session_id: str) -> list[Notice]:
        """The notices of `session_id` not handed to a run yet; they are handed now."""
        return self._undelivered.pop(session_id, [])
