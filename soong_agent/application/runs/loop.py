"""The ReAct loop (LOOP-2): call the model, run its tool calls, repeat until it ends its turn."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from soong_agent.application.context.compaction_requests import CompactionRequests
from soong_agent.application.context.fitting import ContextFitting
from soong_agent.application.context.instructions import FolderInstructions
from soong_agent.application.context.summarizer import tools_text
from soong_agent.application.context.window import ContextWindow
from soong_agent.application.hooks import RunHooks
from soong_agent.application.mcp.run_link import McpRunLink
from soong_agent.application.mcp.tools import RunTools
from soong_agent.application.runs.ending import (
    CANCELLED,
    INTERRUPTED,
    close_open_turn,
    record_unsaved,
    session_end,
)
from soong_agent.application.runs.handle import RunResult
from soong_agent.application.runs.model_call import ModelCalls
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.runs.settings import LoopSettings
from soong_agent.application.runs.steering import Steering
from soong_agent.application.runs.turn import Turn
from soong_agent.application.tools.base import ToolContext, ToolRegistry
from soong_agent.application.tools.pipeline import ToolPipeline
from soong_agent.domain.history import CONTINUATION_PROMPT, synthetic_results, unanswered_calls
from soong_agent.domain.usage import cost_usd
from soong_agent.ports.errors import ProviderError, SoongAgentError
from soong_agent.ports.events import (
    ErrorEvent,
    RunFinished,
    RunStarted,
    RunStatus,
    ToolCallRequested,
)
from soong_agent.ports.messages import Message, TextBlock, assembled, user_text
from soong_agent.ports.model import ModelProvider, SystemPart
from soong_agent.ports.streaming import Usage
from soong_agent.ports.system import Clock
from soong_agent.ports.text import safe_text

__all__ = ["CANCELLED", "INTERRUPTED", "AgentLoop", "LoopSettings"]


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
        notices: Callable[[str], str] | None = None,
    ) -> None:
        self._registry = registry
        self._pipeline = pipeline
        self._settings = settings
        self._ctx = tool_context
        self._answer: list[str] = []
        self._turns = 0
        self._continuations = 0
        self._context = context
        self._compaction = compaction if compaction is not None else CompactionRequests()
        self._hooks = hooks
        self._tasks_touched = False
        self._mcp = mcp
        self._run_tools = run_tools
        self._system_of = system_of
        self._instructions = instructions
        self._inbox = inbox
        self._notices = notices
        self._fitting = ContextFitting(context, self._compaction, hooks)
        self._model = ModelCalls(
            provider=provider,
            registry=registry,
            run_tools=run_tools,
            system=system,
            settings=settings,
            context=context,
            fitting=self._fitting,
        )
        self._clock = clock
        if tool_context.children is not None:
            tool_context.children.watch_parent(self._own_spent)
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
            unsaved = await record_unsaved(rec, reason, exc)
            return self._result(rec, "failed", unsaved, error or exc)

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
        model = self._model
        self._continuations = 0
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
                self._renew_system(self._system_of)
            if self._inbox is not None:  # a teammate's mails arrive at the start of a turn
                await self._take_mail(rec, self._inbox)
            if self._notices is not None:  # and the ends of background commands (BG-1)
                self._take_notices(rec, self._notices)
            await self._fitting.fit(rec)
            if self._hooks is not None:
                blocked = await self._pre_sampling(rec)
                if blocked is not None:
                    return "blocked", blocked
            left = self._steering.time_left(self._now)
            try:
                if left is None:  # no wall-time budget (the usual run)
                    turn = await model.recovering(rec, self._turns)
                else:
                    turn = await model.in_time(rec, self._turns, left)
            except TimeoutError:
                self._close_open_turn(rec, INTERRUPTED)
                return "budget_exhausted", self._budget_spent(rec, out_of_time=True)
            assistant = rec.add_message(assembled("assistant", turn.content()))
            if self._hooks is not None:
                await self._post_sampling(rec, turn, assistant.text)
            model.turn = None
            tools: Message | None = None
            if turn.calls:
                self._answer = []  # the answer is what is said after the last tool calls
                for call in turn.calls:
                    rec.event(
                        ToolCallRequested, call_id=call.id, name=call.name, arguments=call.arguments
                    )
                model.turn = turn
                results = await self._pipeline.run_all(
                    turn.calls, rec, self._ctx, refused=model.refused
                )
                for call in turn.calls:  # (the flag was reset when this turn began)
                    if call.name.startswith("task_"):
                        self._tasks_touched = True
                        break
                model.turn = None
                tools = rec.add_message(assembled("tool", list(results)))
                if self._instructions is not None:
                    self._instructions.after_tools(turn.calls, results, rec)
            else:
                ended = await self._answered(rec, turn, assistant.text)
                if ended is not None:
                    return ended
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

    def _renew_system(self, system_of: Callable[[], list[SystemPart]]) -> None:
        """The system prompt again, its tools section listing the tools the run has now (and
        the context window's budget counting it)."""
        self._model.system = system_of()
        if self._context is not None:
            specs = (
                self._run_tools.request_specs()
                if self._run_tools is not None
                else self._registry.specs()
            )
            text = "\n\n".join(p.text for p in self._model.system) + tools_text(specs)
            self._context.set_system_text(text)

    async def _take_mail(self, rec: RunRecorder, inbox: Callable[[], Awaitable[str]]) -> None:
        mail = await inbox()
        if mail:
            rec.add_message(Message(role="user", content=[TextBlock(text=mail)], kind="mail"))

    def _take_notices(self, rec: RunRecorder, notices: Callable[[str], str]) -> None:
        notice = notices(rec.session.id)
        if notice:
            rec.add_message(Message(role="user", content=[TextBlock(text=notice)], kind="reminder"))

    async def _answered(
        self, rec: RunRecorder, turn: Turn, text: str
    ) -> tuple[RunStatus, str | None] | None:
        """A turn without tool calls: the run's end (its answer is written with the run's end,
        in one transaction: `_finish`), or None when it goes on (a cut answer continued, a
        stop hook's reminder)."""
        self._answer.append(text)
        if turn.stop == "max_tokens" and self._continuations < self._settings.max_continuations:
            self._continuations += 1
            rec.add_message(
                Message(
                    role="user", content=[TextBlock(text=CONTINUATION_PROMPT)], kind="continuation"
                )
            )
            return None
        cut = turn.stop == "max_tokens"
        reminder = await self._stop_hook(rec, "max_tokens" if cut else "end_turn")
        if reminder is None:
            return "completed", "the answer hit the output token limit" if cut else None
        rec.add_message(Message(role="user", content=[TextBlock(text=reminder)], kind="reminder"))
        self._answer = []  # the answer is the one given after the stop hook's reminder
        return None

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

    def count_usage(self, usage: Usage) -> None:
        """Count usage spent outside the run's own calls (MCP sampling) in its budgets."""
        self._model.usage = self._model.usage + usage

    def _own_spent(self) -> tuple[Usage, float | None]:
        usage = self._model.usage
        return usage, cost_usd(usage, self._settings.price)

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

    def _close_open_turn(self, rec: RunRecorder, reason: str) -> None:
        """Keep partial text and give every started tool call exactly one result."""
        turn, self._model.turn = self._model.turn, None
        completed = self._pipeline.completed
        close_open_turn(rec, turn, reason, completed=completed, answer=self._answer)

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
        usage, cost = self._own_spent()
        if self._hooks is not None:
            await session_end(self._hooks, rec, status=status, turns=self._model.calls, cost=cost)
        rec.finish(status, reason)
        rec.event(RunFinished, status=status, reason=reason, usage=usage, cost_usd=cost)
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
            usage=self._model.usage,
            cost_usd=cost_usd(self._model.usage, self._settings.price),
            turns=self._model.calls,
            error=error,
        )
