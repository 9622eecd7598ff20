"""The SQLite run queue (WORK-1, WORK-2 on one host): the `run_queue` table of the session
database, so that a worker's claim, its lease and its turns live in one file.

Several worker processes on one machine share the queue: a claim is one `BEGIN IMMEDIATE`
transaction (`queue_db`), so two processes never take one run, and a session commit fenced
with a lease checks, in its own transaction, that the lease still holds
(`SqliteSessionStore.commit`). There is no notification between processes on SQLite:
`wait_for_work` polls the queue's change counter every `poll_s` (one indexed read).

Like the session store, all database work runs on one worker thread of the queue's own, with
its own connection; constructing a queue does no I/O.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from soong_agent.adapters import run_queue_rules as rules
from soong_agent.adapters.storage.queue_db import QueueDatabase
from soong_agent.adapters.storage.side_db import SideStore
from soong_agent.ports.errors import SoongAgentError
from soong_agent.ports.run_queue import Lease, QueuedRun, QueueStatus

log = logging.getLogger(__name__)


class SqliteRunQueue(SideStore[QueueDatabase]):
    """A `RunQueue` in the session database at `db_path` (the file `SqliteSessionStore` uses).

    Refusals are those of every queue (`adapters.run_queue_rules`); a database that cannot be
    created or opened raises `UsageError` naming the path, other database failures (still
    locked after the busy timeout and retries, disk full, ...) `RunError`.

    `wait_for_work` returns True when a run was submitted, released or cancelled since this
    queue's last claim (before any claim: since the wait began), at once if that happened
    already; it looks every `poll_s` seconds. A lease running out wakes nobody: a worker
    claims again when its wait times out.
    """

    def __init__(self, db_path: Path, *, busy_timeout_ms: int = 5000, poll_s: float = 0.1) -> None:
        super().__init__(
            QueueDatabase(Path(db_path), busy_timeout_ms),
            poll_s=poll_s,
            thread="soong-sqlite-queue",
        )
        self._seen: int | None = None

    async def submit(self, run: QueuedRun) -> QueuedRun:
        """Store `run` as queued; `UsageError` when its id is queued already."""
        self._check_open()
        rules.check_submit(run)
        return await self._run(self._db.submit, run)

    async def claim(
        self, worker: str, projects: Sequence[str], *, lease_s: float, max_attempts: int, now: float
    ) -> Lease | None:
        """Take the oldest claimable run of `projects` in one `BEGIN IMMEDIATE` transaction.

        A caller cancelled while the claim is under way does not lose the run: a run claimed
        for it is given back (`release`) at once."""
        self._check_open()
        rules.check_claim(worker, lease_s, max_attempts)
        served = rules.served(projects)
        future = self._start(self._db.claim, worker, served, lease_s, max_attempts, now)
        try:
            lease, wake = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.add_done_callback(self._give_back)
            raise
        self._seen = wake
        return lease

    def _give_back(self, future: concurrent.futures.Future[tuple[Lease | None, int]]) -> None:
        """(On the worker thread.) Release the lease of a claim whose caller stopped waiting."""
        if future.cancelled() or future.exception() is not None:
            return
        lease = future.result()[0]
        if lease is None:
            return
        with contextlib.suppress(RuntimeError):  # the queue closed meanwhile: the lease runs out
            self._worker.submit(self._release_quietly, lease)

    def _release_quietly(self, lease: Lease) -> None:
        try:
            self._db.call(self._db.release, lease, time.time())
        except SoongAgentError as exc:  # the lease runs out and the run is taken over
            log.warning(
                "could not give back run %s after its claim was cancelled: %s", lease.run.id, exc
            )

    async def renew(self, lease: Lease, *, lease_s: float, now: float) -> Lease:
        """Extend the lease to `now + lease_s`; `LeaseLost` when the run's fence moved on."""
        self._check_open()
        rules.check_lease(lease_s)
        return await self._run(self._db.renew, lease, lease_s, now)

    async def finish(
        self, lease: Lease, status: QueueStatus, *, reason: str = "", now: float
    ) -> QueuedRun:
        """End the held run with `status`; `LeaseLost` as for `renew`."""
        self._check_open()
        rules.check_end(status)
        return await self._run(self._db.finish, lease, status, reason, now)

    async def release(self, lease: Lease, *, now: float) -> QueuedRun:
        """Give the held run back, queued, its attempt not counted (`cancelled` instead when
        its cancellation was asked for); `LeaseLost` as for `renew`."""
        return await self._run(self._db.release, lease, now)

    async def cancel(self, run_id: str, *, now: float) -> QueuedRun:
        """A queued run ends `cancelled`; a running one is marked `cancel_requested`."""
        return await self._run(self._db.cancel, run_id, now)

    async def get(self, run_id: str) -> QueuedRun | None:
        """The run, or None."""
        return await self._run(self._db.get, run_id)

    async def wait_for_work(self, timeout_s: float) -> bool:
        """Wait for a submit, release or cancel since the last claim, polling every `poll_s`;
        False when `timeout_s` passed first (or the queue was closed meanwhile)."""
        self._check_open()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        while True:
            wake = await self._run(self._db.wake)
            if self._seen is None:
                self._seen = wake
            if wake != self._seen:
                self._seen = wake
                return True
            left = deadline - loop.time()
            if left <= 0:
                return False
            await asyncio.sleep(min(left, self._poll_s))
            if self._closed:
                return False

    async def list(
        self, *, status: QueueStatus | None = None, limit: int = 100
    ) -> Sequence[QueuedRun]:
        """Runs, newest submitted first (only those with `status` when given)."""
        return await self._run(self._db.runs, status, limit)
