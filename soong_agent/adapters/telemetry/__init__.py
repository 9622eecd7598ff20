"""OpenTelemetry traces and metrics of runs (OBS-1), built from their events. The only package
that imports `opentelemetry`; imported only when `[telemetry] enabled` or an application hands
the SDK providers of its own."""

from soong_agent.adapters.telemetry.otel import OtelTelemetry

__all__ = ["OtelTelemetry"]
