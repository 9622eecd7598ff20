"""`OtelTelemetry`: the `Telemetry` port over OpenTelemetry's API (OBS-1)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from soong_agent.adapters.telemetry.instruments import Instruments
from soong_agent.adapters.telemetry.spans import RunSpans
from soong_agent.adapters.telemetry.steps import OpenCalls

SCOPE = "soong_agent"
_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass(frozen=True, slots=True)
class Export:
    """Where this telemetry sends what it records (None on `OtelTelemetry.export` when the
    application handed in providers of its own)."""

    protocol: str
    traces_endpoint: str
    metrics_endpoint: str
    resource: dict[str, str] = field(default_factory=dict)


class OtelTelemetry:
    """Traces and metrics of runs through the given OpenTelemetry providers.

    `owned`: what this telemetry set up itself (its providers' `force_flush` and `shutdown`,
    called by `close`, off the event loop); providers an application handed in are its own to
    flush and shut down."""

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider,
        meter_provider: MeterProvider,
        record_content: bool = False,
        export: Export | None = None,
        owned: Sequence[Callable[[], object]] = (),
    ) -> None:
        self.record_content = record_content
        self.export = export
        self._tracer = tracer_provider.get_tracer(SCOPE)
        self._instruments = Instruments(meter_provider.get_meter(SCOPE))
        self._shared = OpenCalls()
        self._owned = list(owned)

    def observer(self, session_id: str, run_id: str) -> RunSpans:
        return RunSpans(
            tracer=self._tracer,
            instruments=self._instruments,
            shared=self._shared,
            session_id=session_id,
            run_id=run_id,
            parent=otel_context.get_current(),
            record_content=self.record_content,
        )

    def continue_trace(self, run_id: str, trace_parent: str) -> None:
        parent = _PROPAGATOR.extract({"traceparent": trace_parent})
        if trace.get_current_span(parent).get_span_context().is_valid:
            self._shared.continued[run_id] = parent

    def trace_parent(self, *, run_id: str | None = None, call_id: str | None = None) -> str:
        carrier: dict[str, str] = {}
        call = self._shared.tools.get((run_id, call_id)) if run_id and call_id else None
        if call is not None:
            _PROPAGATOR.inject(carrier, trace.set_span_in_context(call))
        elif trace.get_current_span().get_span_context().is_valid:
            _PROPAGATOR.inject(carrier)
        else:  # a trace of its own, begun by the submission
            span = self._tracer.start_span(
                "submit_run", attributes={"soong_agent.run.queued": True}
            )
            span.end()
            _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
        return carrier.get("traceparent", "")

    def run_claimed(self, *, worker: str, waited_s: float) -> None:
        self._instruments.claim_latency.record(max(0.0, waited_s), {"soong_agent.worker": worker})

    def queue_depth(self, *, worker: str, depth: int) -> None:
        self._instruments.queue_depth.set(depth, {"soong_agent.worker": worker})

    async def close(self) -> None:
        owned, self._owned = self._owned, []
        for stop in owned:
            await asyncio.to_thread(stop)
