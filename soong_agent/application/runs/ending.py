"""How a run's end is written when it did not end on its own: the turn it left open closed,
an end the store refused reported, and the `session_end` hook that may not cost the end."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from soong_agent.application.hooks import RunHooks
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.runs.turn import Turn
from soong_agent.domain.history import synthetic_results, unanswered_calls
from soong_agent.ports.events import ErrorEvent, RunStatus, ToolResultEvent
from soong_agent.ports.messages import Message, ToolResultBlock
from soong_agent.ports.text import safe_text

__all__ = ["CANCELLED", "INTERRUPTED", "close_open_turn", "record_unsaved", "session_end"]

INTERRUPTED = "This tool call did not run: the run was interrupted before it finished."
CANCELLED = "This tool call did not finish: the user cancelled the run."


def close_open_turn(
    rec: RunRecorder,
    turn: Turn | None,
    reason: str,
    *,
    completed: Mapping[str, ToolResultBlock],
    answer: list[str],
) -> None:
    """Keep the partial text of the turn being streamed (`answer` gets it when the turn made
    no calls) and give every started tool call exactly one result: its `completed` one, or
    `reason`."""
    streaming = turn is not None and rec.history and rec.history[-1].role != "assistant"
    if turn is not None and streaming and (turn.text or turn.thinking or turn.closed_thinking):
        partial = Turn(text=turn.text, thinking=turn.thinking, closed_thinking=turn.closed_thinking)
        kept = rec.add_message(Message(role="assistant", content=partial.content()))
        if not turn.calls:  # the result's text is what was said, too
            answer.append(kept.text)
    pending = unanswered_calls(rec.history)
    if not pending:
        return
    results: list[ToolResultBlock] = []
    for call in pending:
        block = completed.get(call.id)
        if block is None:
            block = synthetic_results([call], reason)[0]
            rec.event(
                ToolResultEvent, call_id=call.id, name=call.name, content=reason, is_error=True
            )
        results.append(block)
    rec.add_message(Message(role="tool", content=list(results)))


async def record_unsaved(rec: RunRecorder, reason: str | None, exc: BaseException) -> str:
    """The reason of a run whose end could not be written as it was (`exc`): the run's status
    and reason are written alone (on the last session header that was saved); if even that
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
    return reason


async def session_end(
    hooks: RunHooks, rec: RunRecorder, *, status: RunStatus, turns: int, cost: float | None
) -> None:
    """Fire the `session_end` hook; hooks fail open: a broken one is an event, never a lost
    end."""
    try:
        await hooks.session_end(rec, status=status, turns=turns, cost_usd=cost)
    except Exception as exc:
        rec.event(
            ErrorEvent,
            kind="hook",
            message=safe_text(f"session_end hook failed: {type(exc).__name__}: {exc}"),
            fatal=False,
        )
