"""The tables of `PostgresSessionStore` (schema step 1) and the SQL it runs.

The tables mirror the SQLite store's (`adapters/storage/tables.py`): messages and events hold
the exact pydantic JSON of a message or an event as text, timestamps are Unix seconds. Where
SQLite orders by `rowid`, these tables have an `ordinal` identity column. `session_claims`
says who holds a claimed session (the claim itself is an advisory lock, see `leases`).
"""

from __future__ import annotations

from soong_agent.adapters.postgres.ddl import SCHEMA, Step

S = SCHEMA

STEPS = (
    Step(
        1,
        "sessions, runs, messages, events, marks and claims",
        (
            f"""CREATE TABLE {S}.sessions (
                id text PRIMARY KEY,
                ordinal bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
                project_dir text NOT NULL,
                title text NOT NULL DEFAULT '',
                agent text,
                active_leaf_id text,
                parent_session_id text,
                created_at double precision NOT NULL,
                updated_at double precision NOT NULL
            )""",
            f"CREATE INDEX sessions_updated ON {S}.sessions (updated_at DESC, ordinal DESC)",
            f"CREATE INDEX sessions_parent ON {S}.sessions (parent_session_id, created_at)",
            f"""CREATE TABLE {S}.runs (
                id text PRIMARY KEY,
                ordinal bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
                session_id text NOT NULL REFERENCES {S}.sessions (id),
                status text NOT NULL,
                model text NOT NULL,
                reason text,
                started_at double precision NOT NULL,
                finished_at double precision
            )""",
            f"CREATE INDEX runs_session ON {S}.runs (session_id, started_at, ordinal)",
            f"CREATE INDEX runs_running ON {S}.runs (session_id) WHERE status = 'running'",
            f"""CREATE TABLE {S}.messages (
                ordinal bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                id text NOT NULL,
                session_id text NOT NULL REFERENCES {S}.sessions (id),
                parent_id text,
                parent_ordinal bigint,
                role text NOT NULL,
                kind text NOT NULL,
                content text NOT NULL,
                created_at double precision NOT NULL,
                CONSTRAINT messages_session_id UNIQUE (session_id, id)
            )""",
            f"CREATE INDEX messages_session_ordinal ON {S}.messages (session_id, ordinal)",
            f"""CREATE TABLE {S}.events (
                run_id text NOT NULL REFERENCES {S}.runs (id),
                seq integer NOT NULL,
                session_id text NOT NULL,
                type text NOT NULL,
                payload text NOT NULL,
                at double precision NOT NULL,
                PRIMARY KEY (run_id, seq)
            )""",
            f"""CREATE TABLE {S}.session_marks (
                session_id text NOT NULL REFERENCES {S}.sessions (id),
                key text NOT NULL,
                value text NOT NULL,
                updated_at double precision NOT NULL,
                PRIMARY KEY (session_id, key)
            )""",
            f"""CREATE TABLE {S}.session_claims (
                session_id text PRIMARY KEY,
                holder text NOT NULL,
                claimed_at double precision NOT NULL
            )""",
        ),
    ),
)

# --- writes -------------------------------------------------------------------------------------

UPSERT_SESSION = (
    f"INSERT INTO {S}.sessions (id, project_dir, title, agent, active_leaf_id,"
    " parent_session_id, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (id) DO UPDATE SET title = excluded.title, agent = excluded.agent,"
    " active_leaf_id = excluded.active_leaf_id, updated_at = excluded.updated_at"
)
UPSERT_RUN = (
    f"INSERT INTO {S}.runs (id, session_id, status, model, reason, started_at, finished_at)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET"
    " status = excluded.status, model = excluded.model, reason = excluded.reason,"
    " finished_at = excluded.finished_at"
)
INSERT_NEW_SESSION = (
    f"INSERT INTO {S}.sessions (id, project_dir, title, agent, active_leaf_id,"
    " parent_session_id, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (id) DO NOTHING RETURNING 1"
)
"""A session copied from another store: written only when it is not here yet."""
INSERT_RUN = (
    f"INSERT INTO {S}.runs (id, session_id, status, model, reason, started_at, finished_at)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s)"
)
INSERT_MARK_ROW = (
    f"INSERT INTO {S}.session_marks (session_id, key, value, updated_at) VALUES (%s, %s, %s, %s)"
)
INSERT_MESSAGE = (
    f"INSERT INTO {S}.messages (id, session_id, parent_id, parent_ordinal, role, kind, content,"
    f" created_at) VALUES (%s, %s, %s, (SELECT p.ordinal FROM {S}.messages AS p"
    " WHERE p.session_id = %s AND p.id = %s), %s, %s, %s, %s)"
)
"""Bound from `rows.message_params`; the parent's ordinal is looked up as each row is
inserted, so a parent written earlier in the same batch counts (rows run one by one)."""
INSERT_EVENT = (
    f"INSERT INTO {S}.events (run_id, session_id, seq, type, payload, at)"
    " VALUES (%s, %s, %s, %s, %s, %s)"
)
COPY_EVENTS = f"COPY {S}.events (run_id, session_id, seq, type, payload, at) FROM STDIN"
MESSAGE_CONTENT = f"SELECT content FROM {S}.messages WHERE session_id = %s AND id = %s"
EVENT_PAYLOAD = f"SELECT payload FROM {S}.events WHERE run_id = %s AND seq = %s"

