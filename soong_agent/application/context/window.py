"""Keeps the active path inside the context window (CTX-4/6): the token accounting of
`TokenTally` (`context.tally`) and the compaction ladder.

When the non-system part passes the compaction trigger, the domain's ladder runs:
micro-compaction, a summary by the compact model, aggressive micro-compaction, a summary of a
bounded slice, and finally a hard reset that keeps the carry-over set. Each rung runs at most
once. With `compact.auto_background` a summary starts early, so that the swap at the trigger
costs no waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import ValidationError

from soong_agent.application.context.summarizer import Summarizer
from soong_agent.application.context.tally import (
    BACKGROUND_AT,
    MESSAGE_OVERHEAD,
    Measure,
    TokenTally,
)
from soong_agent.application.tools.todo import TodoWriteArgs, render_todos
from soong_agent.domain import compaction as cp
from soong_agent.domain.budget import ContextBudget
from soong_agent.domain.config.schema import CompactConfig
from soong_agent.domain.token_estimate import ProviderCalibration
from soong_agent.ports.errors import SoongAgentError
from soong_agent.ports.messages import Message
from soong_agent.ports.system import TokenCounter

__all__ = [
    "MESSAGE_OVERHEAD",
    "Compacted",
    "ContextWindow",
    "Measure",
    "Trigger",
    "todos_in",
]

Trigger = Literal["budget", "manual", "recovery", "background"]


def todos_in(history: Sequence[Message]) -> str:
    """The latest todo list found in the messages themselves (after a resume the in-memory
    board is empty): the last valid `todo_write` call, else the one an earlier summary carried."""
    for message in reversed(history):
        for call in reversed(message.tool_calls):
            if call.name != "todo_write":
                continue
            try:
                args = TodoWriteArgs.model_validate_json(call.arguments)
            except ValidationError:
                continue
            return render_todos(args.todos)
        if message.kind == "summary":
            carry = cp.parse_carry_over(message.text)
            if carry is not None and carry.todos:
                return carry.todos
    return ""


@dataclass(frozen=True, slots=True)
class Compacted:
    """The outcome of one compaction: the new active path (None when nothing changed)."""

    messages: list[Message] | None
    report: cp.CompactionReport


class ContextWindow(TokenTally):
    """Accounting (`TokenTally`) and compaction for one run's active path."""

    def __init__(
        self,
        *,
        counter: TokenCounter | None,
        budget: ContextBudget,
        compact: CompactConfig,
        summarizer: Summarizer | None,
        calibration: ProviderCalibration,
        system_text: str,
        instructions: str = "",
        todos: Callable[[], str] = lambda: "",
        new_id: Callable[[], str],
    ) -> None:
        super().__init__(
            counter=counter, budget=budget, calibration=calibration, system_text=system_text
        )
        self._compact = compact
        self._summarizer = summarizer
        self._instructions = instructions
        self._todos = todos
        self._new_id = new_id
        self._background: tuple[tuple[str, ...], asyncio.Task[str]] | None = None
        self.problems: list[str] = []  # why summaries failed, for the loop to report

    @property
    def recovery_sync(self) -> bool:
        """Whether a "prompt too long" answer is met with a synchronous compaction."""
        return self._compact.enabled and self._compact.recovery_sync

    def over_trigger(self, measure: Measure) -> bool:
        return self._compact.enabled and self.budget.needs_compaction(measure.non_system_tokens)

    def _carry(self, history: Sequence[Message]) -> cp.CarryOver:
        todos = self._todos() or todos_in(history)
        return cp.CarryOver(instructions=self._instructions, latest_user_request="", todos=todos)

    # --- background summaries (auto_background) -------------------------------------------
    def maybe_start_background(self, history: Sequence[Message], measure: Measure) -> None:
        """Start summarising early, so that the swap at the trigger costs no waiting."""
        if (
            self._background is not None
            or self._summarizer is None
            or not (self._compact.enabled and self._compact.auto_background)
            or measure.non_system_tokens <= self.budget.compact_trigger * BACKGROUND_AT
        ):
            return
        tokens = self._tokens(history)
        selection = cp.select_for_summary(
            history,
            tokens,
            keep_recent_tokens=self.budget.keep_recent,
            protect_latest_user=False,  # the carry-over keeps the request verbatim
        )
        if selection is None:
            return
        chosen = list(history[selection.start : selection.end])
        task = asyncio.ensure_future(self._summarizer.summarize(chosen))
        self._background = (tuple(m.id for m in chosen), task)

    def take_background(self, history: Sequence[Message]) -> Compacted | None:
        """The background summary applied to `history`, when it is ready and still fits."""
        if self._background is None or not self._background[1].done():
            return None
        ids, task = self._background
        self._background = None
        if task.cancelled() or task.exception() is not None:
            return None
        text = task.result()
        if len(history) < len(ids) or tuple(m.id for m in history[: len(ids)]) != ids:
            return None  # the path changed under it (another compaction): drop it
        if cp.summary_problem(text, max_summary_tokens=self.budget.max_summary) is not None:
            return None
        tokens = self._tokens(history)
        before = sum(tokens)
        selection = cp.SummarySelection(
            start=0,
            end=len(ids),
            tokens=sum(tokens[: len(ids)]),
            first_id=ids[0],
            last_id=ids[-1],
        )
        new = cp.apply_summary(
            history, selection, text, self._carry(history), summary_id=self._new_id()
        )
        report = cp.CompactionReport(
            strategy="summary",
            tokens_before=before,
            tokens_after=sum(self._tokens(new)),
            dropped=[selection.label],
            rungs_failed=[],
        )
        return Compacted(new, report)

    def cancel_background(self) -> None:
        if self._background is not None:
            self._background[1].cancel()
            self._background = None

    # --- the ladder ---------------------------------------------------------------------------
    async def compact(self, history: Sequence[Message], *, trigger: Trigger) -> Compacted:
        """Run the ladder until the context fits; never raises for a failed summary."""
        self.cancel_background()
        self.measure(history, exact=True)
        current = list(history)
        tokens = self._tokens(current)
        before = sum(tokens)
        target = self.budget.compact_trigger
        if trigger == "recovery":
            target = min(target, int(before * 0.7))
        elif trigger == "manual":
            target = min(target, max(1, before // 2))
        ladder = cp.CompactionLadder(start="summary" if trigger == "manual" else "micro")
        dropped: list[str] = []
        strategy: cp.Rung | None = None
        while (rung := ladder.current) is not None:
            result, ranges, outcome = await self._rung(rung, current, tokens)
            if result is not None:
                current, tokens, strategy = result, self._tokens(result), rung
                dropped += ranges
                if outcome != "failed":
                    outcome = "ok" if sum(tokens) <= target else "still_over"
            if trigger == "manual" and rung == "summary" and result is None and outcome != "failed":
                break  # nothing old enough to summarise: a manual request changes nothing
            ladder.record(outcome)
        changed = strategy is not None
        report = cp.CompactionReport(
            strategy=strategy or "micro",
            tokens_before=before,
            tokens_after=sum(tokens),
            dropped=dropped,
            rungs_failed=ladder.failed,
        )
        return Compacted(current if changed else None, report)

    async def _rung(
        self, rung: cp.Rung, current: list[Message], tokens: list[int]
    ) -> tuple[list[Message] | None, list[str], cp.Outcome]:
        keep = self.budget.keep_recent
        if rung in ("micro", "micro_aggressive"):
            plan = cp.micro_compact(
                current,
                tokens,
                keep_recent_tokens=keep,
                aggressive=rung == "micro_aggressive",
                estimate=lambda text: self._estimate(self._count(text)),
            )
            if not plan.changed:
                return None, [], "still_over"
            return (
                plan.messages,
                [f"stubbed {r}" for r in cp.id_ranges(current, plan.changed_indices)],
                "ok",
            )
        if rung in ("summary", "slice_summary"):
            limit = max(keep, self.budget.compact_trigger // 4) if rung == "slice_summary" else None
            selection = cp.select_for_summary(
                current,
                tokens,
                keep_recent_tokens=keep,
                max_slice_tokens=limit,
                protect_latest_user=False,  # the carry-over keeps the request verbatim
            )
            if selection is None:
                return None, [], "still_over"
            text = await self._summary(current[selection.start : selection.end])
            if text is None:
                return None, [], "failed"
            new = cp.apply_summary(
                current, selection, text, self._carry(current), summary_id=self._new_id()
            )
            return new, [selection.label], "ok"
        new = cp.hard_reset(current, self._carry(current), summary_id=self._new_id())
        label = cp.id_ranges(current, range(len(current)))
        return new, label, "ok"

    async def _summary(self, messages: Sequence[Message]) -> str | None:
        if self._summarizer is None:
            return None
        try:
            text = await self._summarizer.summarize(messages)
        except SoongAgentError as exc:
            self.problems.append(f"the compaction summary failed: {exc}")
            return None
        size = self._estimate(self._count(text)) if text else 0
        problem = cp.summary_problem(text, max_summary_tokens=self.budget.max_summary, tokens=size)
        if problem:
            self.problems.append(f"the compaction summary was not usable: {problem}")
            return None
        return text
