"""The SQL of `SqliteApprovalStore`.

The `approvals` table is declared with the others in `tables.py` (its DDL pinned in
`sql.SCHEMA_DDL`, so any store of the session database creates it when it opens the file; a
version 3 file gains it then). These statements are written by hand (the contract tests run
them; `tests/integration/test_storage_sql_pinned.py` checks that none scans the table). Every
write runs in a `BEGIN IMMEDIATE` transaction, so an answer's read of the status and its update
are one step no other process can come between.
"""

from __future__ import annotations

from soong_agent.adapters.approval_rules import COLUMNS

_COLUMNS = ", ".join(COLUMNS)

INSERT = f"INSERT INTO approvals ({_COLUMNS}) VALUES ({', '.join(f':{c}' for c in COLUMNS)})"
GET = f"SELECT {_COLUMNS} FROM approvals WHERE id = :id"
CLOSE = (
    "UPDATE approvals SET status = :status, decision = :decision, answered_by = :answered_by,"
    " answered_at = :answered_at WHERE id = :id AND status = 'pending'"
)
"""An answer or an expiry: only a pending approval changes."""

_NEWEST = "ORDER BY asked_at DESC, rowid DESC LIMIT :limit"
LIST = f"SELECT {_COLUMNS} FROM approvals {_NEWEST}"
LIST_STATUS = f"SELECT {_COLUMNS} FROM approvals WHERE status = :status {_NEWEST}"
LIST_RUN = f"SELECT {_COLUMNS} FROM approvals WHERE run_id = :run_id {_NEWEST}"
LIST_RUN_STATUS = (
    f"SELECT {_COLUMNS} FROM approvals WHERE run_id = :run_id AND status = :status {_NEWEST}"
)


def listing(status: str | None, run_id: str | None) -> str:
    """The list statement for the filters given."""
    if run_id is None:
        return LIST if status is None else LIST_STATUS
    return LIST_RUN if status is None else LIST_RUN_STATUS
