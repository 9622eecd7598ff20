"""The ReAct loop (LOOP-2): call the model, run its tool calls, repeat until it ends its turn."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import assert_never

from soong_agent.application.compaction_requests import CompactionRequests
from soong_agent.application.context_window import Compacted, ContextWindow, Trigger
from soong_agent.application.recorder import RunRecorder
from soong_agent.application.run_handle import RunResult
from soong_agent.application.tool_pipeline import ToolPipeline
from soong_agent.application.tools.base import ToolContext, ToolRegistry
from soong_agent.application.turn import Turn
from soong_agent.domain.compaction import CompactionReport, approx_tokens, has_earlier_context
from soong_agent.domain.config.schema import PriceConfig
from soong_agent.domain.history import CONTINUATION_PROMPT, synthetic_results, unanswered_calls
from soong_agent.domain.usage import cost_usd
from soong_agent.ports.errors import ConfigError, ProviderError, SoongAgentError
from soong_agent.ports.events import (
    CompactionEvent,
    ContextMeasured,
    ErrorEvent,
    ModelCallStarted,
    ModelRetry,
    RunFinished,
    RunStarted,
    RunStatus,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolCallRequested,
    ToolResultEvent,
    UsageEvent,
)
from soong_agent.ports.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    user_text,
)
from soong_agent.ports.model import ModelProvider, ModelRequest, SystemPart, ToolChoice
from soong_agent.ports.streaming import (
    RetryScheduled,
    StreamFinished,
    TextDelta,
    ThinkingDelta,
    ToolCallReady,
    Usage,
    UsageReported,
)

INTERRUPTED = "This tool call did not run: the run was interrupted before it finished."
CANCELLED = "This tool call did not finish: the user cancelled the run."


@dataclass(frozen=True, slots=True)
class LoopSettings:
    """Limits and model settings of one run."""

    model_label: str
    max_turns: int = 100
    max_continuations: int = 3
    max_output_tokens: int | None = None
    temperature: float | None = None
    price: PriceConfig | None = None
    tool_choice: ToolChoice | None = None
    """Sent with the first model request of the run only (then the model decides)."""


class AgentLoop:
    """Drives one run from the user's message to a terminal state."""

    def __init__(
        self,
        *,
        provider: ModelProvider,
        registry: ToolRegistry,
        pipeline: ToolPipeline,
        system: Sequence[SystemPart],
        settings: LoopSettings,
        tool_context: ToolContext,
        context: ContextWindow | None = None,
        compaction: CompactionRequests | None = None,
    ) -> None:
        self._provider = provider
        self._registry = registry
        self._pipeline = pipeline
        self._system = list(system)
        self._settings = settings
        self._ctx = tool_context
        self._turn: Turn | None = None
        self._answer: list[str] = []
        self._usage = Usage()
        self._turns = 0
        self._calls = 0  # model calls really sent (a missing API key sends none)
        self._measured = 0  # the context size of the last measure, for estimated usage
        self._context = context
        self._compaction = compaction if compaction is not None else CompactionRequests()

    async def run(self, rec: RunRecorder, message: str, *, resumed: bool) -> RunResult:
        """Execute the run; every outcome, cancellation included, ends in a RunResult."""
        try:
            await self._start(rec, message, resumed=resumed)
            status, reason = await self._react(rec)
            return await self._finish(rec, status, reason)
        except asyncio.CancelledError:
            self._close_open_turn(rec, CANCELLED)
            return await self._finish(rec, "cancelled", "cancelled by the user")
        except SoongAgentError as exc:
            self._close_open_turn(rec, INTERRUPTED)
            kind = exc.kind if isinstance(exc, ProviderError) else type(exc).__name__
            rec.event(ErrorEvent, kind=kind, message=str(exc), fatal=True)
            return await self._finish(rec, "failed", str(exc), error=exc)
        except Exception as exc:  # a bug or a broken store: report it as a failed run, not a hang
            reason = f"internal error: {type(exc).__name__}: {exc}"
            rec.event(ErrorEvent, kind="internal", message=reason, fatal=True)
            try:
                return await self._finish(rec, "failed", reason, error=exc)
            except Exception as commit_exc:  # the store itself is failing: the result still says so
                reason = f"{reason}; the session could not be saved: {commit_exc}"
                return self._result(rec, "failed", reason, exc)

    async def _start(self, rec: RunRecorder, message: str, *, resumed: bool) -> None:
        rec.event(
            RunStarted,
            project_dir=self._ctx.fs.root,
            model=self._settings.model_label,
            agent=rec.session.agent,
            resumed=resumed,
            message=message,
        )
        dangling = unanswered_calls(rec.history)
        if dangling:  # a process killed mid-tool left calls without results
            rec.add_message(
                Message(
                    role="tool",
                    content=list(synthetic_results(dangling, INTERRUPTED)),
                    kind="synthetic",
                )
            )
        rec.add_message(user_text(message))
        # durable before the first request: whatever happens next (a second Ctrl-C, SIGKILL,
        # a crash in the provider), the session is listed, showable and resumable
        await rec.commit()

    async def _react(self, rec: RunRecorder) -> tuple[RunStatus, str | None]:
        continuations = 0
        while self._turns < self._settings.max_turns:
            self._turns += 1
            await self._fit_context(rec)
            turn = await self._call_model_recovering(rec)
            assistant = rec.add_message(Message(role="assistant", content=turn.content()))
            self._turn = None
            self._answer.append(assistant.text)
            if turn.calls:
                self._answer = []
                for call in turn.calls:
                    rec.event(
                        ToolCallRequested, call_id=call.id, name=call.name, arguments=call.arguments
                    )
                self._turn = turn
                results = await self._pipeline.run_all(turn.calls, rec, self._ctx)
                self._turn = None
                rec.add_message(Message(role="tool", content=list(results)))
            elif turn.stop == "max_tokens" and continuations < self._settings.max_continuations:
                continuations += 1
                rec.add_message(
                    Message(
                        role="user",
                        content=[TextBlock(text=CONTINUATION_PROMPT)],
                        kind="continuation",
                    )
                )
            else:  # the answer is written with the run's end, in one transaction (`_finish`)
                if turn.stop == "max_tokens":
                    return "completed", "the answer hit the output token limit"
                return "completed", None
            await rec.commit_pipelined()
        return (
            "max_turns",
            f"stopped after {self._settings.max_turns} model calls (runtime.max_turns)",
        )

    # --- context window (CTX-4, CTX-6) ---------------------------------------------------------
    async def _fit_context(self, rec: RunRecorder) -> None:
        ctx = self._context
        if ctx is None:
            self._compaction.settle(None)
            return
        early = ctx.take_background(rec.history)
        if early is not None:
            self._apply_compaction(rec, early, trigger="background")
        measure = ctx.measure(rec.history)
        self._measured = measure.system_tokens + measure.non_system_tokens
        rec.event(
            ContextMeasured,
            system_tokens=measure.system_tokens,
            non_system_tokens=measure.non_system_tokens,
            non_system_budget=ctx.budget.non_system,
            compact_trigger=ctx.budget.compact_trigger,
            window=ctx.budget.window,
            exact=measure.exact,
        )
        if self._compaction:
            await self._compact(rec, "manual")
        elif ctx.over_trigger(measure) and has_earlier_context(rec.history):
            # (a path of only the request itself has nothing to compact: it is sent as is)
            await self._compact(rec, "budget")
        else:
            ctx.maybe_start_background(rec.history, measure)

    async def _compact(self, rec: RunRecorder, trigger: Trigger) -> CompactionReport | None:
        if self._context is None:
            return None
        result = await self._context.compact(rec.history, trigger=trigger)
        problems, self._context.problems = self._context.problems, []
        for problem in problems:
            rec.event(ErrorEvent, kind="compaction", message=problem, fatal=False)
        self._apply_compaction(rec, result, trigger=trigger)
        return result.report

    def _apply_compaction(self, rec: RunRecorder, result: Compacted, *, trigger: str) -> None:
        if result.messages is not None:
            rec.replace_path(result.messages)
            if self._context is not None:
                self._context.reset(rec.history)
        report = result.report
        rec.event(
            CompactionEvent,
            strategy=report.strategy if result.messages is not None else "none",
            tokens_before=report.tokens_before,
            tokens_after=report.tokens_after,
            dropped=list(report.dropped),
            trigger=trigger,
            rungs_failed=list(report.rungs_failed),
        )
        self._compaction.settle(report)

    async def _call_model_recovering(self, rec: RunRecorder) -> Turn:
        """One model call; a "prompt too long" answer compacts synchronously and retries once."""
        ctx = self._context
        estimated = ctx.o200k_of(rec.history) if ctx is not None else None
        try:
            turn = await self._call_model(rec)
        except ProviderError as exc:
            if exc.kind != "context_too_long" or ctx is None or not ctx.recovery_sync:
                raise
            self._turn = None
            rec.event(ErrorEvent, kind=exc.kind, message=str(exc), fatal=False)
            await self._compact(rec, "recovery")
            estimated = None
            turn = await self._call_model(rec)
        if ctx is not None and turn.usage is not None:
            u = turn.usage
            reported = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
            ctx.recalibrate(estimated_o200k=estimated, reported=reported)
        return turn

    async def _call_model(self, rec: RunRecorder) -> Turn:
        turn = Turn()
        self._turn = turn
        rec.event(ModelCallStarted, turn=self._turns, messages=len(rec.history))
        request = ModelRequest(
            system=self._system,
            messages=rec.history,
            tools=self._registry.specs(),
            max_output_tokens=self._settings.max_output_tokens,
            temperature=self._settings.temperature,
            tool_choice=self._settings.tool_choice if self._turns == 1 else None,
        )
        sent = False
        try:
            async for item in self._provider.stream(request):
                sent = True
                match item:
                    case TextDelta():
                        turn.text.append(item.text)
                        rec.event(TextDeltaEvent, text=item.text)
                    case ToolCallReady():
                        turn.calls.append(item.call)
                    case ThinkingDelta():
                        turn.add_thinking(item)
                        if item.text:
                            rec.event(ThinkingDeltaEvent, text=item.text)
                    case UsageReported():
                        turn.usage = item.usage
                        self._add_usage(rec, item.usage)
                    case StreamFinished():
                        turn.stop = item.stop_reason
                    case RetryScheduled():
                        rec.event(
                            ModelRetry,
                            kind=item.kind,
                            reason=item.reason,
                            attempt=item.attempt,
                            max_attempts=item.max_attempts,
                            delay_s=item.delay_s,
                        )
                    case _:
                        assert_never(item)
        except ConfigError:
            raise  # nothing was sent (e.g. the API key is missing)
        except BaseException:
            sent = True
            raise
        finally:
            if sent:
                self._calls += 1
        if turn.calls:
            turn.stop = "tool_use"
        if turn.usage is None:
            self._add_usage(rec, self._estimated_usage(turn))
        return turn

    def _add_usage(self, rec: RunRecorder, usage: Usage) -> None:
        self._usage = self._usage + usage
        rec.event(
            UsageEvent,
            model=self._settings.model_label,
            usage=usage,
            cost_usd=cost_usd(usage, self._settings.price),
        )

    def _estimated_usage(self, turn: Turn) -> Usage:
        """The token counter's estimate of a call the server reported no usage for."""
        output = turn.output_text()
        counted = self._context.count_text(output) if self._context is not None else None
        return Usage(
            input_tokens=self._measured,
            output_tokens=counted if counted is not None else approx_tokens(output),
            estimated=True,
        )

    def _close_open_turn(self, rec: RunRecorder, reason: str) -> None:
        """Keep partial text and give every started tool call exactly one result."""
        turn, self._turn = self._turn, None
        streaming = turn is not None and rec.history and rec.history[-1].role != "assistant"
        if turn is not None and streaming and (turn.text or turn.thinking or turn.closed_thinking):
            partial = Turn(
                text=turn.text, thinking=turn.thinking, closed_thinking=turn.closed_thinking
            )
            rec.add_message(Message(role="assistant", content=partial.content()))
        pending = unanswered_calls(rec.history)
        if not pending:
            return
        done = self._pipeline.completed
        results: list[ToolResultBlock] = []
        for call in pending:
            block = done.get(call.id)
            if block is None:
                block = synthetic_results([call], reason)[0]
                rec.event(
                    ToolResultEvent, call_id=call.id, name=call.name, content=reason, is_error=True
                )
            results.append(block)
        rec.add_message(Message(role="tool", content=list(results)))

    async def _finish(
        self,
        rec: RunRecorder,
        status: RunStatus,
        reason: str | None,
        *,
        error: BaseException | None = None,
    ) -> RunResult:
        self._compaction.settle(None)
        if self._context is not None:
            self._context.cancel_background()
        rec.finish(status, reason)
        rec.event(
            RunFinished,
            status=status,
            reason=reason,
            usage=self._usage,
            cost_usd=cost_usd(self._usage, self._settings.price),
        )
        await rec.commit()
        return self._result(rec, status, reason, error)

    def _result(
        self, rec: RunRecorder, status: RunStatus, reason: str | None, error: BaseException | None
    ) -> RunResult:
        return RunResult(
            session_id=rec.session.id,
            run_id=rec.run_info.id,
            status=status,
            final_text="".join(self._answer),
            reason=reason,
            usage=self._usage,
            cost_usd=cost_usd(self._usage, self._settings.price),
            turns=self._calls,
            error=error,
        )
