"""The spans of a run's steps besides its model calls (OBS-1): `execute_tool` for each tool
call (with its permission decision, who made it, and the sandbox's refusals), `compaction` and
`hook` spans; and what they count."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from soong_agent.adapters.telemetry.instruments import Instruments
from soong_agent.ports.events import (
    ChildStarted,
    CompactionEvent,
    HookFailed,
    HookRan,
    NetworkDenied,
    PermissionAsked,
    PermissionDecided,
    SandboxDenied,
    ToolCallRequested,
    ToolResultEvent,
)

OPERATION = "gen_ai.operation.name"


def nanos(at: float) -> int:
    """An event's time (seconds since the epoch) as OpenTelemetry's nanoseconds."""
    return int(at * 1e9)


@dataclass
class OpenCalls:
    """The spans that outlive one run's observer, shared by the runs of one telemetry: tool
    calls in progress (a child run started by one becomes its child) and the trace contexts
    queued runs continue."""

    tools: dict[tuple[str, str], Span] = field(default_factory=dict)
    continued: dict[str, otel_context.Context] = field(default_factory=dict)


@dataclass
class ToolCall:
    span: Span
    name: str
    decision: str = "none"
    asked: bool = False


def permission_source(reason: str, asked: bool) -> str:
    """Who decided a call (the reason's kind): the user asked, the sandbox's review, a hook,
    a session grant, a permission rule, the permission mode, else the default policy."""
    if asked:
        return "user"
    text = reason.lower()
    for marker, source in (
        ("sandbox", "sandbox"),
        ("hook", "hook"),
        ("for this session", "session_grant"),
        ("grant", "session_grant"),
        ("rule", "rule"),
        ("permissions.allow", "rule"),
        ("permissions.deny", "rule"),
        ("mode", "mode"),
        ("callback", "no_approver"),
    ):
        if marker in text:
            return source
    return "policy"


class StepSpans:
    """The tool calls, compactions and hooks of one run, as spans under `under` (its
    `invoke_agent` span, set when that starts)."""

    def __init__(
        self,
        *,
        tracer: Tracer,
        instruments: Instruments,
        shared: OpenCalls,
        run_id: str,
        record_content: bool,
    ) -> None:
        self._tracer = tracer
        self._m = instruments
        self._shared = shared
        self._run_id = run_id
        self._content = record_content
        self.under: otel_context.Context | None = None
        self.tools: dict[str, ToolCall] = {}

    def tool_call(self, event: ToolCallRequested) -> None:
        attributes: dict[str, Any] = {
            OPERATION: "execute_tool",
            "gen_ai.tool.name": event.name,
            "gen_ai.tool.call.id": event.call_id,
            "gen_ai.tool.type": "function",
        }
        if self._content:
            attributes["gen_ai.tool.call.arguments"] = event.arguments
        span = self._tracer.start_span(
            f"execute_tool {event.name}",
            context=self.under,
            start_time=nanos(event.at),
            attributes=attributes,
        )
        self.tools[event.call_id] = ToolCall(span, event.name)
        self._shared.tools[(self._run_id, event.call_id)] = span

    def asked(self, event: PermissionAsked) -> None:
        tool = self.tools.get(event.call_id)
        if tool is not None:
            tool.asked = True
            tool.span.set_attribute("soong_agent.permission.asked", True)

    def decided(self, event: PermissionDecided) -> None:
        tool = self.tools.get(event.call_id)
        if tool is None:
            return
        tool.decision = event.decision
        tool.span.set_attributes(
            {
                "soong_agent.permission.decision": event.decision,
                "soong_agent.permission.source": permission_source(event.reason, tool.asked),
                "soong_agent.permission.reason": event.reason,
            }
        )

    def sandbox_denied(self, event: SandboxDenied) -> None:
        self.denied(event.call_id, event.at, event.kind, event.mechanism)

    def network_denied(self, event: NetworkDenied) -> None:
        self.denied(event.call_id, event.at, "network", event.mechanism)

    def denied(self, call_id: str, at: float, kind: str, mechanism: str) -> None:
        self._m.sandbox_denials.add(
            1, {"soong_agent.denial.kind": kind, "soong_agent.sandbox.mechanism": mechanism}
        )
        tool = self.tools.get(call_id)
        if tool is not None:
            tool.span.add_event(
                "sandbox_denied",
                {"soong_agent.denial.kind": kind, "soong_agent.sandbox.mechanism": mechanism},
                timestamp=nanos(at),
            )

    def tool_result(self, event: ToolResultEvent) -> None:
        tool = self.tools.get(event.call_id)
        if tool is None:
            return
        if self._content:
            tool.span.set_attribute("gen_ai.tool.call.result", event.content)
        self.end_tool(event.call_id, event.at, error="tool_error" if event.is_error else None)

    def end_tool(self, call_id: str, at: float, *, error: str | None) -> None:
        tool = self.tools.pop(call_id)
        self._shared.tools.pop((self._run_id, call_id), None)
        if error is not None:
            tool.span.set_attribute("error.type", error)
            tool.span.set_status(Status(StatusCode.ERROR, error))
        tool.span.end(end_time=nanos(at))
        self._m.tool_calls.add(
            1, {"gen_ai.tool.name": tool.name, "soong_agent.permission.decision": tool.decision}
        )

    def compaction(self, event: CompactionEvent, start: float) -> None:
        """A compaction's span; `start`: when the event before it happened (no event marks
        a compaction's start)."""
        span = self._tracer.start_span(
            "compaction",
            context=self.under,
            start_time=nanos(start),
            attributes={
                "soong_agent.compaction.strategy": event.strategy,
                "soong_agent.compaction.trigger": event.trigger,
                "soong_agent.compaction.tokens_before": event.tokens_before,
                "soong_agent.compaction.tokens_after": event.tokens_after,
            },
        )
        span.end(end_time=nanos(event.at))
        self._m.compactions.add(
            1,
            {
                "soong_agent.compaction.strategy": event.strategy,
                "soong_agent.compaction.trigger": event.trigger,
            },
        )

    def hook(self, event: HookRan) -> None:
        attributes: dict[str, Any] = {
            "soong_agent.hook.event": event.hook,
            "soong_agent.hook.decision": event.decision,
        }
        if event.exit_code is not None:
            attributes["soong_agent.hook.exit_code"] = event.exit_code
        if self._content:
            attributes["soong_agent.hook.command"] = event.command
        span = self._tracer.start_span(
            f"hook {event.hook}",
            context=self.under,
            start_time=nanos(event.at - event.duration_ms / 1000),
            attributes=attributes,
        )
        span.end(end_time=nanos(event.at))

    def hook_failed(self, event: HookFailed) -> None:
        span = self._tracer.start_span(
            f"hook {event.hook}",
            context=self.under,
            start_time=nanos(event.at),
            attributes={"soong_agent.hook.event": event.hook, "error.type": "hook_failed"},
        )
        span.set_status(Status(StatusCode.ERROR, "hook_failed"))
        span.end(end_time=nanos(event.at))

    def child_started(self, event: ChildStarted) -> None:
        """A child run this run started: named on the span of the call that started it."""
        tool = self.tools.get(event.parent_call_id)
        if tool is not None:
            tool.span.set_attributes(
                {
                    "soong_agent.child.run.id": event.child_run_id,
                    "soong_agent.child.kind": event.kind,
                }
            )

    def end_all(self, at: float) -> None:
        """End the calls the run's end cut off (a synthesised result would have ended them)."""
        for call_id in list(self.tools):
            self.end_tool(call_id, at, error="cancelled")
