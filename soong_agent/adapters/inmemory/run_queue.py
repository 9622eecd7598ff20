"""An in-memory `RunQueue`: the real queues' behaviour in plain Python, for tests.

It follows the same contract as `SqliteRunQueue` and `PostgresRunQueue` (the shared contract
suite runs on all three), refusing what they refuse (`adapters.run_queue_rules`):

- `submit` stores the run queued (its attempts, fence, lease and end reset); an id used before
  is refused (`UsageError`), as are a run without id, session or project folder.
- `claim` takes the oldest run (by `submitted_at`, then submit order) of the served project
  folders (compared as given) that is queued, or running under a lease that ended at or
  before `now`; its attempts and fence go up by one. A run claimed `max_attempts` times
  already ends `failed` instead (with a reason), a running one whose cancellation was asked
  for ends `cancelled`, and the claim looks further.
- `renew`, `finish` and `release` raise `LeaseLost` unless the run is still `running` under
  the lease's fence. `release` of a run whose cancellation was asked for ends it `cancelled`.
- `wait_for_work` returns True when a run was submitted, released or cancelled since this
  queue's last claim (or, before any, since the wait began), at once if that happened
  already; False when `timeout_s` passes first. A lease running out wakes nobody.
- After `close()` every method raises `UsageError`; a wait under way returns False.

`holds(fence)` says whether a commit fenced with it may be written (`InMemorySessionStore`
checks its batches' fences with it when it is given the queue).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Sequence

from soong_agent.adapters import run_queue_rules as rules
from soong_agent.ports.errors import UsageError
from soong_agent.ports.run_queue import (
    Lease,
    LeaseLost,
    QueuedRun,
    QueueStatus,
    RunNotQueued,
)
from soong_agent.ports.storage import RunFence


class InMemoryRunQueue:
    """A `RunQueue` kept in a dictionary; nothing survives the process."""

    def __init__(self) -> None:
        self._runs: dict[str, QueuedRun] = {}
        self._order: dict[str, int] = {}
        self._wake = 0
        self._seen: int | None = None
        self._waiters: set[asyncio.Future[None]] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"InMemoryRunQueue({len(self._runs)} runs)"

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("the in-memory run queue is closed")

    def _poke(self) -> None:
        self._wake += 1
        for waiting in self._waiters:
            if not waiting.done():
                waiting.set_result(None)

    def _held(self, lease: Lease) -> QueuedRun:
        self._check_open()
        run = self._runs.get(lease.run.id)
        if run is None or run.fence != lease.fence or run.status != "running":
            raise LeaseLost(lease.run.id, lease.fence)
        return run

    def _store(self, run: QueuedRun) -> QueuedRun:
        self._runs[run.id] = run
        return run

    def holds(self, fence: RunFence) -> bool:
        """Whether the run of `fence` is running under exactly that fence."""
        run = self._runs.get(fence.run_id)
        return run is not None and run.fence == fence.fence and run.status == "running"

    async def submit(self, run: QueuedRun) -> QueuedRun:
        """Store `run` as queued and wake a waiting worker."""
        self._check_open()
        rules.check_submit(run)
        if run.id in self._runs:
            raise rules.duplicate(run.id)
        self._order[run.id] = len(self._order)
        stored = self._store(rules.submitted(run))
        self._poke()
        return stored

    async def claim(
        self, worker: str, projects: Sequence[str], *, lease_s: float, max_attempts: int, now: float
    ) -> Lease | None:
        """Take the oldest claimable run of `projects` (see the module's docstring)."""
        self._check_open()
        rules.check_claim(worker, lease_s, max_attempts)
        served = set(rules.served(projects))
        self._seen = self._wake
        while True:
            found = [
                r
                for r in self._runs.values()
                if r.project_dir in served
                and (
                    r.status == "queued"
                    or (
                        r.status == "running"
                        and r.lease_expires_at is not None
                        and r.lease_expires_at <= now
                    )
                )
                and not any(  # another run holds its session under a live lease
                    o.session_id == r.session_id
                    and o.id != r.id
                    and o.status == "running"
                    and o.lease_expires_at is not None
                    and o.lease_expires_at > now
                    for o in self._runs.values()
                )
            ]
            if not found:
                return None
            run = min(found, key=lambda r: (r.submitted_at, self._order[r.id]))
            step = rules.claim_step(run.status, run.attempts, run.cancel_requested, max_attempts)
            if step == "cancel":
                self._end(run, "cancelled", rules.CANCELLED_ABANDONED, now)
            elif step == "fail":
                self._end(run, "failed", rules.exhausted_reason(run.attempts, max_attempts), now)
            else:
                taken = self._store(
                    dataclasses.replace(
                        run,
                        status="running",
                        worker=worker,
                        attempts=run.attempts + 1,
                        fence=run.fence + 1,
                        lease_expires_at=now + lease_s,
                    )
                )
                return Lease(taken, worker, taken.fence, now + lease_s)

    def _end(self, run: QueuedRun, status: QueueStatus, reason: str, now: float) -> QueuedRun:
        return self._store(
            dataclasses.replace(
                run, status=status, reason=reason, finished_at=now, lease_expires_at=None
            )
        )

    async def renew(self, lease: Lease, *, lease_s: float, now: float) -> Lease:
        """Extend the lease to `now + lease_s`; `LeaseLost` when the run's fence moved on."""
        rules.check_lease(lease_s)
        run = self._store(dataclasses.replace(self._held(lease), lease_expires_at=now + lease_s))
        return Lease(run, lease.worker, lease.fence, now + lease_s)

    async def finish(
        self, lease: Lease, status: QueueStatus, *, reason: str = "", now: float
    ) -> QueuedRun:
        """End the held run with `status`; `LeaseLost` as for `renew`."""
        rules.check_end(status)
        return self._end(self._held(lease), status, reason, now)

    async def release(self, lease: Lease, *, now: float) -> QueuedRun:
        """Give the held run back, queued, its attempt not counted (`cancelled` instead when
        its cancellation was asked for)."""
        run = self._held(lease)
        if run.cancel_requested:
            ended = self._end(run, "cancelled", rules.CANCELLED_RUNNING, now)
        else:
            ended = self._store(
                dataclasses.replace(
                    run, status="queued", attempts=max(0, run.attempts - 1), lease_expires_at=None
                )
            )
        self._poke()
        return ended

    async def cancel(self, run_id: str, *, now: float) -> QueuedRun:
        """A queued run ends `cancelled`; a running one is marked `cancel_requested`."""
        self._check_open()
        run = self._runs.get(run_id)
        if run is None:
            raise RunNotQueued(run_id)
        if run.status == "queued":
            run = self._end(run, "cancelled", rules.CANCELLED_QUEUED, now)
        elif run.status == "running":
            run = self._store(dataclasses.replace(run, cancel_requested=True))
        else:
            return run
        self._poke()
        return run

    async def get(self, run_id: str) -> QueuedRun | None:
        """The run, or None."""
        self._check_open()
        return self._runs.get(run_id)

    async def wait_for_work(self, timeout_s: float) -> bool:
        """Wait for a submit, release or cancel since the last claim (see the docstring)."""
        self._check_open()
        if self._seen is None:
            self._seen = self._wake
        if self._wake == self._seen and timeout_s > 0:
            waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.add(waiting)
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiting, timeout=timeout_s)
            finally:
                self._waiters.discard(waiting)
        woken = self._wake != self._seen
        self._seen = self._wake
        return woken and not self._closed

    async def close(self) -> None:
        """Mark the queue closed; a wait under way returns False."""
        self._closed = True
        for waiting in self._waiters:
            if not waiting.done():
                waiting.set_result(None)

    async def list(
        self, *, status: QueueStatus | None = None, limit: int = 100
    ) -> Sequence[QueuedRun]:
        """Runs, newest submitted first (only those with `status` when given)."""
        self._check_open()
        if limit <= 0:
            return []
        runs = sorted(
            (r for r in self._runs.values() if status is None or r.status == status),
            key=lambda r: (r.submitted_at, self._order[r.id]),
            reverse=True,
        )
        return runs[:limit]
