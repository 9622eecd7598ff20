"""The SQL of `SqliteRunQueue` and of the fence check in `SqliteSessionStore.commit`.

The `run_queue` table is declared with the others in `tables.py` (its DDL pinned in
`sql.SCHEMA_DDL`, so either store creates it when it opens the database). These statements are
written by hand (the tests run each on a created schema and check that none scans the table).
Every write runs in a `BEGIN IMMEDIATE` transaction, so a claim's read and its update are one
step no other process can come between.

`wake` is the queue's change counter: a submit, a release and a cancel set the run's `wake` to
one more than the largest, which a waiting worker polls (`WAKE`).
"""

from __future__ import annotations

from soong_agent.adapters.run_queue_rules import COLUMNS

_COLUMNS = ", ".join(COLUMNS)
_NEXT_WAKE = "(SELECT coalesce(max(q.wake), 0) + 1 FROM run_queue AS q)"

INSERT = (
    f"INSERT INTO run_queue ({_COLUMNS}, wake) VALUES (:id, :session_id, :project_dir, :message,"
    " :options, :status, :submitted_at, :worker, :attempts, :fence, :lease_expires_at,"
    f" :cancel_requested, :reason, :finished_at, {_NEXT_WAKE})"
)
GET = f"SELECT {_COLUMNS} FROM run_queue WHERE id = :id"
HELD = f"SELECT {_COLUMNS} FROM run_queue WHERE id = :id AND fence = :fence AND status = 'running'"
FENCE_HELD = "SELECT 1 FROM run_queue WHERE id = ? AND fence = ? AND status = 'running'"
"""The session store's check, in its commit's transaction: the lease's fence is the run's."""
WAKE = "SELECT coalesce(max(wake), 0) FROM run_queue"

LIST = f"SELECT {_COLUMNS} FROM run_queue ORDER BY submitted_at DESC, rowid DESC LIMIT :limit"
LIST_STATUS = (
    f"SELECT {_COLUMNS} FROM run_queue WHERE status = :status"
    " ORDER BY submitted_at DESC, rowid DESC LIMIT :limit"
)


def claimable(projects: int) -> str:
    """The oldest run of `:p0` … that a claim may take: queued, or running under a lease that
    ended at or before `:now`; not one whose session another run holds under a live lease
    (it would only be refused, and keep the runs behind it waiting)."""
    names = ", ".join(f":p{i}" for i in range(projects))
    return (
        f"SELECT {_COLUMNS} FROM run_queue AS q WHERE status IN ('queued', 'running')"
        " AND (status = 'queued' OR lease_expires_at <= :now)"
        f" AND project_dir IN ({names})"
        " AND NOT EXISTS (SELECT 1 FROM run_queue AS o WHERE o.session_id = q.session_id"
        " AND o.id <> q.id AND o.status = 'running' AND o.lease_expires_at > :now)"
        " ORDER BY submitted_at, rowid LIMIT 1"
    )


TAKE = (
    "UPDATE run_queue SET status = 'running', worker = :worker, attempts = attempts + 1,"
    " fence = fence + 1, lease_expires_at = :expires WHERE id = :id"
)
SESSION_RUNS = "SELECT id, status, reason FROM runs WHERE session_id = ?"
"""The runs of a queued run's session (in the same file): whether its last attempt ended."""
END = (
    "UPDATE run_queue SET status = :status, reason = :reason, finished_at = :now,"
    " lease_expires_at = NULL WHERE id = :id"
)
END_AND_WAKE = (
    "UPDATE run_queue SET status = :status, reason = :reason, finished_at = :now,"
    f" lease_expires_at = NULL, wake = {_NEXT_WAKE} WHERE id = :id"
)
RENEW = (
    "UPDATE run_queue SET lease_expires_at = :expires"
    " WHERE id = :id AND fence = :fence AND status = 'running'"
)
REQUEUE = (
    "UPDATE run_queue SET status = 'queued', attempts = max(attempts - 1, 0),"
    f" lease_expires_at = NULL, wake = {_NEXT_WAKE} WHERE id = :id"
)
ASK_CANCEL = f"UPDATE run_queue SET cancel_requested = 1, wake = {_NEXT_WAKE} WHERE id = :id"
