"""The ReAct loop (LOOP-2): call the model, run its tool calls, repeat until it ends its turn."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import assert_never

from soong_agent.application.context.compaction_requests import CompactionRequests
from soong_agent.application.context.fitting import ContextFitting
from soong_agent.application.context.instructions import FolderInstructions
from soong_agent.application.context.summarizer import tools_text
from soong_agent.application.context.window import ContextWindow
from soong_agent.application.hooks import RunHooks
from soong_agent.application.mcp.run_link import McpRunLink
from soong_agent.application.mcp.tools import RunTools
from soong_agent.application.runs.handle import RunResult
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.runs.steering import Steering
from soong_agent.application.runs.turn import Turn
from soong_agent.application.tools.base import ToolContext, ToolRegistry
from soong_agent.application.tools.pipeline import ToolPipeline
from soong_agent.domain.compaction import approx_tokens
from soong_agent.domain.config.schema import PriceConfig
from soong_agent.domain.history import CONTINUATION_PROMPT, synthetic_results, unanswered_calls
from soong_agent.domain.run_limits import RunLimits
from soong_agent.domain.stuck import StuckSettings
from soong_agent.domain.usage import cost_usd
from soong_agent.ports.errors import ConfigError, ProviderError, SoongAgentError
from soong_agent.ports.events import (
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
    ToolCallBlock,
    ToolResultBlock,
    assembled,
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
from soong_agent.ports.system import Clock
from soong_agent.ports.text import safe_json_text, safe_text

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
    limits: RunLimits = field(default_factory=RunLimits)
    stuck: StuckSettings = field(default_factory=StuckSettings)
    agent_hash: str | None = None
    """The content hash of the agent definition the run follows (AGT-3), in `run_started`."""


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
        clock: Clock | None = None,
        hooks: RunHooks | None = None,
        mcp: McpRunLink | None = None,
        run_tools: RunTools | None = None,
        system_of: Callable[[], list[SystemPart]] | None = None,
        instructions: FolderInstructions | None = None,
        inbox: Callable[[], Awaitable[str]] | None = None,
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
        self._context = context
        self._compaction = compaction if compaction is not None else CompactionRequests()
        self._hooks = hooks
        self._tasks_touched = False
        self._mcp = mcp
        self._run_tools = run_tools
        self._system_of = system_of
        self._instructions = instructions
        self._inbox = inbox
        self._fitting = ContextFitting(context, self._compaction, hooks)
        self._clock = clock
        if tool_context.children is not None:
            tool_context.children.watch_parent(self._own_spent)
        self._refused: dict[str, str] = {}
        """Why each call whose arguments held a lone surrogate is refused, by its (safe)
        arguments text (ids may still change: `Turn.one_call_per_id`)."""
        self._steering = Steering(
            stuck=settings.stuck,
            limits=settings.limits,
            started=clock.monotonic() if clock is not None else 0.0,
        )

    async def run(self, rec: RunRecorder, message: str, *, resumed: bool) -> RunResult:
        """Execute the run; every outcome, cancellation and a store that refuses to save
        included, ends in a RunResult with a status and, unless completed, a reason."""
        message = safe_text(message)
        try:
            await self._start(rec, message, resumed=resumed)
            status, reason = await self._react(rec)
        except asyncio.CancelledError:
            return await self._end(rec, "cancelled", "cancelled by the user", close=CANCELLED)
        except SoongAgentError as exc:
            kind = exc.kind if isinstance(exc, ProviderError) else type(exc).__name__
            reason = safe_text(str(exc)) or type(exc).__name__
            return await self._end(
                rec, "failed", reason, error=exc, close=INTERRUPTED, error_kind=kind
            )
        except Exception as exc:  # a bug or a broken store: report it as a failed run, not a hang
            reason = safe_text(f"internal error: {type(exc).__name__}: {exc}")
            return await self._end(
                rec, "failed", reason, error=exc, close=INTERRUPTED, error_kind="internal"
            )
        return await self._end(rec, status, reason)

    async def _end(
        self,
        rec: RunRecorder,
        status: RunStatus,
        reason: str | None,
        *,
        error: BaseException | None = None,
        close: str | None = None,
        error_kind: str | None = None,
    ) -> RunResult:
        """Close what the run left open and write its end; when that fails (the store refuses
        the last batch, a second cancellation), the run is still reported, as failed."""
        try:
            if close is not None:
                self._close_open_turn(rec, close)
            if error_kind is not None:
                rec.event(ErrorEvent, kind=error_kind, message=reason or status, fatal=True)
            return await self._finish(rec, status, reason, error=error)
        except (Exception, asyncio.CancelledError) as exc:
            return await self._unsaved(rec, reason, error, exc)

    async def _unsaved(
        self,
        rec: RunRecorder,
        reason: str | None,
        error: BaseException | None,
        exc: BaseException,
    ) -> RunResult:
        """The result of a run whose end could not be written as it was: the run's status and
        reason are written alone (on the last session header that was saved); if even that
        fails, the run's row stays `running` and the store reports it `interrupted` once this
        process lets it go (see `SessionStore.list_runs`)."""
        what = "cancelled again" if isinstance(exc, asyncio.CancelledError) else "failed"
        note = safe_text(f"{type(exc).__name__}: {exc}".rstrip(": "))
        ended = f"the run's end could not be saved ({what}: {note})"
        reason = f"{reason}; {ended}" if reason else ended
        try:
            await rec.save_end("failed", reason)
        except (Exception, asyncio.CancelledError) as again:
            more = safe_text(f"{type(again).__name__}: {again}".rstrip(": "))
            reason += f"; nor its status ({more}): the session shows the run as interrupted"
        try:
            rec.event(ErrorEvent, kind="unsaved", message=reason, fatal=True)
        except Exception as broken:  # the event stream itself is broken: the result says it all
            reason += f"; its last event could not be made ({type(broken).__name__})"
        return self._result(rec, "failed", reason, error or exc)

    async def _start(self, rec: RunRecorder, message: str, *, resumed: bool) -> None:
        rec.event(
            RunStarted,
            project_dir=self._ctx.fs.root,
            model=self._settings.model_label,
            agent=rec.session.agent,
            agent_hash=self._settings.agent_hash,
            resumed=resumed,
            message=message,
        )
        if self._mcp is not None:
            self._mcp.attach(rec)
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
        if self._hooks is not None:
            await self._hooks.session_start(rec, resumed=resumed)

    async def _react(self, rec: RunRecorder) -> tuple[RunStatus, str | None]:
        continuations = 0
        while self._turns < self._settings.max_turns:
            spent = self._budget_spent(rec)
            if spent is not None:
                return "budget_exhausted", spent
            self._turns += 1
            changed = self._mcp is not None and await self._mcp.before_call()
            if self._instructions is not None and self._instructions.take_changed():
                changed = True  # a folder's instruction file joins the chain (PROMPT-2)
            if self._tasks_touched:
                self._tasks_touched, changed = False, True  # the task board changed (TASK-2)
            if changed and self._system_of is not None:  # the tools section lists new tools
                self._system = self._system_of()
                if self._context is not None:
                    specs = (
                        self._run_tools.request_specs()
                        if self._run_tools is not None
                        else self._registry.specs()
                    )
                    text = "\n\n".join(p.text for p in self._system) + tools_text(specs)
                    self._context.set_system_text(text)
            if self._inbox is not None:  # a teammate's mails arrive at the start of a turn
                mail = await self._inbox()
                if mail:
                    rec.add_message(
                        Message(role="user", content=[TextBlock(text=mail)], kind="mail")
                    )
            await self._fitting.fit(rec)
            if self._hooks is not None:
                blocked = await self._pre_sampling(rec)
                if blocked is not None:
                    return "blocked", blocked
            left = self._steering.time_left(self._now)
            try:
                if left is None:  # no wall-time budget (the usual run)
                    turn = await self._call_model_recovering(rec)
                else:
                    turn = await self._call_model_in_time(rec, left)
            except TimeoutError:
                self._close_open_turn(rec, INTERRUPTED)
                return "budget_exhausted", self._budget_spent(rec, out_of_time=True)
            assistant = rec.add_message(assembled("assistant", turn.content()))
            if self._hooks is not None:
                await self._post_sampling(rec, turn, assistant.text)
            self._turn = None
            tools: Message | None = None
            if turn.calls:
                self._answer = []  # the answer is what is said after the last tool calls
                for call in turn.calls:
                    rec.event(
                        ToolCallRequested, call_id=call.id, name=call.name, arguments=call.arguments
                    )
                self._turn = turn
                results = await self._pipeline.run_all(
                    turn.calls, rec, self._ctx, refused=self._refused
                )
                for call in turn.calls:  # (the flag was reset when this turn began)
                    if call.name.startswith("task_"):
                        self._tasks_touched = True
                        break
                self._turn = None
                tools = rec.add_message(assembled("tool", list(results)))
                if self._instructions is not None:
                    self._instructions.after_tools(turn.calls, results, rec)
            elif turn.stop == "max_tokens" and continuations < self._settings.max_continuations:
                self._answer.append(assistant.text)
                continuations += 1
                rec.add_message(
                    Message(
                        role="user",
                        content=[TextBlock(text=CONTINUATION_PROMPT)],
                        kind="continuation",
                    )
                )
            else:  # the answer is written with the run's end, in one transaction (`_finish`)
                self._answer.append(assistant.text)
                cut = turn.stop == "max_tokens"
                reminder = await self._stop_hook(rec, "max_tokens" if cut else "end_turn")
                if reminder is None:
                    return "completed", "the answer hit the output token limit" if cut else None
                rec.add_message(
                    Message(role="user", content=[TextBlock(text=reminder)], kind="reminder")
                )
                self._answer = []  # the answer is the one given after the stop hook's reminder
            steer = self._steering.after_turn(
                rec,
                index=self._turns,
                assistant=assistant,
                tools=tools,
                compacted=self._fitting.compacted,
            )
            if steer is not None and steer.action == "stop":
                return "stuck", steer.message
            lagging = rec.commit_pipelined()
            if lagging is not None:
                await lagging
        return (
            "max_turns",
            f"stopped after {self._settings.max_turns} model calls (runtime.max_turns)",
        )

    # --- hooks (HOOK-1) ---------------------------------------------------------------------------
    async def _pre_sampling(self, rec: RunRecorder) -> str | None:
        """The reason a pre_sampling hook blocks this model call (fired once per call, not per
        provider retry); the block is a warning event and ends the run."""
        if self._hooks is None:
            return None
        why = await self._hooks.pre_sampling(rec, turn=self._turns, messages=len(rec.history))
        if why is None:
            return None
        reason = f"a pre_sampling hook blocked the model call: {why}"
        rec.event(ErrorEvent, kind="pre_sampling_blocked", message=reason, fatal=False)
        return reason

    async def _post_sampling(self, rec: RunRecorder, turn: Turn, text: str) -> None:
        assert self._hooks is not None
        usage = turn.usage or Usage()
        await self._hooks.post_sampling(
            rec,
            turn=self._turns,
            input_tokens=usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens,
            output_tokens=usage.output_tokens,
            stop_reason=turn.stop,
            text=text,
        )

    async def _stop_hook(self, rec: RunRecorder, reason: str) -> str | None:
        """What a stop hook wants the agent to go on with (bounded per run), or None."""
        if self._hooks is None:
            return None
        return await self._hooks.stop(rec, reason=reason)

    # --- budgets (runtime.max_cost_usd / max_tokens / max_wall_ms) ---------------------------
    def _now(self) -> float:
        return self._clock.monotonic() if self._clock is not None else 0.0

    def _own_spent(self) -> tuple[Usage, float | None]:
        return self._usage, cost_usd(self._usage, self._settings.price)

    def _budget_spent(self, rec: RunRecorder, *, out_of_time: bool = False) -> str | None:
        limits = self._steering.limits
        if limits.max_cost_usd is None and limits.max_tokens is None and limits.max_wall_ms is None:
            return None  # no budget to use up (the usual run): nothing to add up each turn
        usage, cost = self._own_spent()
        children = self._ctx.children
        if children is not None:  # what the run's children used counts too (AGT-2)
            child_usage, child_cost = children.spent()
            usage = usage + child_usage
            if child_cost is not None:
                cost = (cost or 0.0) + child_cost
        return self._steering.budget_spent(rec, usage, cost, self._now(), out_of_time=out_of_time)

    async def _call_model_in_time(self, rec: RunRecorder, left: float) -> Turn:
        """The model call, cut off when the wall-time budget runs out (TimeoutError) in `left`
        seconds."""
        async with asyncio.timeout(left):
            return await self._call_model_recovering(rec)

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
            await self._fitting.compact(rec, "recovery")
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
        if self._refused:  # a refusal is for the calls of the turn that made them only
            self._refused.clear()
        rec.event(ModelCallStarted, turn=self._turns, messages=len(rec.history))
        request = ModelRequest(
            system=self._system,
            messages=rec.history,
            tools=(
                self._run_tools.request_specs()
                if self._run_tools is not None
                else self._registry.specs()
            ),
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
                        text = item.text
                        if not text.isascii():  # (the one boundary for the model's text)
                            text = safe_text(text)
                        turn.text.append(text)
                        rec.event(TextDeltaEvent, text=text)
                    case ToolCallReady():
                        call = item.call
                        ascii_call = call.arguments.isascii() and call.name.isascii()
                        if not (ascii_call and call.id.isascii()) or "\\u" in call.arguments:
                            call = self._safe_call(call)
                        turn.calls.append(call)
                    case ThinkingDelta():
                        thought = item
                        if not thought.text.isascii():
                            thought = ThinkingDelta(
                                safe_text(thought.text), thought.signature, thought.redacted
                            )
                        turn.add_thinking(thought)
                        if thought.text:
                            rec.event(ThinkingDeltaEvent, text=thought.text)
                    case UsageReported():
                        turn.usage = item.usage
                        self._add_usage(rec, item.usage)
                    case StreamFinished():
                        turn.stop = item.stop_reason
                    case RetryScheduled():
                        if item.restart:  # a cut answer: what came of it is discarded
                            turn = Turn()
                            self._turn = turn
                        rec.event(
                            ModelRetry,
                            kind=item.kind,
                            reason=item.reason,
                            attempt=item.attempt,
                            max_attempts=item.max_attempts,
                            delay_s=item.delay_s,
                            restarted=item.restart,
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
            for note in turn.one_call_per_id():
                rec.event(ErrorEvent, kind="duplicate_call_id", message=note, fatal=False)
        if turn.usage is None:
            self._add_usage(rec, self._estimated_usage(turn))
        return turn

    def _safe_call(self, call: ToolCallBlock) -> ToolCallBlock:
        """`call` with its texts UTF-8-clean (`ports.text`); a call whose arguments held a
        lone surrogate is refused by the pipeline, with the reason kept here."""
        name, call_id = safe_text(call.name), safe_text(call.id)
        arguments, lone = safe_json_text(call.arguments)
        if lone:
            self._refused[arguments] = (
                f"the arguments hold a lone surrogate ({', '.join(lone[:3])}), which is not "
                "text, so the call did not run (it is shown as \\xNN or U+FFFD). Send text "
                "only; a byte of a file name that is not UTF-8 is written \\xNN, as list_dir "
                "shows it (caf\\xe9.txt)"
            )
        if name is call.name and call_id is call.id and arguments is call.arguments:
            return call
        return ToolCallBlock(id=call_id, name=name, arguments=arguments)

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
            input_tokens=self._fitting.measured,
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
            kept = rec.add_message(Message(role="assistant", content=partial.content()))
            if not turn.calls:  # the result's text is what was said, too
                self._answer.append(kept.text)
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
        if self._mcp is not None:
            self._mcp.detach()
        if self._hooks is not None:
            try:
                await self._hooks.session_end(
                    rec,
                    status=status,
                    turns=self._calls,
                    cost_usd=cost_usd(self._usage, self._settings.price),
                )
            except Exception as exc:  # hooks fail open: a broken one never costs the run's end
                rec.event(
                    ErrorEvent,
                    kind="hook",
                    message=safe_text(f"session_end hook failed: {type(exc).__name__}: {exc}"),
                    fatal=False,
                )
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
