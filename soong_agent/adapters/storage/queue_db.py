"""The run queue's side of the session database (`SqliteRunQueue`): its connection and every
operation, used only on the queue's worker thread.

Each write is one `BEGIN IMMEDIATE` transaction: SQLite lets one writer in at a time, across
every connection and process on the machine, so the read of the oldest claimable run and its
update are one step — two workers never claim one run. The connection is opened as the
session store opens its own (`transactions`: WAL, the busy timeout, the schema made sure of),
so whichever opens the database first creates the queue's table too.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from soong_agent.adapters import run_queue_rules as rules
from soong_agent.adapters.storage import queue_sql as sql
from soong_agent.adapters.storage.side_db import SideDatabase
from soong_agent.ports.run_queue import Lease, LeaseLost, QueuedRun, QueueStatus, RunNotQueued

_T = TypeVar("_T")


def _params(run: QueuedRun) -> dict[str, Any]:
    params = {name: getattr(run, name) for name in rules.COLUMNS}
    params["options"] = rules.options_json(run.options)
    params["cancel_requested"] = int(run.cancel_requested)
    return params


class QueueDatabase(SideDatabase):
    """The queue's connection and statements; used only on the queue's worker thread."""

    def __init__(self, path: Path, busy_timeout_ms: int) -> None:
        super().__init__(path, busy_timeout_ms, what="the run queue")

    @staticmethod
    def _get(c: sqlite3.Connection, run_id: str) -> QueuedRun | None:
        row = c.execute(sql.GET, {"id": run_id}).fetchone()
        return None if row is None else rules.queued_run(row)

    @staticmethod
    def _held(c: sqlite3.Connection, lease: Lease) -> QueuedRun:
        row = c.execute(sql.HELD, {"id": lease.run.id, "fence": lease.fence}).fetchone()
        if row is None:
            raise LeaseLost(lease.run.id, lease.fence)
        return rules.queued_run(row)

    # --- operations ------------------------------------------------------------------------

    def submit(self, run: QueuedRun) -> QueuedRun:
        stored = rules.submitted(run)

        def work(c: sqlite3.Connection) -> QueuedRun:
            if c.execute(sql.GET, {"id": run.id}).fetchone() is not None:
                raise rules.duplicate(run.id)
            c.execute(sql.INSERT, _params(stored))
            return stored

        return self._write(work)

    def claim(
        self, worker: str, projects: Sequence[str], lease_s: float, max_attempts: int, now: float
    ) -> tuple[Lease | None, int]:
        """The lease of the run taken (None: nothing to take) and the queue's change counter
        as the claim saw it."""
        params: dict[str, Any] = {f"p{i}": p for i, p in enumerate(projects)}
        params["now"] = now
        find = sql.claimable(len(projects))

        def work(c: sqlite3.Connection) -> tuple[Lease | None, int]:
            wake = int(c.execute(sql.WAKE).fetchone()[0])
            while (row := c.execute(find, params).fetchone()) is not None:
                run = rules.queued_run(row)
                step = rules.claim_step(
                    run.status, run.attempts, run.cancel_requested, max_attempts
                )
                if step == "take":
                    expires = now + lease_s
                    c.execute(sql.TAKE, {"id": run.id, "worker": worker, "expires": expires})
                    taken = self._get(c, run.id)
                    assert taken is not None
                    return Lease(taken, worker, taken.fence, expires), wake
                status: QueueStatus = "cancelled" if step == "cancel" else "failed"
                reason = rules.CANCELLED_ABANDONED
                if step != "cancel":
                    ended = rules.recorded_end(run, _session_runs(c, run.session_id))
                    status, reason = ended or (
                        "failed",
                        rules.exhausted_reason(run.attempts, max_attempts),
                    )
                c.execute(sql.END, {"id": run.id, "status": status, "reason": reason, "now": now})
            return None, wake

        if not projects:
            return None, self.wake()
        return self._write(work)

    def renew(self, lease: Lease, lease_s: float, now: float) -> Lease:
        expires = now + lease_s

        def work(c: sqlite3.Connection) -> Lease:
            c.execute(sql.RENEW, {"id": lease.run.id, "fence": lease.fence, "expires": expires})
            return Lease(self._held(c, lease), lease.worker, lease.fence, expires)

        return self._write(work)

    def finish(self, lease: Lease, status: QueueStatus, reason: str, now: float) -> QueuedRun:
        def work(c: sqlite3.Connection) -> QueuedRun:
            self._held(c, lease)
            params = {"id": lease.run.id, "status": status, "reason": reason, "now": now}
            c.execute(sql.END, params)
            ended = self._get(c, lease.run.id)
            assert ended is not None
            return ended

        return self._write(work)

    def release(self, lease: Lease, now: float) -> QueuedRun:
        def work(c: sqlite3.Connection) -> QueuedRun:
            run = self._held(c, lease)
            if run.cancel_requested:
                params = {"id": run.id, "status": "cancelled", "now": now}
                c.execute(sql.END_AND_WAKE, {**params, "reason": rules.CANCELLED_RUNNING})
            else:
                c.execute(sql.REQUEUE, {"id": run.id})
            back = self._get(c, run.id)
            assert back is not None
            return back

        return self._write(work)

    def cancel(self, run_id: str, now: float) -> QueuedRun:
        def work(c: sqlite3.Connection) -> QueuedRun:
            run = self._get(c, run_id)
            if run is None:
                raise RunNotQueued(run_id)
            if run.status == "queued":
                params = {"id": run_id, "status": "cancelled", "now": now}
                c.execute(sql.END_AND_WAKE, {**params, "reason": rules.CANCELLED_QUEUED})
            elif run.status == "running":
                c.execute(sql.ASK_CANCEL, {"id": run_id})
            else:
                return run
            changed = self._get(c, run_id)
            assert changed is not None
            return changed

        return self._write(work)

    def get(self, run_id: str) -> QueuedRun | None:
        return self._get(self.connection(), run_id)

    def runs(self, status: QueueStatus | None, limit: int) -> list[QueuedRun]:
        if limit <= 0:
            return []
        if status is None:
            rows = self.connection().execute(sql.LIST, {"limit": limit}).fetchall()
        else:
            params = {"status": status, "limit": limit}
            rows = self.connection().execute(sql.LIST_STATUS, params).fetchall()
        return [rules.queued_run(r) for r in rows]

    def wake(self) -> int:
        """The queue's change counter."""
        return int(self.connection().execute(sql.WAKE).fetchone()[0])


def _session_runs(c: sqlite3.Connection, session_id: str) -> list[tuple[str, str, str | None]]:
    """The runs of a session (none before the session store made its tables)."""
    try:
        rows = c.execute(sql.SESSION_RUNS, (session_id,)).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise
    return [(str(i), str(s), None if r is None else str(r)) for i, s, r in rows]
