"""The table of `PostgresRunQueue` (schema step 5), the SQL it runs, and the channel it notifies.

A run is a row of `run_queue` (the columns of `run_queue_rules.COLUMNS`; `ordinal` keeps the
submit order). A claim takes the oldest claimable row with ``SELECT … FOR UPDATE SKIP LOCKED``:
claimers on any number of hosts each lock a different row, none waits for another. A submit,
a release and a cancel notify `CHANNEL` when they commit, so a waiting worker (LISTEN) wakes
at once. A session commit fenced with a lease reads the run's row ``FOR SHARE`` in its own
transaction (`FENCE_HELD`): a takeover cannot come between that check and the commit.
"""

from __future__ import annotations

from soong_agent.adapters.postgres.ddl import SCHEMA, Step
from soong_agent.adapters.run_queue_rules import COLUMNS

S = SCHEMA

STEPS = (
    Step(
        5,
        "the run queue: submitted runs, their leases and fences",
        (
            f"""CREATE TABLE {S}.run_queue (
                id text PRIMARY KEY,
                ordinal bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
                session_id text NOT NULL,
                project_dir text NOT NULL,
                message text NOT NULL,
                options text NOT NULL,
                status text NOT NULL,
                submitted_at double precision NOT NULL,
                worker text,
                attempts integer NOT NULL DEFAULT 0,
                fence bigint NOT NULL DEFAULT 0,
                lease_expires_at double precision,
                cancel_requested boolean NOT NULL DEFAULT false,
                reason text NOT NULL DEFAULT '',
                finished_at double precision
            )""",
            f"CREATE INDEX run_queue_claimable ON {S}.run_queue (project_dir, submitted_at,"
            " ordinal) WHERE status IN ('queued', 'running')",
            f"CREATE INDEX run_queue_submitted ON {S}.run_queue (submitted_at DESC, ordinal DESC)",
            f"CREATE INDEX run_queue_status ON {S}.run_queue (status, submitted_at DESC,"
            " ordinal DESC)",
        ),
    ),
)

CHANNEL = "soong_agent_run_queue"
NOTIFY = f"SELECT pg_notify('{CHANNEL}', '')"

_COLUMNS = ", ".join(COLUMNS)
_ROW = f"FROM {S}.run_queue"

INSERT = (
    f"INSERT INTO {S}.run_queue ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
    f" %s, %s, %s) ON CONFLICT (id) DO NOTHING RETURNING {_COLUMNS}"
)
GET = f"SELECT {_COLUMNS} {_ROW} WHERE id = %s"
LOCK = f"SELECT {_COLUMNS} {_ROW} WHERE id = %s FOR UPDATE"
SERVER_NOW = "SELECT extract(epoch FROM clock_timestamp())"
"""The server's clock (seconds since the epoch), which leases are measured by across hosts."""
FENCE_HELD = f"SELECT 1 {_ROW} WHERE id = %s AND fence = %s AND status = 'running' FOR SHARE"
"""The session store's check, in its commit's transaction: the lease's fence is the run's."""

CLAIMABLE = (
    f"SELECT {_COLUMNS} {_ROW} AS q WHERE status IN ('queued', 'running')"
    " AND (status = 'queued' OR lease_expires_at <= %(now)s)"
    " AND project_dir = ANY(%(projects)s)"
    f" AND NOT EXISTS (SELECT 1 {_ROW} AS o WHERE o.session_id = q.session_id"
    " AND o.id <> q.id AND o.status = 'running' AND o.lease_expires_at > %(now)s)"
    " ORDER BY submitted_at, ordinal LIMIT 1"
    " FOR UPDATE SKIP LOCKED"
)
"""The oldest run a claim may take (queued, or running under a lease that ended), locked; a
row another claimer has locked is passed over."""
CLAIMED = (
    f"SELECT {_COLUMNS} {_ROW} WHERE status = 'running' AND worker = %(worker)s"
    " AND lease_expires_at = %(expires)s AND project_dir = ANY(%(projects)s)"
    " ORDER BY submitted_at, ordinal LIMIT 1"
)
"""A claim tried again after its connection was lost: the run it may have taken already."""
TAKE = (
    f"UPDATE {S}.run_queue SET status = 'running', worker = %(worker)s,"
    " attempts = attempts + 1, fence = fence + 1, lease_expires_at = %(expires)s"
    f" WHERE id = %(id)s RETURNING {_COLUMNS}"
)
SESSION_RUNS = f"SELECT id, status, reason FROM {S}.runs WHERE session_id = %s"
"""The runs of a queued run's session: whether its last attempt ended."""
END = (
    f"UPDATE {S}.run_queue SET status = %(status)s, reason = %(reason)s,"
    f" finished_at = %(now)s, lease_expires_at = NULL WHERE id = %(id)s RETURNING {_COLUMNS}"
)
_HELD = "id = %(id)s AND fence = %(fence)s AND status = 'running'"
RENEW = (
    f"UPDATE {S}.run_queue SET lease_expires_at = %(expires)s WHERE {_HELD} RETURNING {_COLUMNS}"
)
FINISH = (
    f"UPDATE {S}.run_queue SET status = %(status)s, reason = %(reason)s,"
    f" finished_at = %(now)s, lease_expires_at = NULL WHERE {_HELD} RETURNING {_COLUMNS}"
)
RELEASE = (
    f"UPDATE {S}.run_queue SET"
    " status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'queued' END,"
    " reason = CASE WHEN cancel_requested THEN %(reason)s ELSE reason END,"
    " finished_at = CASE WHEN cancel_requested THEN %(now)s ELSE finished_at END,"
    " attempts = CASE WHEN cancel_requested THEN attempts ELSE greatest(attempts - 1, 0) END,"
    f" lease_expires_at = NULL WHERE {_HELD} RETURNING {_COLUMNS}"
)
"""Queued again, the attempt not counted; `cancelled` when its cancellation was asked for."""
ASK_CANCEL = f"UPDATE {S}.run_queue SET cancel_requested = true WHERE id = %s RETURNING {_COLUMNS}"

LIST = f"SELECT {_COLUMNS} {_ROW} ORDER BY submitted_at DESC, ordinal DESC LIMIT %s"
LIST_STATUS = (
    f"SELECT {_COLUMNS} {_ROW} WHERE status = %s ORDER BY submitted_at DESC, ordinal DESC LIMIT %s"
)
