"""The model calls of one run (LOOP-2): a request streamed into a `Turn`, its text and thinking
made events as they arrive, its usage counted (or estimated); a "prompt too long" answer
compacts and retries once; the wall-time budget cuts a call off."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import assert_never

from soong_agent.application.context.fitting import ContextFitting
from soong_agent.application.context.window import ContextWindow
from soong_agent.application.mcp.tools import RunTools
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.runs.settings import LoopSettings
from soong_agent.application.runs.turn import Turn
from soong_agent.application.tools.base import ToolRegistry
from soong_agent.domain.compaction import approx_tokens
from soong_agent.domain.usage import cost_usd
from soong_agent.ports.errors import ConfigError, ProviderError
from soong_agent.ports.events import (
    ErrorEvent,
    ModelCallStarted,
    ModelRetry,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    UsageEvent,
)
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.ports.model import ModelProvider, ModelRequest, SystemPart
from soong_agent.ports.streaming import (
    RetryScheduled,
    StreamFinished,
    TextDelta,
    ThinkingDelta,
    ToolCallReady,
    Usage,
    UsageReported,
)
from soong_agent.ports.text import safe_json_text, safe_text

__all__ = ["ModelCalls"]


class ModelCalls:
    """The model calls of one run, and what they produced and spent so far."""

    def __init__(
        self,
        *,
        provider: ModelProvider,
        registry: ToolRegistry,
        run_tools: RunTools | None,
        system: Sequence[SystemPart],
        settings: LoopSettings,
        context: ContextWindow | None,
        fitting: ContextFitting,
    ) -> None:
        self._provider = provider
        self._registry = registry
        self._run_tools = run_tools
        self._settings = settings
        self._context = context
        self._fitting = fitting
        self.system = list(system)
        """The system prompt the next request carries (the loop renews it)."""
        self.turn: Turn | None = None
        """The turn being streamed, or whose tool calls run (what a cut-off run closes)."""
        self.usage = Usage()
        self.calls = 0
        """Model calls really sent (a missing API key sends none)."""
        self.refused: dict[str, str] = {}
        """Why each call whose arguments held a lone surrogate is refused, by its (safe)
        arguments text (ids may still change: `Turn.one_call_per_id`)."""

    async def in_time(self, rec: RunRecorder, index: int, left: float) -> Turn:
        """The model call, cut off when the wall-time budget runs out (TimeoutError) in `left`
        seconds."""
        async with asyncio.timeout(left):
            return await self.recovering(rec, index)

    async def recovering(self, rec: RunRecorder, index: int) -> Turn:
        """The run's `index`-th model call; a "prompt too long" answer compacts synchronously
        and retries once."""
        ctx = self._context
        estimated = ctx.o200k_of(rec.history) if ctx is not None else None
        try:
            turn = await self._call(rec, index)
        except ProviderError as exc:
            if exc.kind != "context_too_long" or ctx is None or not ctx.recovery_sync:
                raise
            self.turn = None
            rec.event(ErrorEvent, kind=exc.kind, message=str(exc), fatal=False)
            await self._fitting.compact(rec, "recovery")
            estimated = None
            turn = await self._call(rec, index)
        if ctx is not None and turn.usage is not None:
            u = turn.usage
            reported = u.input_tokens + u.cache_read_tokens + u.cache_write_tokens
            ctx.recalibrate(estimated_o200k=estimated, reported=reported)
        return turn

    async def _call(self, rec: RunRecorder, index: int) -> Turn:
        turn = Turn()
        self.turn = turn
        if self.refused:  # a refusal is for the calls of the turn that made them only
            self.refused.clear()
        rec.event(ModelCallStarted, turn=index, messages=len(rec.history))
        request = ModelRequest(
            system=self.system,
            messages=rec.history,
            tools=(
                self._run_tools.request_specs()
                if self._run_tools is not None
                else self._registry.specs()
            ),
            max_output_tokens=self._settings.max_output_tokens,
            temperature=self._settings.temperature,
            tool_choice=self._settings.tool_choice if index == 1 else None,
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
                            self.turn = turn
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
                self.calls += 1
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
            self.refused[arguments] = (
                f"the arguments hold a lone surrogate ({', '.join(lone[:3])}), which is not "
                "text, so the call did not run (it is shown as \\xNN or U+FFFD). Send text "
                "only; a byte of a file name that is not UTF-8 is written \\xNN, as list_dir "
                "shows it (caf\\xe9.txt)"
            )
        if name is call.name and call_id is call.id and arguments is call.arguments:
            return call
        return ToolCallBlock(id=call_id, name=name, arguments=arguments)

    def _add_usage(self, rec: RunRecorder, usage: Usage) -> None:
        self.usage = self.usage + usage
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