# --- reads --------------------------------------------------------------------------------------

_SESSION_COLUMNS = (
    "id, project_dir, created_at, updated_at, title, agent, active_leaf_id, parent_session_id"
)
GET_SESSION = f"SELECT {_SESSION_COLUMNS} FROM {S}.sessions WHERE id = %s"
LIST_SESSIONS = (
    f"SELECT {_SESSION_COLUMNS} FROM {S}.sessions ORDER BY updated_at DESC, ordinal DESC LIMIT %s"
)
CHILD_SESSIONS = (
    f"SELECT {_SESSION_COLUMNS} FROM {S}.sessions WHERE parent_session_id = %s"
    " ORDER BY created_at, ordinal"
)
ALL_MESSAGES = f"SELECT content FROM {S}.messages WHERE session_id = %s ORDER BY ordinal"
LIST_RUNS = (
    f"SELECT id, session_id, started_at, status, finished_at, reason, model FROM {S}.runs"
    " WHERE session_id = %s ORDER BY started_at, ordinal"
)
RUN_EVENTS = f"SELECT payload FROM {S}.events WHERE run_id = %s ORDER BY seq"

# --- the active path ----------------------------------------------------------------------------

TAIL = (
    f"SELECT ordinal, parent_ordinal, content FROM {S}.messages"
    " WHERE session_id = %s AND ordinal <= %s ORDER BY ordinal DESC LIMIT %s"
)
"""The session's messages from an ordinal backwards in write order. When a path was written in
one go (no branch since, the usual case) these rows *are* the path, read through the
(session_id, ordinal) index without the recursion of `WALK`."""
TAIL_ACTIVE = TAIL.replace(
    "ordinal <= %s",
    f"ordinal <= (SELECT l.ordinal FROM {S}.messages AS l WHERE l.session_id = %s AND l.id ="
    f" (SELECT s.active_leaf_id FROM {S}.sessions AS s WHERE s.id = %s))",
)
"""`TAIL` from the session's active leaf (parameters: the session id three times, the limit)."""
TAIL_TO = TAIL.replace(
    "ordinal <= %s",
    f"ordinal <= (SELECT l.ordinal FROM {S}.messages AS l WHERE l.session_id = %s AND l.id = %s)",
)
"""`TAIL` from a message (parameters: session id twice, message id, limit)."""
WALK = f"""
WITH RECURSIVE path(parent_ordinal, content, depth) AS (
    SELECT m.parent_ordinal, m.content, 1 FROM {S}.messages AS m WHERE m.ordinal = %s
    UNION ALL
    SELECT m.parent_ordinal, m.content, p.depth + 1
    FROM path AS p JOIN {S}.messages AS m ON m.ordinal = p.parent_ordinal
    WHERE p.depth < %s
)
SELECT content FROM path ORDER BY depth
"""
"""The path from a message to its root, leaf first, at most the given number of messages
(each step one primary-key lookup; `parent_ordinal` is always smaller, so a walk ends)."""

# --- marks --------------------------------------------------------------------------------------

GET_MARK = f"SELECT value FROM {S}.session_marks WHERE session_id = %s AND key = %s"
INSERT_MARK = (
    f"INSERT INTO {S}.session_marks (session_id, key, value, updated_at)"
    " VALUES (%s, %s, %s, %s) ON CONFLICT (session_id, key) DO NOTHING RETURNING 1"
)
"""Compare-and-set from no mark: one statement, so two writers cannot both win."""
UPDATE_MARK = (
    f"UPDATE {S}.session_marks SET value = %s, updated_at = %s"
    " WHERE session_id = %s AND key = %s AND value = %s RETURNING 1"
)
"""Compare-and-set from a value: the row is locked while the old value is compared."""

# --- runs left `running`, and claims (advisory locks: see `leases`) -----------------------------

RUN_LOCK_PREFIX = "soong-agent/run/"
SESSION_LOCK_PREFIX = "soong-agent/session/"
LOCK = "SELECT pg_advisory_lock(hashtextextended(%s, 0))"
TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))"
UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(%s, 0))"
INTERRUPT_RUNS = (
    f"UPDATE {S}.runs SET status = 'interrupted', reason = %s"
    " WHERE id = ANY(%s) AND status = 'running' AND CASE WHEN status = 'running'"
    f" THEN pg_try_advisory_xact_lock(hashtextextended('{RUN_LOCK_PREFIX}' || id, 0))"
    " ELSE false END RETURNING id"
)
"""The runs among these that are still `running` but whose lock no session holds (the process
that ran them is gone) become `interrupted`. The lock is tried only for rows still running
(CASE fixes the order) and let go at the statement's end; a run whose end another process saves
meanwhile is left as it was saved."""
UPSERT_CLAIM = (
    f"INSERT INTO {S}.session_claims (session_id, holder, claimed_at) VALUES (%s, %s, %s)"
    " ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder,"
    " claimed_at = excluded.claimed_at"
)
GET_CLAIM = f"SELECT holder FROM {S}.session_claims WHERE session_id = %s"
DELETE_CLAIM = f"DELETE FROM {S}.session_claims WHERE session_id = %s AND holder = %s"
