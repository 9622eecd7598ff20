"""The handle a caller holds for one run: its events as they happen, its result, cancellation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from soong_agent.ports.errors import UsageError
from soong_agent.ports.events import RunEvent, RunStatus
from soong_agent.ports.streaming import Usage
from soong_agent.ports.text import safe_text

if TYPE_CHECKING:
    from soong_agent.application.context.compaction_requests import CompactionRequests


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run ended.

    Attributes:
        status: ``completed``, ``cancelled``, ``failed`` or ``max_turns``.
        final_text: the model's last answer text.
        reason: one line saying why the run did not complete (None when it did).
        error: the exception that failed the run, if any.
    """

    session_id: str
    run_id: str
    status: RunStatus
    final_text: str = ""
    reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None
    turns: int = 0
    error: BaseException | None = None

    @property
    def output(self) -> str:
        """The model's last answer text (same as `final_text`)."""
        return self.final_text

    @property
    def ok(self) -> bool:
        return self.status == "completed"


REPLAY_EVENTS = 5_000


class Run:
    """One run in progress.

    `events()` replays from the first event, so a reader that starts late misses nothing, as
    long as the run has not yet produced more than `replay_events` events that every reader
    has already seen: beyond that, the oldest seen events are let go (they are in the session
    store) so that a run of thousands of turns does not keep all of them in memory.
    """

    def __init__(
        self,
        *,
        session_id: str,
        run_id: str,
        cancel_timeout_s: float,
        replay_events: int = REPLAY_EVENTS,
        compaction: CompactionRequests | None = None,
    ) -> None:
        self.session_id = session_id
        self.run_id = run_id
        self._cancel_timeout_s = cancel_timeout_s
        self._events: list[RunEvent] = []
        self._first = 0  # the sequence index of self._events[0]
        self._keep = replay_events
        self._trim_at = 2 * replay_events
        self._readers: dict[int, int] = {}  # reader id -> next index it will read
        self._waiters: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[RunResult] | None = None
        self._closed = False
        self._compaction = compaction

    # --- the event sink side (the loop) ---------------------------------------------------
    def emit(self, event: RunEvent) -> None:
        events = self._events
        events.append(event)
        if len(events) >= self._trim_at:
            self._trim()
        if self._waiters:
            self._wake()

    def _trim(self) -> None:
        end = self._first + len(self._events) - self._keep
        if self._readers:
            end = min(end, *self._readers.values())
        if end > self._first:
            del self._events[: end - self._first]
            self._first = end

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def attach(self, task: asyncio.Task[RunResult]) -> None:
        """Bind the task that executes the run."""
        self._task = task
        task.add_done_callback(self._on_done)

    def _on_done(self, _task: asyncio.Task[RunResult]) -> None:
        self._closed = True
        self._wake()

    # --- the caller side ------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()

    async def events(self) -> AsyncIterator[RunEvent]:
        """Every event of the run in order, from the first kept one, until the run ends."""
        reader = id(object())
        index = self._first
        self._readers[reader] = index
        try:
            while True:
                while index < self._first + len(self._events):
                    yield self._events[max(index, self._first) - self._first]
                    index = max(index, self._first) + 1
                    self._readers[reader] = index
                if self._closed:
                    return
                waiter = asyncio.get_running_loop().create_future()
                self._waiters.append(waiter)
                await waiter
        finally:
            self._readers.pop(reader, None)

    async def wait(self) -> RunResult:
        """Wait for the run to end and return how it ended.

        Whatever ended the run, a result comes back: a run whose task was cancelled before it
        could end, or that raised (a bug outside the loop's own guard), is a `failed` or
        `cancelled` result with a reason. Only cancelling the waiter itself raises here."""
        if self._task is None:
            raise RuntimeError("the run has not been started")
        try:
            return await asyncio.shield(self._task)
        except asyncio.CancelledError:
            if not self._task.cancelled():
                raise  # the waiter was cancelled, not the run
            return self._outcome()
        except Exception:
            return self._outcome()

    def _outcome(self) -> RunResult:
        """The result of the ended task, a failure or a cancellation told as a result."""
        task = self._task
        assert task is not None and task.done()
        if task.cancelled():
            return RunResult(
                session_id=self.session_id,
                run_id=self.run_id,
                status="cancelled",
                reason="the run's task was cancelled before the run could end",
            )
        error = task.exception()
        if error is None:
            return task.result()
        return RunResult(
            session_id=self.session_id,
            run_id=self.run_id,
            status="failed",
            reason=safe_text(f"internal error: {type(error).__name__}: {error}"),
            error=error,
        )

    async def compact(self) -> Any:
        """Compact the context before the next model call and return the compaction report.

        Returns None when the run ended before it reached another model call.
        """
        if self._compaction is None or self.done:
            raise UsageError("the run has ended; compaction happens inside a running run")
        return await self._compaction.request()

    async def cancel(self) -> RunResult | None:
        """Cancel the run and wait at most `runtime.cancel_timeout_ms` for its terminal state.

        Returns the result when the run ended in time, else None.
        """
        if self._task is None:
            return None
        if not self._task.done():
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=self._cancel_timeout_s)
        if self._task.done():
            return self._outcome()
        return None
