"""OTLP receivers on loopback (OBS-1 tests). `OtlpReceiver` takes what an OpenTelemetry
exporter POSTs to `/v1/traces` and `/v1/metrics` (OTLP/HTTP), `GrpcOtlpReceiver` what it sends
to the collector's gRPC services; both decode the protobuf payloads with `opentelemetry-proto`
and keep the raw bodies (to look for text that must not be sent) and the decoded spans and
data points. Like a collector, the HTTP one refuses a body that is not a valid export request
(400), another content type (415) and any other path (404)."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def plain(value: AnyValue) -> Any:
    """An OTLP attribute value as Python."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [plain(v) for v in value.array_value.values]
    if kind is None:
        return None
    return getattr(value, kind)


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status_code: int
    events: list[str]
    resource: dict[str, Any]
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class ReceivedPoint:
    metric: str
    attributes: dict[str, Any]
    value: float
    """A sum's or gauge's value; a histogram's sum."""
    count: int
    """A histogram's count (1 for a sum or a gauge)."""


@dataclass
class Received:
    bodies: list[bytes] = field(default_factory=list)
    spans: list[ReceivedSpan] = field(default_factory=list)
    points: list[ReceivedPoint] = field(default_factory=list)


class OtlpReceiver:
    """`endpoint` is the base URL to configure (`[telemetry] endpoint`)."""

    def __init__(self) -> None:
        self.received = Received()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(size)
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.headers.get("Content-Type") != "application/x-protobuf":
                    self._answer(415, b"")
                    return
                try:
                    if self.path == "/v1/traces":
                        receiver._traces(body)
                        reply = ExportTraceServiceResponse().SerializeToString()
                    elif self.path == "/v1/metrics":
                        receiver._metrics(body)
                        reply = ExportMetricsServiceResponse().SerializeToString()
                    else:
                        self._answer(404, b"")
                        return
                except DecodeError:
                    self._answer(400, b"")
                    return
                self._answer(200, reply)

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # --- decoding ------------------------------------------------------------------------------
    def _traces(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: plain(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    spans.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes={a.key: plain(a.value) for a in span.attributes},
                            status_code=span.status.code,
                            events=[e.name for e in span.events],
                            resource=resource,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                        )
                    )
        with self._lock:
            self.received.bodies.append(body)
            self.received.spans.extend(spans)

    def _metrics(self, body: bytes) -> None:
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)
        points = []
        for resource_metrics in request.resource_metrics:
            for scope in resource_metrics.scope_metrics:
                for metric in scope.metrics:
                    kind = metric.WhichOneof("data")
                    for p in getattr(metric, kind).data_points:
                        attributes = {a.key: plain(a.value) for a in p.attributes}
                        if kind == "histogram":
                            value, count = p.sum, p.count
                        else:
                            value = p.as_double if p.HasField("as_double") else p.as_int
                            count = 1
                        points.append(ReceivedPoint(metric.name, attributes, value, count))
        with self._lock:
            self.received.bodies.append(body)
            self.received.points.extend(points)

    # --- what tests look at ----------------------------------------------------------------------
    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.received.spans)

    @property
    def points(self) -> list[ReceivedPoint]:
        with self._lock:
            return list(self.received.points)

    @property
    def bodies(self) -> list[bytes]:
        with self._lock:
            return list(self.received.bodies)

    def metric(self, name: str, **attributes: Any) -> list[ReceivedPoint]:
        """The data points of `name` whose attributes include `attributes`, from the last
        export that had any (metrics are cumulative: each export repeats the totals)."""
        found = [
            p
            for p in self.points
            if p.metric == name and all(p.attributes.get(k) == v for k, v in attributes.items())
        ]
        latest: dict[tuple[tuple[str, Any], ...], ReceivedPoint] = {}
        for p in found:
            key = tuple(sorted((k, str(v)) for k, v in p.attributes.items()))
            latest[key] = p
        return list(latest.values())


class GrpcOtlpReceiver(OtlpReceiver):
    """The same, as the collector's OTLP/gRPC services; `endpoint` is ``http://127.0.0.1:PORT``."""

    def __init__(self) -> None:  # (not the HTTP server: a gRPC one)
        from concurrent.futures import ThreadPoolExecutor

        import grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

        self.received = Received()
        self._lock = threading.Lock()
        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request: Any, context: Any) -> ExportTraceServiceResponse:
                receiver._traces(request.SerializeToString())
                return ExportTraceServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request: Any, context: Any) -> ExportMetricsServiceResponse:
                receiver._metrics(request.SerializeToString())
                return ExportMetricsServiceResponse()

        self._grpc = grpc.server(ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self._grpc)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self._grpc)
        port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._grpc.start()
        self.endpoint = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self._grpc.stop(grace=None)
