"""Keeps the active path inside the context window: token accounting and compaction (CTX-4/6).

Every message is counted once, when it is first measured; a run that stays small never loads
the tokenizer (the UTF-8 size of a text bounds its token count), so short runs start fast. When
the non-system part passes the compaction trigger, the domain's ladder runs: micro-compaction,
a summary by the compact model, aggressive micro-compaction, a summary of a bounded slice, and
finally a hard reset that keeps the carry-over set. Each rung runs at most once.

Slightly over our ~400-line habit: the accounting and the ladder share the per-message counts
and are one object.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import ValidationError

from soong_agent.application.context.summarizer import Summarizer, message_text
from soong_agent.application.tools.todo import TodoWriteArgs, render_todos
from soong_agent.domain import compaction as cp
from soong_agent.domain.budget import ContextBudget
from soong_agent.domain.config.schema import CompactConfig
from soong_agent.domain.token_estimate import ProviderCalibration
from soong_agent.ports.errors import ConfigError, SoongAgentError
from soong_agent.ports.messages import Message
from soong_agent.ports.system import TokenCounter
from soong_agent.ports.text import safe_text

MESSAGE_OVERHEAD = 4
BACKGROUND_AT = 0.8
WARM_UP_AT = 0.4
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


@dataclass(slots=True)
class Measure:
    """The size of the context the next request would send (never changed once made; not
    frozen, as one is made every turn)."""

    system_tokens: int
    non_system_tokens: int
    exact: bool


@dataclass(frozen=True, slots=True)
class Compacted:
    """The outcome of one compaction: the new active path (None when nothing changed)."""

    messages: list[Message] | None
    report: cp.CompactionReport


class ContextWindow:
    """Accounting and compaction for one run's active path."""

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
        self._base = budget
        self.budget = budget  # `_base` fitted to the system prompt's measured size
        self._fitted_budget: tuple[int, ContextBudget] | None = None  # see `_fitted`
        self._counter = counter
        self._compact = compact
        self._summarizer = summarizer
        self.calibration = calibration
        self._system_text = system_text
        self._system_bytes: int | None = None  # its UTF-8 size, measured once
        self._system_o200k: int | None = None
        self._instructions = instructions
        self._todos = todos
        self._new_id = new_id
        self._ids: list[str] = []
        self._o200k: dict[str, int] = {}
        self._text_len: dict[str, int] = {}  # to notice a copy whose content changed (stubs)
        self._size: dict[str, int] = {}
        self._known = 0
        self._unknown_bytes = 0
        self._unknown: list[Message] = []
        self._background: tuple[tuple[str, ...], asyncio.Task[str]] | None = None
        self.problems: list[str] = []  # why summaries failed, for the loop to report
        self._warming = False

    # --- accounting -------------------------------------------------------------------------
    def _loaded(self) -> bool:
        return self._counter is not None and self._counter.loaded

    def _warm_up(self) -> None:
        """Start loading the tokenizer in the background, once the context is big enough that
        an exact count may soon matter (a short run never pays for loading it)."""
        if self._warming or self._loaded():
            return
        self._warming = True
        if self._counter is not None:
            self._counter.warm_up()

    def _count(self, text: str) -> int:
        if self._counter is None:
            return cp.approx_tokens(text)
        try:
            return self._counter.count(text)
        except UnicodeError:  # a lone surrogate that came past the run's boundaries
            return self._counter.count(safe_text(text))

    def _sync(self, history: Sequence[Message], loaded: bool | None = None) -> None:
        """Take in the messages added since the last call (`loaded`: whether the tokenizer is,
        when the caller knows)."""
        if len(self._ids) > len(history) or (
            self._ids and self._ids[-1] != history[len(self._ids) - 1].id
        ):
            self.reset(history)
            return
        known = self._o200k
        if loaded is None:
            loaded = self._loaded()
        for message in history[len(self._ids) :]:
            mid = message.id
            self._ids.append(mid)
            tokens = known.get(mid)
            if tokens is not None:
                self._known += tokens
                continue
            text = message_text(message)
            if loaded:
                tokens = known[mid] = self._count(text) + MESSAGE_OVERHEAD
                self._text_len[mid] = len(text)
                self._known += tokens
            else:  # its UTF-8 size (an ASCII text's is its length: nothing to encode)
                size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
                size += MESSAGE_OVERHEAD
                self._size[mid] = size
                self._unknown_bytes += size
                self._unknown.append(message)

    def _count_unknown(self) -> None:
        for message in self._unknown:
            text = message_text(message)
            tokens = self._count(text) + MESSAGE_OVERHEAD
            self._o200k[message.id] = tokens
            self._text_len[message.id] = len(text)
            self._known += tokens
            self._unknown_bytes -= self._size.pop(message.id, 0)
        self._unknown = []

    def reset(self, history: Sequence[Message]) -> None:
        """Forget the tally and measure `history` afresh (after a compaction)."""
        self._ids, self._known, self._unknown_bytes, self._unknown = [], 0, 0, []
        self._size = {}
        self._sync(history)

    def _estimate(self, o200k: int) -> int:
        return math.ceil(o200k * self.calibration.factor)

    def set_system_text(self, text: str) -> None:
        """The system prompt changed between model calls (tools joined, an instruction file
        loaded): measure the new one from now on."""
        if text != self._system_text:
            self._system_text = text
            self._system_o200k = None
            self._system_bytes = None

    def system_tokens(self, loaded: bool | None = None) -> int:
        if self._system_o200k is None:
            if not (self._loaded() if loaded is None else loaded):
                if self._system_bytes is None:
                    self._system_bytes = len(self._system_text.encode("utf-8", "surrogatepass"))
                return self._estimate(self._system_bytes)
            self._system_o200k = self._count(self._system_text)
        return self._estimate(self._system_o200k)

    def measure(self, history: Sequence[Message], *, exact: bool = False) -> Measure:
        """Tokens of the system part and of the messages; exact once it could matter.

        Before the tokenizer is loaded, sizes are upper bounds (UTF-8 bytes). When the bounds
        come near the compaction trigger, or leave the window no room, both parts are counted
        exactly before anything is decided, so a context that fits is never compacted.
        Raises ConfigError when the measured system prompt leaves the window no room.
        """
        loaded = self._loaded()  # (asked once: it turns True when a background load ends)
        self._sync(history, loaded)
        system = self.system_tokens(loaded)
        non_system = self._estimate(self._known + self._unknown_bytes)
        inexact = bool(self._unknown) or self._system_o200k is None
        if inexact and (exact or self._could_matter(system, non_system)):
            self._count_unknown()
            self._system_o200k = self._count(self._system_text)
            system = self.system_tokens()
            non_system = self._estimate(self._known + self._unknown_bytes)
        try:
            self.budget = self._fitted(system)
        except ValueError as exc:
            raise ConfigError(f"context budget of the model: {exc}") from exc
        return Measure(system, non_system, not self._unknown)

    def _fitted(self, system: int) -> ContextBudget:
        """`_base` fitted to a system part of `system` tokens (ValueError: no room left); the
        last one is kept, as the system part keeps its size for most turns."""
        fitted = self._fitted_budget
        if fitted is None or fitted[0] != system:
            fitted = self._fitted_budget = (system, self._base.with_system(system))
        return fitted[1]

    def _could_matter(self, system: int, bound: int) -> bool:
        """Whether the upper bounds (`system` and `bound` tokens) come near the trigger (or
        leave no room at all); past `WARM_UP_AT` of it the tokenizer starts loading in the
        background."""
        try:
            budget = self._fitted(system)
        except ValueError:
            return True
        if bound > budget.compact_trigger * WARM_UP_AT:
            self._warm_up()
        return bound > budget.compact_trigger * BACKGROUND_AT

    def count_text(self, text: str) -> int | None:
        """The estimated tokens of `text` once the tokenizer is loaded (None before: loading it
        just for this would cost more than it tells)."""
        if not self._loaded():
            return None
        return self._estimate(self._count(text))

    def o200k_of(self, history: Sequence[Message]) -> int | None:
        """The exact o200k count of a request's messages and system part, when known."""
        if self._system_o200k is None:  # not counted exactly (the tokenizer was not needed)
            return None
        self._sync(history)
        if self._unknown or self._system_o200k is None:
            return None
        return self._known + self._system_o200k

    def recalibrate(self, *, estimated_o200k: int | None, reported: int) -> None:
        """Move the provider factor toward what the provider reported for a request."""
        if estimated_o200k:
            self.calibration = self.calibration.recalibrated(
                estimated_o200k=estimated_o200k, reported=reported
            )

    @property
    def recovery_sync(self) -> bool:
        """Whether a "prompt too long" answer is met with a synchronous compaction."""
        return self._compact.enabled and self._compact.recovery_sync

    def over_trigger(self, measure: Measure) -> bool:
        return self._compact.enabled and self.budget.needs_compaction(measure.non_system_tokens)

    def _tokens(self, messages: Sequence[Message]) -> list[int]:
        """Estimates per message; a micro-compacted copy keeps its id, so its text is checked."""
        out = []
        for message in messages:
            text = message_text(message)
            known = self._o200k.get(message.id)
            if known is None or self._text_len.get(message.id) != len(text):
                known = self._count(text) + MESSAGE_OVERHEAD
            out.append(self._estimate(known))
        return out

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
