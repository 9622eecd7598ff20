"""The telemetry port (OBS-1): what turns runs into traces and metrics for an operator's tools.

Telemetry watches a run's events (the ones its recorder publishes, secrets already scrubbed),
so the loop itself knows nothing of it; a runtime with telemetry off has none at all and pays
nothing. A run queued for a worker carries the trace context of whoever queued it (a W3C
``traceparent``), so every attempt of the run, on whichever worker or host, joins one trace.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from soong_agent.ports.events import EventSink


@runtime_checkable
class Telemetry(Protocol):
    """Traces and metrics of the runs of one runtime. Every method is cheap and never blocks:
    exporting happens off the loop's path."""

    def observer(self, session_id: str, run_id: str) -> EventSink:
        """The sink that receives every event of the run `run_id`, as it is published, from its
        first event to its `run_finished`. Called once per run, when it is put together (in
        the task that starts it: an application's current span is the run's parent)."""
        ...

    def continue_trace(self, run_id: str, trace_parent: str) -> None:
        """The run `run_id`, about to start, belongs to the trace `trace_parent` names (a W3C
        ``traceparent`` stored with a queued run): its span becomes a child of that one. A
        malformed value is ignored (the run starts a trace of its own)."""
        ...

    def trace_parent(self, *, run_id: str | None = None, call_id: str | None = None) -> str:
        """The ``traceparent`` a run queued now carries: the span of the tool call `call_id`
        of run `run_id` when that call is in progress here (an orchestrator dispatching a pool
        worker), else the caller's current span, else a new ``submit_run`` span's."""
        ...

    def run_claimed(self, *, worker: str, waited_s: float) -> None:
        """A worker claimed a queued run `waited_s` seconds after it was submitted."""
        ...

    def queue_depth(self, *, worker: str, depth: int) -> None:
        """How many runs the queue holds waiting, as a worker saw it."""
        ...

    async def close(self) -> None:
        """Export what is pending and stop (what this adapter set up itself only)."""
        ...
