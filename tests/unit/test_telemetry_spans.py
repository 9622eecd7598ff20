"""Spans and measurements of run events the scripted runs do not make (OBS-1): compactions,
hooks, sandbox and network denials, asked permissions, a failed run and a retried call, each fed
to `OtelTelemetry` over the OpenTelemetry SDK's in-memory exporter and reader."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from soong_agent.adapters.telemetry import OtelTelemetry
from soong_agent.adapters.telemetry.steps import permission_source
from soong_agent.ports.events import (
    CompactionEvent,
    ErrorEvent,
    HookFailed,
    HookRan,
    ModelCallStarted,
    ModelRetry,
    NetworkDenied,
    PermissionAsked,
    PermissionDecided,
    RunEvent,
    RunFinished,
    RunStarted,
    SandboxDenied,
    ToolCallRequested,
    ToolResultEvent,
    UsageEvent,
)
from soong_agent.ports.streaming import Usage

T0 = 1_700_000_000.0


class Kit:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.telemetry = OtelTelemetry(
            tracer_provider=tracer_provider,
            meter_provider=MeterProvider(metric_readers=[self.reader]),
        )
        self._seq = 0

    def run(self, *events: tuple[type[Any], dict[str, Any]]) -> None:
        sink = self.telemetry.observer("ses-1", "run-1")
        for cls, fields in events:
            self._seq += 1
            event: RunEvent = cls(
                seq=self._seq, run_id="run-1", session_id="ses-1", at=T0 + self._seq, **fields
            )
            sink.emit(event)

    def named(self, name: str) -> ReadableSpan:
        [span] = [s for s in self.spans.get_finished_spans() if s.name == name]
        return span

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return [
            (dict(p.attributes or {}), getattr(p, "value", getattr(p, "count", None)))
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == metric
            for p in m.data.data_points
        ]


START = (
    RunStarted,
    {"project_dir": "/p", "model": "anthropic claude-x at https://h", "message": "m"},
)


def test_compaction_hook_and_denials_become_spans_and_counts() -> None:
    kit = Kit()
    kit.run(
        START,
        (ModelCallStarted, {"turn": 1, "messages": 3}),
        (
            ModelRetry,
            {
                "kind": "rate_limit",
                "reason": "429",
                "attempt": 1,
                "max_attempts": 3,
                "delay_s": 1.0,
            },
        ),
        (ToolCallRequested, {"call_id": "c1", "name": "run_command", "arguments": "{}"}),
        (
            PermissionAsked,
            {"call_id": "c1", "tool": "run_command", "summary": "s", "session_scope": "x"},
        ),
        (
            PermissionDecided,
            {
                "call_id": "c1",
                "tool": "run_command",
                "decision": "allow_once",
                "reason": "approved",
            },
        ),
        (
            SandboxDenied,
            {
                "call_id": "c1",
                "name": "run_command",
                "kind": "write",
                "mechanism": "landlock",
                "error": "EACCES",
                "rule": "r",
            },
        ),
        (
            NetworkDenied,
            {
                "call_id": "c1",
                "name": "run_command",
                "host": "h",
                "port": 443,
                "command": "curl",
                "reason": "r",
                "mechanism": "proxy",
            },
        ),
        (
            ToolResultEvent,
            {"call_id": "c1", "name": "run_command", "content": "x", "is_error": True},
        ),
        (CompactionEvent, {"strategy": "summary", "tokens_before": 900, "tokens_after": 200}),
        (
            HookRan,
            {
                "hook": "pre_tool_use",
                "command": "check.sh",
                "exit_code": 0,
                "duration_ms": 500.0,
                "decision": "allow",
            },
        ),
        (HookFailed, {"hook": "stop", "command": "bad.sh", "reason": "timed out"}),
        (ErrorEvent, {"kind": "provider", "message": "boom", "fatal": True}),
        (RunFinished, {"status": "failed", "reason": "boom"}),
    )
    run = kit.named("invoke_agent soong-agent")
    assert run.status.status_code == StatusCode.ERROR
    assert run.attributes is not None and run.attributes["error.type"] == "failed"
    assert run.attributes["gen_ai.provider.name"] == "anthropic"
    assert run.attributes["gen_ai.request.model"] == "claude-x"
    chat = kit.named("chat claude-x")
    assert [e.name for e in chat.events] == ["retry"]
    tool = kit.named("execute_tool run_command")
    assert tool.attributes is not None
    assert tool.attributes["soong_agent.permission.source"] == "user"  # it was asked
    assert [e.name for e in tool.events] == ["sandbox_denied", "sandbox_denied"]
    assert tool.status.status_code == StatusCode.ERROR
    compaction = kit.named("compaction")
    assert compaction.attributes is not None
    assert compaction.attributes["soong_agent.compaction.tokens_after"] == 200
    hook = kit.named("hook pre_tool_use")
    assert hook.end_time is not None and hook.start_time is not None
    assert hook.end_time - hook.start_time == 500_000_000  # its duration, ending at its event
    assert kit.named("hook stop").status.status_code == StatusCode.ERROR
    parent = run.context.span_id
    assert all(
        s.parent is not None and s.parent.span_id == parent
        for s in kit.spans.get_finished_spans()
        if s is not run
    )
    assert sorted(
        a["soong_agent.denial.kind"] for a, _ in kit.points("soong_agent.sandbox.denials")
    ) == [
        "network",
        "write",
    ]
    assert kit.points("soong_agent.compactions") == [
        (
            {
                "soong_agent.compaction.strategy": "summary",
                "soong_agent.compaction.trigger": "budget",
            },
            1,
        )
    ]
    [(runs, count)] = kit.points("soong_agent.runs")
    assert runs["soong_agent.run.status"] == "failed" and count == 1


def test_a_bug_in_telemetry_never_reaches_the_run(caplog: pytest.LogCaptureFixture) -> None:
    kit = Kit()
    sink = kit.telemetry.observer("ses-1", "run-1")
    sink._run = object()  # type: ignore[attr-defined]  # (a broken state: every call fails)
    for _ in range(2):
        sink.emit(
            RunStarted(
                seq=1,
                run_id="run-1",
                session_id="ses-1",
                at=T0,
                project_dir="/p",
                model="m",
                message="x",
            )
        )
    assert [r.message for r in caplog.records].count(
        "telemetry of run run-1 stopped at a run_started event"
    ) == 1  # said once; the run goes on


@pytest.mark.parametrize(
    ("reason", "asked", "source"),
    [
        ("approved", True, "user"),
        ("sandbox: writes outside the project", False, "sandbox"),
        ("a pre_tool_use hook denied it", False, "hook"),
        ("allowed for this session", False, "session_grant"),
        ("rule permissions.deny: run_command(rm:*)", False, "rule"),
        ("plan mode allows only reading", False, "mode"),
        ("no approval callback; permissions.write_without_callback = 'deny'", False, "no_approver"),
        ("read-only tool", False, "policy"),
    ],
)
def test_who_decided_a_call(reason: str, asked: bool, source: str) -> None:
    assert permission_source(reason, asked) == source


def test_usage_outside_a_model_call_is_counted_but_not_put_on_the_last_chat() -> None:
    kit = Kit()
    usage = Usage(input_tokens=10, output_tokens=2)
    kit.run(
        START,
        (ModelCallStarted, {"turn": 1, "messages": 1}),
        (UsageEvent, {"model": "anthropic claude-x", "usage": usage}),
        (ToolCallRequested, {"call_id": "c1", "name": "mcp__s__t", "arguments": "{}"}),
        # an MCP server's sampling request, answered during the tool call
        (UsageEvent, {"model": "openai sampler", "usage": Usage(input_tokens=500)}),
        (ToolResultEvent, {"call_id": "c1", "name": "mcp__s__t", "content": "x"}),
        (RunFinished, {"status": "completed"}),
    )
    chat = kit.named("chat claude-x")
    assert chat.attributes is not None and chat.attributes["gen_ai.usage.input_tokens"] == 10
    inputs = {
        a["gen_ai.request.model"]: v
        for a, v in kit.points("gen_ai.client.token.usage")
        if a["gen_ai.token.type"] == "input"
    }
    assert inputs == {"claude-x": 1, "sampler": 1}  # one call of each (histogram counts)
