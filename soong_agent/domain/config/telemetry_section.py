"""`[telemetry]` (OBS-1): OpenTelemetry traces and metrics of runs, sent over OTLP to the
operator's collector; off unless `enabled`. What is not set here comes from the standard
``OTEL_EXPORTER_OTLP_*``, ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` variables."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from soong_agent.domain.config.section import Section

OtlpProtocol = Literal["http/protobuf", "grpc"]


def _no_attributes() -> dict[str, str]:
    return {}


class TelemetryConfig(Section):
    """Where and how runs' traces and metrics are exported."""

    enabled: bool = False
    """Off by default: nothing of OpenTelemetry is imported and nothing is sent."""
    endpoint: str | None = None
    """The collector's OTLP base URL (``http://collector:4318`` for HTTP, ``http://collector:4317``
    for gRPC); unset: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and the per-signal variables), else
    localhost."""
    protocol: OtlpProtocol | None = None
    """``http/protobuf`` or ``grpc``; unset: ``OTEL_EXPORTER_OTLP_PROTOCOL``, else
    ``http/protobuf``."""
    service_name: str | None = None
    """The ``service.name`` resource attribute; unset: ``OTEL_SERVICE_NAME``, else
    ``soong-agent``."""
    resource_attributes: dict[str, str] = Field(default_factory=_no_attributes)
    """More resource attributes (``deployment.environment = "prod"``), over those of
    ``OTEL_RESOURCE_ATTRIBUTES``."""
    record_content: bool = False
    """Whether spans carry the text of messages, tool arguments and results (scrubbed of
    secrets like everything stored). Off: only sizes, names, counts and decisions."""

    @field_validator("endpoint")
    @classmethod
    def _an_url(cls, endpoint: str | None) -> str | None:
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise ValueError(f"an http:// or https:// URL, found {endpoint!r}")
        return endpoint
