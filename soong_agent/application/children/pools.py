"""Worker pools (AGT-4) and what children may spend: the `[agents]` limits, the declared pools
and workers, and the tallies of what each worker and pool spent for an orchestrator session."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from soong_agent.domain.run_limits import RunLimits
from soong_agent.ports.events import ChildFinished
from soong_agent.ports.storage import SessionStore
from soong_agent.ports.streaming import Usage

__all__ = ["ChildLimits", "Tally", "Worker", "WorkerPool", "WorkerPools", "tokens_of"]


@dataclass(frozen=True, slots=True)
class ChildLimits:
    """`[agents]`: how many children, how many at once, how long."""

    max_children_per_run: int = 8
    max_concurrent_per_session: int = 4
    timeout_s: float = 600.0
    cancel_timeout_s: float = 30.0
    default_sub_agent: str = "default_sub_agent"
    default_fork_agent: str = "default_fork_agent"


@dataclass(frozen=True, slots=True)
class Worker:
    """One declared worker of a pool (AGT-4)."""

    pool: str
    worker_id: str
    agent: str
    allowed_tools: tuple[str, ...] | None = None
    limits: RunLimits = field(default_factory=RunLimits)
    """The worker's budgets over all the tasks it does for one orchestrator session."""


@dataclass(frozen=True, slots=True)
class WorkerPool:
    """A pool of workers, and its budgets over all of them (per orchestrator session)."""

    pool_id: str
    workers: tuple[Worker, ...]
    limits: RunLimits = field(default_factory=RunLimits)


@dataclass(slots=True)
class Tally:
    """What runs spent: their usage, cost (None: unknown) and number."""

    usage: Usage = field(default_factory=Usage)
    cost: float | None = None
    runs: int = 0

    def add(self, usage: Usage, cost: float | None) -> None:
        self.usage = self.usage + usage
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost
        self.runs += 1


def tokens_of(usage: Usage) -> int:
    """Input and output tokens, cache included: what `max_tokens` budgets count."""
    return (
        usage.input_tokens
        + usage.output_tokens
        + usage.cache_read_tokens
        + usage.cache_write_tokens
    )


class WorkerPools:
    """The orchestrator's pools of one runtime: which worker is at work for which session,
    and what each worker and pool spent for it."""

    def __init__(self, pools: Sequence[WorkerPool] = ()) -> None:
        self.pools: dict[str, WorkerPool] = {p.pool_id: p for p in pools}
        self._busy: set[tuple[str, str, str]] = set()  # (session, pool, worker) at work
        self._free = asyncio.Event()
        self._worker_tally: dict[tuple[str, str, str], Tally] = {}
        self._pool_tally: dict[tuple[str, str], Tally] = {}
        self._loaded: set[str] = set()

    def text(self) -> str:
        """The pools and their workers, one clause each (for `dispatch_worker`'s description)."""
        return "; ".join(
            f"{p.pool_id} ({', '.join(f'{w.worker_id}: {w.agent}' for w in p.workers)})"
            for p in self.pools.values()
        )

    def worker_tally(self, session_id: str, pool: str, worker: str) -> Tally:
        return self._worker_tally.setdefault((session_id, pool, worker), Tally())

    def pool_tally(self, session_id: str, pool: str) -> Tally:
        return self._pool_tally.setdefault((session_id, pool), Tally())

    def count(
        self, session_id: str, pool: str, worker: str, usage: Usage, cost: float | None
    ) -> None:
        """A worker's run for `session_id` spent `usage` and `cost`: its and its pool's."""
        self.worker_tally(session_id, pool, worker).add(usage, cost)
        self.pool_tally(session_id, pool).add(usage, cost)

    async def load_tallies(self, session_id: str, store: SessionStore) -> None:
        """What the workers and pools spent for the orchestrator session `session_id` before
        this process (its runs' `child_finished` events), read once per session: the budgets
        of `agents.worker_pools` cover the whole session, across restarts."""
        if session_id in self._loaded:
            return
        self._loaded.add(session_id)
        for run in await store.list_runs(session_id):
            for event in await store.run_events(run.id):
                if isinstance(event, ChildFinished) and event.pool and event.worker:
                    self.count(session_id, event.pool, event.worker, event.usage, event.cost_usd)

    async def take_worker(
        self, session_id: str, pool: WorkerPool, wanted: str | None
    ) -> tuple[Worker, RunLimits] | str:
        """A worker of `pool` free to work for `session_id` (waiting while all are busy) and
        the budgets it has left; or why none can work."""
        pool_left = _left(pool.limits, self.pool_tally(session_id, pool.pool_id))
        if pool_left is None:
            return f"the budget of pool {pool.pool_id!r} is spent"
        candidates = [w for w in pool.workers if wanted is None or w.worker_id == wanted]
        if not candidates:
            known = ", ".join(w.worker_id for w in pool.workers)
            return f"pool {pool.pool_id!r} has no worker {wanted!r}; its workers: {known}"
        while True:
            usable: list[tuple[int, int, Worker, RunLimits]] = []
            for index, worker in enumerate(candidates):
                tally = self.worker_tally(session_id, worker.pool, worker.worker_id)
                left = _left(worker.limits, tally)
                if left is not None:
                    usable.append((tally.runs, index, worker, left.within(pool_left)))
            if not usable:
                return (
                    f"every worker of pool {pool.pool_id!r} that could take it has spent its budget"
                )
            busy = self._busy
            idle = [u for u in usable if (session_id, pool.pool_id, u[2].worker_id) not in busy]
            if idle:
                _, _, worker, left = min(idle, key=lambda u: (u[0], u[1]))
                self._busy.add((session_id, pool.pool_id, worker.worker_id))
                return worker, left
            self._free.clear()
            await self._free.wait()

    def release_worker(self, session_id: str, worker: Worker) -> None:
        self._busy.discard((session_id, worker.pool, worker.worker_id))
        self._free.set()


def _left(limits: RunLimits, tally: Tally) -> RunLimits | None:
    return limits.left(cost_usd=tally.cost, tokens=tokens_of(tally.usage), elapsed_ms=0)
