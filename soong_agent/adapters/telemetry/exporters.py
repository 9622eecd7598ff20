"""The OpenTelemetry SDK set up from `[telemetry]` (OBS-1): a resource, OTLP exporters over
HTTP/protobuf or gRPC, and batching off the run's path (a `BatchSpanProcessor` and a
`PeriodicExportingMetricReader`, each exporting from a thread of its own)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from soong_agent.adapters.telemetry.otel import Export, OtelTelemetry
from soong_agent.domain.config.telemetry_section import TelemetryConfig

DEFAULT_SERVICE = "soong-agent"
HTTP, GRPC = "http/protobuf", "grpc"
_LOCAL = {HTTP: "http://localhost:4318", GRPC: "http://localhost:4317"}


def protocol_of(config: TelemetryConfig, env: Mapping[str, str]) -> str:
    """`telemetry.protocol`, else ``OTEL_EXPORTER_OTLP_PROTOCOL``, else HTTP/protobuf; ValueError
    for another value of the variable."""
    chosen = config.protocol or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or HTTP
    if chosen not in (HTTP, GRPC):
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL: expected http/protobuf or grpc, found {chosen!r}"
        )
    return chosen


def endpoints_of(config: TelemetryConfig, env: Mapping[str, str], protocol: str) -> tuple[str, str]:
    """Where traces and metrics go: the per-signal variables, else `telemetry.endpoint` (or
    ``OTEL_EXPORTER_OTLP_ENDPOINT``) with the signal's path for HTTP, else localhost."""
    base = (config.endpoint or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or _LOCAL[protocol]).rstrip(
        "/"
    )
    if protocol == GRPC:
        traces = metrics = base
    else:
        traces, metrics = f"{base}/v1/traces", f"{base}/v1/metrics"
    if config.endpoint is None:  # a setting in config.toml wins over the variables
        traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or traces
        metrics = env.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or metrics
    return traces, metrics


def resource_of(config: TelemetryConfig) -> Resource:
    """``OTEL_RESOURCE_ATTRIBUTES`` and ``OTEL_SERVICE_NAME`` (read by `Resource.create`), under
    `telemetry.resource_attributes` and `telemetry.service_name`; ``soong-agent`` when nothing
    names the service."""
    attributes: dict[str, Any] = dict(config.resource_attributes)
    if config.service_name is not None:
        attributes[SERVICE_NAME] = config.service_name
    resource = Resource.create(attributes)
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE}))
    return resource


def _exporters(protocol: str, traces: str, metrics: str) -> tuple[SpanExporter, MetricExporter]:
    if protocol == GRPC:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetrics,
        )
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpans,
        )

        return GrpcSpans(endpoint=traces), GrpcMetrics(endpoint=metrics)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=traces), OTLPMetricExporter(endpoint=metrics)


def configured_telemetry(
    config: TelemetryConfig,
    env: Mapping[str, str],
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
) -> OtelTelemetry:
    """Telemetry exporting as `config` and `env` say; a provider the application handed in is
    used as it is (and not shut down by the runtime). ValueError for a bad variable."""
    protocol = protocol_of(config, env)
    traces, metrics = endpoints_of(config, env, protocol)
    resource = resource_of(config)
    owned: list[Any] = []
    spans_out = metrics_out = None
    if tracer_provider is None or meter_provider is None:
        spans_out, metrics_out = _exporters(protocol, traces, metrics)
    if tracer_provider is None:
        assert spans_out is not None
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(BatchSpanProcessor(spans_out))
        owned.append(tracer_provider.shutdown)  # (which flushes first)
    if meter_provider is None:
        assert metrics_out is not None
        meter_provider = MeterProvider(
            resource=resource, metric_readers=[PeriodicExportingMetricReader(metrics_out)]
        )
        owned.append(meter_provider.shutdown)
    attributes = {str(k): str(v) for k, v in resource.attributes.items()}
    return OtelTelemetry(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        record_content=config.record_content,
        export=Export(protocol, traces, metrics, attributes) if owned else None,
        owned=owned,
    )


def given_telemetry(
    tracer_provider: Any, meter_provider: Any, *, record_content: bool
) -> OtelTelemetry:
    """Telemetry through an application's own providers (`AgentRuntime(tracer_provider=…)`),
    with telemetry otherwise off in the config: the one it did not hand in is OpenTelemetry's
    global one (a no-op until the application sets one)."""
    from opentelemetry import metrics, trace

    return OtelTelemetry(
        tracer_provider=tracer_provider or trace.get_tracer_provider(),
        meter_provider=meter_provider or metrics.get_meter_provider(),
        record_content=record_content,
    )
