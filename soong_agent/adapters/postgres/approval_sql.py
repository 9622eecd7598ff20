"""The table of `PostgresApprovalStore` (schema step 6), the SQL it runs, and the channel it
notifies.

An approval is a row of `approvals` (the columns of `approval_rules.COLUMNS`; `ordinal` keeps
the ask order). An answer or an expiry locks the row (``FOR UPDATE``), reads its status and
changes it only while it is pending, in one transaction: of two answers given at once the
second waits for the first's lock, then finds it answered. An ask, an answer and an expiry
notify `CHANNEL` with the approval's id when they commit, so a run waiting for its answer
(LISTEN) wakes at once, on whichever host it runs.
"""

from __future__ import annotations

from soong_agent.adapters.approval_rules import COLUMNS
from soong_agent.adapters.postgres.ddl import SCHEMA, Step

S = SCHEMA

STEPS = (
    Step(
        6,
        "approvals: the questions of detached runs and their answers",
        (
            f"""CREATE TABLE {S}.approvals (
                id text PRIMARY KEY,
                ordinal bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
                run_id text NOT NULL,
                session_id text NOT NULL,
                project_dir text NOT NULL,
                tool text NOT NULL,
                call_id text NOT NULL DEFAULT '',
                summary text NOT NULL DEFAULT '',
                arguments text NOT NULL DEFAULT '',
                detail text NOT NULL DEFAULT '',
                scope text NOT NULL DEFAULT '',
                asked_at double precision NOT NULL,
                status text NOT NULL,
                decision text,
                answered_by text,
                answered_at double precision
            )""",
            f"CREATE INDEX approvals_asked ON {S}.approvals (asked_at DESC, ordinal DESC)",
            f"CREATE INDEX approvals_status ON {S}.approvals (status, asked_at DESC, ordinal DESC)",
            f"CREATE INDEX approvals_run ON {S}.approvals (run_id, asked_at DESC, ordinal DESC)",
        ),
    ),
)

CHANNEL = "soong_agent_approvals"
NOTIFY = f"SELECT pg_notify('{CHANNEL}', %s)"
"""Notify the approval's id (the payload) to whoever listens."""

_COLUMNS = ", ".join(COLUMNS)
_ROW = f"FROM {S}.approvals"

INSERT = (
    f"INSERT INTO {S}.approvals ({_COLUMNS})"
    f" VALUES ({', '.join(f'%({c})s' for c in COLUMNS)})"
    f" ON CONFLICT (id) DO NOTHING RETURNING {_COLUMNS}"
)
GET = f"SELECT {_COLUMNS} {_ROW} WHERE id = %(id)s"
LOCK = f"{GET} FOR UPDATE"
CLOSE = (
    f"UPDATE {S}.approvals SET status = %(status)s, decision = %(decision)s,"
    " answered_by = %(answered_by)s, answered_at = %(answered_at)s"
    f" WHERE id = %(id)s AND status = 'pending' RETURNING {_COLUMNS}"
)
"""An answer or an expiry: only a pending approval changes."""

_NEWEST = "ORDER BY asked_at DESC, ordinal DESC LIMIT %(limit)s"


def listing(status: str | None, run_id: str | None) -> str:
    """The list statement for the filters given."""
    where = []
    if status is not None:
        where.append("status = %(status)s")
    if run_id is not None:
        where.append("run_id = %(run_id)s")
    condition = f" WHERE {' AND '.join(where)}" if where else ""
    return f"SELECT {_COLUMNS} {_ROW}{condition} {_NEWEST}"
