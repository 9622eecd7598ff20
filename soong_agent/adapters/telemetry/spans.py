"""One run's events made spans and measurements (OBS-1), following the OpenTelemetry GenAI
semantic conventions.

Spans are built after the fact from the events' own times (`at`), so the loop never waits for
telemetry: `invoke_agent` for the run, `chat` for each model call (from `model_call_started` to
the first event that is not part of its answer), `execute_tool` for each tool call (from
`tool_call_requested` to its `tool_result`), `compaction` and `hook` spans, and a child run's
`invoke_agent` under the `execute_tool` span of the call that started it.

The events reach telemetry after the recorder scrubbed their texts of secrets; texts are put
on spans only with `record_content`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from soong_agent.adapters.telemetry.instruments import Instruments
from soong_agent.adapters.telemetry.steps import OPERATION, OpenCalls, StepSpans, nanos
from soong_agent.ports.events import (
    ChildStarted,
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
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolCallRequested,
    ToolResultEvent,
    UsageEvent,
)

log = logging.getLogger(__name__)

_DURING_CALL = (TextDeltaEvent, ThinkingDeltaEvent, UsageEvent, ModelRetry)
"""What a model call publishes while its answer streams: these do not end its `chat` span."""
_CUT_ANSWER = "the answer hit the output token limit"
_FINISH = {"completed": "stop", "failed": "error"}
"""The last answer's finish reason by the run's end (None: cut off, not finished)."""


def model_of(label: str) -> tuple[str, str]:
    """(provider, model) of a model label (``openai gpt-4o at http://…``); the base URL is
    left out of every attribute."""
    said = label.split(" at ", 1)[0].strip()
    provider, _, model = said.partition(" ")
    return provider or "unknown", model or said or "unknown"


@dataclass
class _Chat:
    span: Span
    started: float
    model: str
    first_token: bool = False
    text: list[str] = field(default_factory=list)
    ended_at: float | None = None


class RunSpans:
    """The `EventSink` of one run: its events become spans and measurements."""

    def __init__(
        self,
        *,
        tracer: Tracer,
        instruments: Instruments,
        shared: OpenCalls,
        session_id: str,
        run_id: str,
        parent: otel_context.Context,
        record_content: bool,
    ) -> None:
        self._tracer = tracer
        self._m = instruments
        self._shared = shared
        self._session_id = session_id
        self._run_id = run_id
        self._parent = parent
        self._content = record_content
        self._run: Span | None = None
        self._in_run: otel_context.Context | None = None
        self._agent = "soong-agent"
        self._provider, self._model = "unknown", "unknown"
        self._chat: _Chat | None = None
        self._steps = steps = StepSpans(
            tracer=tracer,
            instruments=instruments,
            shared=shared,
            run_id=run_id,
            record_content=record_content,
        )
        self._last_at = 0.0
        self._broken = False
        self._handlers: dict[type[Any], Callable[[Any], None]] = {
            RunStarted: self._started,
            ChildStarted: self._child,
            ModelCallStarted: self._model_call,
            TextDeltaEvent: self._text,
            ThinkingDeltaEvent: self._thinking,
            UsageEvent: self._usage,
            ModelRetry: self._retry,
            ToolCallRequested: self._tool_call,
            PermissionAsked: steps.asked,
            PermissionDecided: steps.decided,
            SandboxDenied: steps.sandbox_denied,
            NetworkDenied: steps.network_denied,
            ToolResultEvent: steps.tool_result,
            CompactionEvent: self._compaction,
            HookRan: steps.hook,
            HookFailed: steps.hook_failed,
            ErrorEvent: self._error,
            RunFinished: self._finished,
        }

    # --- the sink ---------------------------------------------------------------------------
    def emit(self, event: RunEvent) -> None:
        """Take one event of the run. It never raises into the run: a failure here is logged
        once, and the run's telemetry stops there (the run goes on)."""
        if self._broken:
            return
        try:
            self._take(event)
        except Exception:
            self._broken = True
            log.exception("telemetry of run %s stopped at a %s event", self._run_id, event.type)

    def _take(self, event: RunEvent) -> None:
        if self._run is None:
            self._open_run(event)
        chat = self._chat
        if chat is not None and chat.ended_at is None and not isinstance(event, _DURING_CALL):
            chat.ended_at = event.at  # the answer is complete: the call ended by now
            cut = isinstance(event, RunFinished) and event.status != "completed"
            if not cut:  # (a call the run's end cut off is not timed)
                self._m.duration.record(max(0.0, event.at - chat.started), self._model_attrs(chat))
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)
        self._last_at = event.at

    # --- the run ----------------------------------------------------------------------------
    def _open_run(self, event: RunEvent) -> None:
        parent = self._shared.continued.pop(self._run_id, None)
        if parent is None and isinstance(event, ChildStarted):
            call = self._shared.tools.get((event.parent_run_id, event.parent_call_id))
            if call is not None:
                parent = trace.set_span_in_context(call)
        span = self._tracer.start_span(
            "invoke_agent",
            context=parent if parent is not None else self._parent,
            start_time=nanos(event.at),
            attributes={
                OPERATION: "invoke_agent",
                "gen_ai.conversation.id": self._session_id,
                "soong_agent.run.id": self._run_id,
            },
        )
        self._run = span
        self._in_run = self._steps.under = trace.set_span_in_context(span)

    def _started(self, event: RunStarted) -> None:
        assert self._run is not None
        self._agent = event.agent or "soong-agent"
        self._provider, self._model = model_of(event.model)
        self._run.update_name(f"invoke_agent {self._agent}")
        attributes: dict[str, Any] = {
            "gen_ai.agent.name": self._agent,
            "gen_ai.provider.name": self._provider,
            "gen_ai.system": self._provider,
            "gen_ai.request.model": self._model,
            "soong_agent.run.resumed": event.resumed,
        }
        if self._content:
            attributes["gen_ai.input.messages"] = _messages("user", event.message)
        self._run.set_attributes(attributes)

    def _child(self, event: ChildStarted) -> None:
        if event.child_run_id == self._run_id:  # this run is the child
            assert self._run is not None
            self._run.set_attributes(
                {
                    "soong_agent.child.kind": event.kind,
                    "soong_agent.child.depth": event.depth,
                    "soong_agent.parent.run.id": event.parent_run_id,
                    "soong_agent.parent.call.id": event.parent_call_id,
                }
            )
            if self._content:
                self._run.set_attribute("soong_agent.child.task", event.task)
            return
        self._steps.child_started(event)

    def _finished(self, event: RunFinished) -> None:
        assert self._run is not None
        if self._chat is not None:
            self._end_chat(_FINISH.get(event.status) if event.reason != _CUT_ANSWER else "length")
        self._steps.end_all(event.at)
        u = event.usage
        attributes: dict[str, Any] = {
            "soong_agent.run.status": event.status,
            "gen_ai.usage.input_tokens": u.input_tokens
            + u.cache_read_tokens
            + u.cache_write_tokens,
            "gen_ai.usage.output_tokens": u.output_tokens,
        }
        if event.cost_usd is not None:
            attributes["soong_agent.cost_usd"] = event.cost_usd
        if self._content and event.reason:
            attributes["soong_agent.run.reason"] = event.reason
        self._run.set_attributes(attributes)
        if event.status == "failed":
            self._run.set_status(Status(StatusCode.ERROR, "failed"))
            self._run.set_attribute("error.type", "failed")
        self._run.end(end_time=nanos(event.at))
        self._m.runs.add(
            1, {"soong_agent.run.status": event.status, "gen_ai.agent.name": self._agent}
        )

    def _error(self, event: ErrorEvent) -> None:
        if event.fatal and self._run is not None:
            self._run.set_attribute("error.type", event.kind)

    # --- model calls ------------------------------------------------------------------------
    def _model_call(self, event: ModelCallStarted) -> None:
        if self._chat is not None:
            self._end_chat(None)
        span = self._tracer.start_span(
            f"chat {self._model}",
            context=self._in_run,
            kind=SpanKind.CLIENT,
            start_time=nanos(event.at),
            attributes={
                OPERATION: "chat",
                "gen_ai.provider.name": self._provider,
                "gen_ai.system": self._provider,
                "gen_ai.request.model": self._model,
                "gen_ai.conversation.id": self._session_id,
                "soong_agent.turn": event.turn,
                "soong_agent.messages": event.messages,
            },
        )
        self._chat = _Chat(span, event.at, self._model)

    def _first_piece(self, event: TextDeltaEvent | ThinkingDeltaEvent) -> _Chat | None:
        chat = self._chat
        if chat is None or chat.ended_at is not None:
            return None
        if not chat.first_token:
            chat.first_token = True
            self._m.first_token.record(max(0.0, event.at - chat.started), self._model_attrs(chat))
        return chat

    def _text(self, event: TextDeltaEvent) -> None:
        chat = self._first_piece(event)
        if chat is not None and self._content:
            chat.text.append(event.text)

    def _thinking(self, event: ThinkingDeltaEvent) -> None:
        self._first_piece(event)

    def _retry(self, event: ModelRetry) -> None:
        if self._chat is not None:
            self._chat.span.add_event(
                "retry",
                {"soong_agent.retry.kind": event.kind, "soong_agent.retry.attempt": event.attempt},
                timestamp=nanos(event.at),
            )
            if event.restarted:
                self._chat.text.clear()

    def _tool_call(self, event: ToolCallRequested) -> None:
        if self._chat is not None:
            self._end_chat("tool_call")
        self._steps.tool_call(event)

    def _compaction(self, event: CompactionEvent) -> None:
        self._steps.compaction(event, self._last_at or event.at)

    def _usage(self, event: UsageEvent) -> None:
        u = event.usage
        _provider, model = model_of(event.model)
        base = {OPERATION: "chat", "gen_ai.provider.name": _provider, "gen_ai.request.model": model}
        inputs = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
        for kind, count in (
            ("input", inputs),
            ("output", u.output_tokens),
            ("cache_read", u.cache_read_tokens),
            ("cache_write", u.cache_write_tokens),
        ):
            if count or kind in ("input", "output"):
                self._m.tokens.record(count, {**base, "gen_ai.token.type": kind})
        if event.cost_usd is not None:
            self._m.cost.add(event.cost_usd, {"gen_ai.request.model": model})
        chat = self._chat  # (usage outside a call, an MCP server's sampling, is counted only)
        if chat is not None and chat.ended_at is None:
            chat.span.set_attributes(
                {
                    "gen_ai.usage.input_tokens": inputs,
                    "gen_ai.usage.output_tokens": u.output_tokens,
                    "gen_ai.usage.cache_read.input_tokens": u.cache_read_tokens,
                    "gen_ai.usage.cache_creation.input_tokens": u.cache_write_tokens,
                    "soong_agent.usage.estimated": u.estimated,
                }
            )
            if event.cost_usd is not None:
                chat.span.set_attribute("soong_agent.cost_usd", event.cost_usd)

    def _end_chat(self, finish: str | None) -> None:
        chat, self._chat = self._chat, None
        assert chat is not None
        end = chat.ended_at if chat.ended_at is not None else self._last_at
        if finish is not None:
            chat.span.set_attribute("gen_ai.response.finish_reasons", [finish])
        if finish == "error":
            chat.span.set_status(Status(StatusCode.ERROR, "the run failed"))
        if self._content and chat.text:
            chat.span.set_attribute(
                "gen_ai.output.messages", _messages("assistant", "".join(chat.text))
            )
        chat.span.end(end_time=nanos(end))

    def _model_attrs(self, chat: _Chat) -> dict[str, str]:
        return {
            OPERATION: "chat",
            "gen_ai.provider.name": self._provider,
            "gen_ai.request.model": chat.model,
        }

    # --- tool calls -------------------------------------------------------------------------


def _messages(role: str, text: str) -> str:
    """A message as the GenAI conventions' `gen_ai.*.messages` JSON."""
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": text}]}])
