"""Group commit: turn batches are written in order by one background task.

When the store keeps up (a real model takes far longer than a commit), every turn boundary is its
own transaction as soon as it happens. When it falls behind (an instant scripted model), the
batches that queued up meanwhile are merged into one transaction, and a caller that gets more
than `max_lag` boundaries ahead waits, so memory and the durability lag stay bounded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from soong_agent.ports.storage import SessionInfo, SessionStore, TurnCommit


def merge(batches: list[TurnCommit]) -> TurnCommit:
    """One batch standing for several consecutive ones (later session/run state wins)."""
    if len(batches) == 1:
        return batches[0]
    last = batches[-1]
    return TurnCommit(
        session=last.session,
        run=last.run,
        messages=[m for b in batches for m in b.messages],
        events=[e for b in batches for e in b.events],
        at=last.at,
        fence=last.fence,
    )


class GroupCommitWriter:
    """Writes batches in submission order; `flush` waits until all are durable."""

    def __init__(self, store: SessionStore, *, max_lag: int = 8) -> None:
        self._store = store
        self._direct = store.commit_survives_cancel
        self._max_lag = max_lag
        self._queue: list[TurnCommit] = []
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._progress: asyncio.Event | None = None  # set each time a transaction ends
        self.saved: SessionInfo | None = None
        """The session header of the last batch written (None before the first)."""

    async def submit(self, batch: TurnCommit) -> None:
        """Queue a batch; waits only when `max_lag` batches are already waiting."""
        lagging = self.offer(batch)
        if lagging is not None:
            await lagging

    def offer(self, batch: TurnCommit) -> Awaitable[None] | None:
        """Queue a batch; None, or what to await first when `max_lag` batches are waiting
        (`submit` without a coroutine for the usual case)."""
        self._raise_failure()
        self._queue.append(batch)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._drain())
        if len(self._queue) >= self._max_lag:
            return self._catch_up()
        return None

    async def _catch_up(self) -> None:
        assert self._task is not None
        while len(self._queue) >= self._max_lag and not self._task.done():
            # wait for the transaction in flight to end (it empties the queue into the next)
            progress = self._progress = self._progress or asyncio.Event()
            progress.clear()
            await progress.wait()
        self._raise_failure()

    async def write(self, batch: TurnCommit) -> None:
        """`submit` then `flush`: wait until `batch`, and every batch before it, is durable.

        With nothing queued or in flight (a run's first and last boundary) and a store whose
        commit survives its caller's cancellation (`commit_survives_cancel`, see
        `SessionStore.commit`), the batch is committed by this call itself, without a drain
        task and a shield between it and the store; any other store gets them.
        """
        task = self._task
        if self._queue or (task is not None and not task.done()) or not self._direct:
            await self.submit(batch)
            await self.flush()
            return
        self._raise_failure()
        try:
            await self._store.commit(batch)
        except Exception as exc:  # kept, like a drained batch's failure: later batches fail too
            self._error = exc
            raise
        self.saved = batch.session

    async def flush(self) -> None:
        """Wait until every submitted batch is written; re-raise a write failure."""
        if self._task is not None:
            # shielded: cancelling the run must not abandon a write half way
            await asyncio.shield(self._task)
        self._raise_failure()

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    async def _drain(self) -> None:
        while self._queue:
            batches, self._queue = self._queue, []
            try:
                await self._store.commit(merge(batches))
                self.saved = batches[-1].session
            except Exception as exc:  # kept and re-raised to the loop at its next commit/flush
                self._error = exc
                self._queue.clear()
                return
            finally:
                if self._progress is not None:
                    self._progress.set()
