"""A `Telemetry` that keeps what it is told, for assertions on what a runtime reports."""

from __future__ import annotations

import hashlib
import re

from soong_agent.adapters.inmemory.events import RecordingEventSink
from soong_agent.ports.events import RunEvent, ToolCallRequested, ToolResultEvent

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


def _hex(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


class _RunLog(RecordingEventSink):
    """One run's events (a `RecordingEventSink`) and the calls it has in progress."""

    def __init__(self) -> None:
        super().__init__()
        self.open_calls: set[str] = set()

    def emit(self, event: RunEvent) -> None:
        super().emit(event)
        if isinstance(event, ToolCallRequested):
            self.open_calls.add(event.call_id)
        elif isinstance(event, ToolResultEvent):
            self.open_calls.discard(event.call_id)


class RecordingTelemetry:
    """Keeps every run's events (`runs`, by run id), the trace contexts runs continue
    (`continued`), and what workers reported (`claims`, `depths`). Like the real adapter it
    ignores a malformed ``traceparent`` and makes a new trace for a submission outside one;
    its ids are derived from the run and call ids, so tests can predict them."""

    def __init__(self) -> None:
        self.runs: dict[str, _RunLog] = {}
        self.continued: dict[str, str] = {}
        self.claims: list[tuple[str, float]] = []
        self.depths: list[tuple[str, int]] = []
        self.closed = False
        self._submissions = 0

    def observer(self, session_id: str, run_id: str) -> RecordingEventSink:
        log = self.runs[run_id] = _RunLog()
        return log

    def continue_trace(self, run_id: str, trace_parent: str) -> None:
        if _TRACEPARENT.match(trace_parent) and not trace_parent.startswith("00-" + "0" * 32):
            self.continued[run_id] = trace_parent

    def trace_parent(self, *, run_id: str | None = None, call_id: str | None = None) -> str:
        log = self.runs.get(run_id or "")
        if log is not None and call_id in log.open_calls:
            trace_id = self.continued.get(run_id or "", "")[3:35] or _hex(run_id or "", 32)
            return f"00-{trace_id}-{_hex(f'{run_id}/{call_id}', 16)}-01"
        self._submissions += 1
        return f"00-{_hex(f'submission {self._submissions}', 32)}-{_hex('submit', 16)}-01"

    def run_claimed(self, *, worker: str, waited_s: float) -> None:
        self.claims.append((worker, waited_s))

    def queue_depth(self, *, worker: str, depth: int) -> None:
        self.depths.append((worker, depth))

    async def close(self) -> None:
        self.closed = True

    def events_of(self, run_id: str) -> list[RunEvent]:
        """The events the run `run_id` published, in order."""
        return list(self.runs[run_id].events)
