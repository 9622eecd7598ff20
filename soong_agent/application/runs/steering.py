"""Steering a run that is stuck, and stopping it at a budget (the loop's guard rails).

After each turn the loop hands it to `Steering.after_turn`: the domain's `StuckDetector` decides,
and this carries it out on the active path — a reminder message to the model, then pruning of
the looping span (the pruned messages stay in the session store; the path continues from a
one-paragraph note of what was tried), then a stop with status ``stuck``. Before each turn,
`Steering.spent` says whether a budget (`RunLimits`) is used up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.domain.run_limits import RunLimits
from soong_agent.domain.stuck import (
    CallTrace,
    Finding,
    Intervention,
    StuckDetector,
    StuckSettings,
    TurnTrace,
    call_signature,
    digest,
    loop_summary,
)
from soong_agent.ports.events import BudgetExhausted, StuckDetected
from soong_agent.ports.messages import Message, TextBlock, ToolCallBlock, ToolResultBlock
from soong_agent.ports.streaming import Usage

ERROR_LINE_CHARS = 200
_SPANS_KEPT = 64


@dataclass(slots=True)
class _Span:
    """The messages one turn added to the active path, by id, and its calls."""

    index: int
    ids: tuple[str, ...]
    calls: tuple[CallTrace, ...]


class Steering:
    """One run's stuck detection and budgets."""

    def __init__(self, *, stuck: StuckSettings, limits: RunLimits, started: float) -> None:
        self._detector = StuckDetector(stuck)
        self.limits = limits
        self._started = started
        self._spans: list[_Span] = []

    # --- budgets ----------------------------------------------------------------------------
    def budget_spent(
        self,
        rec: RunRecorder,
        usage: Usage,
        cost_usd: float | None,
        now: float,
        *,
        out_of_time: bool = False,
    ) -> str | None:
        """The reason a budget is used up (recorded as an event), or None while all remain.
        `out_of_time`: a model call was cut off by the wall-time budget."""
        tokens = (
            usage.input_tokens
            + usage.output_tokens
            + usage.cache_read_tokens
            + usage.cache_write_tokens
        )
        elapsed_ms = (now - self._started) * 1000
        spent = self.limits.spent(cost_usd=cost_usd, tokens=tokens, elapsed_ms=elapsed_ms)
        if spent is None and out_of_time and self.limits.max_wall_ms is not None:
            spent = ("max_wall_ms", f"time budget reached: {self.limits.max_wall_ms / 1000:.1f} s")
        if spent is None:
            return None
        budget, reason = spent
        rec.event(BudgetExhausted, budget=budget, reason=reason)
        return reason

    def time_left(self, now: Callable[[], float]) -> float | None:
        """Seconds the wall-time budget leaves for the next model call (None: no cap, and
        the clock `now` is not read)."""
        if self.limits.max_wall_ms is None:
            return None
        return self.limits.remaining_s((now() - self._started) * 1000)

    # --- stuck ------------------------------------------------------------------------------
    def after_turn(
        self,
        rec: RunRecorder,
        *,
        index: int,
        assistant: Message,
        tools: Message | None,
        compacted: bool,
    ) -> Intervention | None:
        """Record one turn; act on the path when it looks stuck. A ``stop`` intervention is
        returned for the loop to end the run; the others are already applied."""
        calls = assistant.tool_calls
        if calls:
            results = {r.call_id: r for r in tools.tool_results} if tools is not None else {}
            traces = tuple([_trace(call, results.get(call.id)) for call in calls])
            text = ""
        else:  # a turn's text is compared only between turns without tool calls (monologue)
            traces, text = (), digest(assistant.text)
        ids = (assistant.id,) if tools is None else (assistant.id, tools.id)
        spans = self._spans
        spans.append(_Span(index, ids, traces))
        if len(spans) > _SPANS_KEPT:
            del spans[:-_SPANS_KEPT]
        intervention = self._detector.observe(
            TurnTrace(index=index, calls=traces, text=text, compacted=compacted)
        )
        if intervention is None:
            return None
        finding = intervention.finding
        pruned: list[str] = []
        if intervention.action == "prune":
            pruned = self._prune(rec, finding, intervention.message)
        rec.event(
            StuckDetected,
            kind=finding.kind,
            detail=finding.detail,
            action=intervention.action,
            first_turn=finding.first,
            last_turn=finding.last,
            pruned=pruned,
        )
        if intervention.action == "reminder":
            rec.add_message(_note(intervention.message))
        return intervention

    def _prune(self, rec: RunRecorder, finding: Finding, message: str) -> list[str]:
        """Take the span's messages out of the active path (they stay stored), leaving a note
        of what was tried. The span is the trailing turns, so what remains is a valid path: it
        ends where the span began (after a tool result or a user message)."""
        spans = [s for s in self._spans if finding.first <= s.index <= finding.last]
        drop = {i for s in spans for i in s.ids}
        kept = [m for m in rec.history if m.id not in drop]
        if len(kept) == len(rec.history):
            return []
        labels = [call.label for s in spans for call in s.calls]
        rec.replace_path([*kept, _note(f"{loop_summary(finding, labels)}\n\n{message}")])
        self._spans = []  # the path was rewritten (new ids); later findings are about new turns
        return sorted(drop)


def _trace(call: ToolCallBlock, result: ToolResultBlock | None) -> CallTrace:
    content = result.content if result is not None else ""
    is_error = result.is_error if result is not None else True
    error = content.strip().splitlines()[0][:ERROR_LINE_CHARS] if is_error and content else ""
    return CallTrace(  # signature, result, is_error, error, name, arguments
        call_signature(call.name, call.arguments),
        digest(content),
        is_error,
        error,
        call.name,
        call.arguments,
    )


def _note(text: str) -> Message:
    """A message from the runtime to the model (not the user's words, not a summary)."""
    return Message(role="user", kind="reminder", content=[TextBlock(text=text)])
