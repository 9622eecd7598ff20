"""Before each model call: measure the context, compact it when needed (CTX-4, CTX-6)."""

from __future__ import annotations

from soong_agent.application.context.compaction_requests import CompactionRequests
from soong_agent.application.context.window import Compacted, ContextWindow, Trigger
from soong_agent.application.hooks import RunHooks
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.domain.compaction import CompactionReport, has_earlier_context
from soong_agent.ports.events import CompactionEvent, ContextMeasured, ErrorEvent


class ContextFitting:
    """Keeps one run's active path inside the window, turn by turn; answers compaction
    requests (the compact tool, `run.compact()`) at the next model call."""

    def __init__(
        self,
        context: ContextWindow | None,
        requests: CompactionRequests,
        hooks: RunHooks | None = None,
    ) -> None:
        self._context = context
        self._hooks = hooks
        self.requests = requests
        self.measured = 0
        """The context size of the last measure (system + messages), for estimated usage."""
        self.compacted = False
        """Whether the last `fit` had to compact because of the budget."""

    async def fit(self, rec: RunRecorder) -> None:
        ctx = self._context
        self.compacted = False
        if ctx is None:
            self.requests.settle(None)
            return
        early = ctx.take_background(rec.history)
        if early is not None:
            self._apply(rec, early, trigger="background")
        measure = ctx.measure(rec.history)
        self.measured = measure.system_tokens + measure.non_system_tokens
        rec.event(
            ContextMeasured,
            system_tokens=measure.system_tokens,
            non_system_tokens=measure.non_system_tokens,
            non_system_budget=ctx.budget.non_system,
            compact_trigger=ctx.budget.compact_trigger,
            window=ctx.budget.window,
            exact=measure.exact,
        )
        if self.requests:
            await self.compact(rec, "manual")
        elif ctx.over_trigger(measure) and has_earlier_context(rec.history):
            # (a path of only the request itself has nothing to compact: it is sent as is)
            self.compacted = True
            await self.compact(rec, "budget")
        else:
            ctx.maybe_start_background(rec.history, measure)

    async def compact(self, rec: RunRecorder, trigger: Trigger) -> CompactionReport | None:
        if self._context is None:
            return None
        if self._hooks is not None:
            tokens = self.measured or self._context.measure(rec.history).non_system_tokens
            await self._hooks.pre_compact(rec, trigger=trigger, tokens=tokens)
        result = await self._context.compact(rec.history, trigger=trigger)
        problems, self._context.problems = self._context.problems, []
        for problem in problems:
            rec.event(ErrorEvent, kind="compaction", message=problem, fatal=False)
        self._apply(rec, result, trigger=trigger)
        return result.report

    def _apply(self, rec: RunRecorder, result: Compacted, *, trigger: str) -> None:
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
        self.requests.settle(report)
