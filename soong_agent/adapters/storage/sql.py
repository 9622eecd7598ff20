"""The SQL the SQLite stores run, as text, and the rows it reads and writes (no SQLAlchemy).

The statements below are pinned copies of what SQLAlchemy compiles from the sqlmodel tables of
`tables.py` (`tables.compiled_statements()`, same names; `SCHEMA_DDL`, `tables.schema_ddl()`);
`tests/integration/test_storage_sql_pinned.py` fails when they drift apart, so a change to a
table starts there.
They run on a plain `sqlite3` connection with named parameters: importing sqlalchemy/sqlmodel
(~0.3 s) is left to the rare database that has to be created. `PATH_SQL` and `PATH_TO_SQL`, the
recursive walks of the active path, are written by hand (the same test runs them against a
schema created by `tables.create_schema`).

Inserts take every column, so each parameter row (`rows`) carries every column.
"""

from __future__ import annotations

import functools
import re

SCHEMA_VERSION = 4
"""Stored in `PRAGMA user_version` once the schema of `tables.py` has been created. It lives here
(re-exported by `tables`) so that opening a current database needs no sqlmodel import.

2 added `session_marks`, 3 the `run_queue` (WORK-1), 4 the `approvals` (WORK-3); an older
database gets what it lacks when first opened (every table is created `IF NOT EXISTS`)."""

SCHEMA_DDL: tuple[str, ...] = (
    (
        "CREATE TABLE IF NOT EXISTS approvals (\n"
        "\tid VARCHAR NOT NULL, \n"
        "\trun_id VARCHAR NOT NULL, \n"
        "\tsession_id VARCHAR NOT NULL, \n"
        "\tproject_dir VARCHAR NOT NULL, \n"
        "\ttool VARCHAR NOT NULL, \n"
        "\tcall_id VARCHAR NOT NULL, \n"
        "\tsummary TEXT NOT NULL, \n"
        "\targuments TEXT NOT NULL, \n"
        "\tdetail TEXT NOT NULL, \n"
        "\tscope TEXT NOT NULL, \n"
        "\tasked_at FLOAT NOT NULL, \n"
        "\tstatus VARCHAR NOT NULL, \n"
        "\tdecision VARCHAR, \n"
        "\tanswered_by VARCHAR, \n"
        "\tanswered_at FLOAT, \n"
        "\tPRIMARY KEY (id)\n"
        ")"
    ),
    "CREATE INDEX IF NOT EXISTS ix_approvals_asked ON approvals (asked_at)",
    "CREATE INDEX IF NOT EXISTS ix_approvals_run_asked ON approvals (run_id, asked_at)",
    "CREATE INDEX IF NOT EXISTS ix_approvals_status_asked ON approvals (status, asked_at)",
    (
        "CREATE TABLE IF NOT EXISTS run_queue (\n"
        "\tid VARCHAR NOT NULL, \n"
        "\tsession_id VARCHAR NOT NULL, \n"
        "\tproject_dir VARCHAR NOT NULL, \n"
        "\tmessage TEXT NOT NULL, \n"
        "\toptions TEXT NOT NULL, \n"
        "\tstatus VARCHAR NOT NULL, \n"
        "\tsubmitted_at FLOAT NOT NULL, \n"
        "\tworker VARCHAR, \n"
        "\tattempts INTEGER NOT NULL, \n"
        "\tfence INTEGER NOT NULL, \n"
        "\tlease_expires_at FLOAT, \n"
        "\tcancel_requested BOOLEAN NOT NULL, \n"
        "\treason VARCHAR NOT NULL, \n"
        "\tfinished_at FLOAT, \n"
        "\twake INTEGER NOT NULL, \n"
        "\tPRIMARY KEY (id)\n"
        ")"
    ),
    "CREATE INDEX IF NOT EXISTS ix_run_queue_status_submitted ON run_queue (status, submitted_at)",
    "CREATE INDEX IF NOT EXISTS ix_run_queue_submitted ON run_queue (submitted_at)",
    "CREATE INDEX IF NOT EXISTS ix_run_queue_wake ON run_queue (wake)",
    (
        "CREATE TABLE IF NOT EXISTS sessions (\n"
        "\tid VARCHAR NOT NULL, \n"
        "\tproject_dir VARCHAR NOT NULL, \n"
        "\ttitle VARCHAR NOT NULL, \n"
        "\tagent VARCHAR, \n"
        "\tactive_leaf_id VARCHAR, \n"
        "\tparent_session_id VARCHAR, \n"
        "\tcreated_at FLOAT NOT NULL, \n"
        "\tupdated_at FLOAT NOT NULL, \n"
        "\tPRIMARY KEY (id)\n"
        ")"
    ),
    "CREATE INDEX IF NOT EXISTS ix_sessions_updated_at ON sessions (updated_at)",
    (
        "CREATE TABLE IF NOT EXISTS artifacts (\n"
        "\tid VARCHAR NOT NULL, \n"
        "\tsession_id VARCHAR NOT NULL, \n"
        "\trun_id VARCHAR, \n"
        "\tfilename VARCHAR NOT NULL, \n"
        "\tsize INTEGER NOT NULL, \n"
        "\tsha256 VARCHAR NOT NULL, \n"
        "\tpreview TEXT DEFAULT '' NOT NULL, \n"
        "\tcreated_at FLOAT NOT NULL, \n"
        "\tPRIMARY KEY (id), \n"
        "\tFOREIGN KEY(session_id) REFERENCES sessions (id)\n"
        ")"
    ),
    "CREATE INDEX IF NOT EXISTS ix_artifacts_session ON artifacts (session_id)",
    (
        "CREATE TABLE IF NOT EXISTS messages (\n"
        "\tordinal INTEGER NOT NULL, \n"
        "\tid VARCHAR NOT NULL, \n"
        "\tsession_id VARCHAR NOT NULL, \n"
        "\tparent_id VARCHAR, \n"
        "\tparent_ordinal INTEGER, \n"
        "\trole VARCHAR NOT NULL, \n"
        "\tkind VARCHAR NOT NULL, \n"
        "\tcontent TEXT NOT NULL, \n"
        "\tcreated_at FLOAT NOT NULL, \n"
        "\tPRIMARY KEY (ordinal), \n"
        "\tCONSTRAINT uq_messages_session_id UNIQUE (session_id, id), \n"
        "\tFOREIGN KEY(session_id) REFERENCES sessions (id)\n"
        ")"
    ),
    "CREATE INDEX IF NOT EXISTS ix_messages_session_ordinal ON messages (session_id, ordinal)",
    (
        "CREATE TABLE IF NOT EXISTS runs (\n"
        "\tid VARCHAR NOT NULL, \n"
        "\tsession_id VARCHAR NOT NULL, \n"
        "\tstatus VARCHAR NOT NULL, \n"
        "\tmodel VARCHAR NOT NULL, \n"
        "\treason VARCHAR, \n"
        "\tstarted_at FLOAT NOT NULL, \n"
        "\tfinished_at FLOAT, \n"
        "\tPRIMARY KEY (id), \n"
        "\tFOREIGN KEY(session_id) REFERENCES sessions (id)\n"
        ")"
    ),
    "CREATE INDEX IF NOT EXISTS ix_runs_session_started ON runs (session_id, started_at)",
    (
        "CREATE TABLE IF NOT EXISTS session_marks (\n"
        "\tsession_id VARCHAR NOT NULL, \n"
        '\t"key" VARCHAR NOT NULL, \n'
        "\tvalue VARCHAR NOT NULL, \n"
        "\tupdated_at FLOAT NOT NULL, \n"
        '\tPRIMARY KEY (session_id, "key"), \n'
        "\tFOREIGN KEY(session_id) REFERENCES sessions (id)\n"
        ")"
    ),
    (
        "CREATE TABLE IF NOT EXISTS events (\n"
        "\tid INTEGER NOT NULL, \n"
        "\trun_id VARCHAR NOT NULL, \n"
        "\tsession_id VARCHAR NOT NULL, \n"
        "\tseq INTEGER NOT NULL, \n"
        "\ttype VARCHAR NOT NULL, \n"
        "\tpayload TEXT NOT NULL, \n"
        "\tat FLOAT NOT NULL, \n"
        "\tPRIMARY KEY (id), \n"
        "\tCONSTRAINT uq_events_run_seq UNIQUE (run_id, seq), \n"
        "\tFOREIGN KEY(run_id) REFERENCES runs (id)\n"
        ")"
    ),
)
"""`CREATE TABLE/INDEX IF NOT EXISTS` for every table and index, in dependency order: a pinned
copy of `tables.schema_ddl()`, so that creating a database imports no SQLAlchemy either (~0.3 s
of a new home's first run)."""


# --- writes --------------------------------------------------------------------------------------

UPSERT_SESSION = (
    "INSERT INTO sessions (id, project_dir, title, agent, active_leaf_id, parent_session_id,"
    " created_at, updated_at) VALUES (:id, :project_dir, :title, :agent, :active_leaf_id,"
    " :parent_session_id, :created_at, :updated_at) ON CONFLICT (id) DO UPDATE SET"
    " title = excluded.title, agent = excluded.agent, active_leaf_id = excluded.active_leaf_id,"
    " updated_at = excluded.updated_at"
)
UPSERT_RUN = (
    "INSERT INTO runs (id, session_id, status, model, reason, started_at, finished_at)"
    " VALUES (:id, :session_id, :status, :model, :reason, :started_at, :finished_at)"
    " ON CONFLICT (id) DO UPDATE SET status = excluded.status, model = excluded.model,"
    " reason = excluded.reason, finished_at = excluded.finished_at"
)
INSERT_MESSAGE = (
    "INSERT INTO messages (id, session_id, parent_id, parent_ordinal, role, kind, content,"
    " created_at) VALUES (:m_id, :m_sid, :m_pid, (SELECT parent.ordinal \n"
    "FROM messages AS parent \n"
    "WHERE parent.session_id = :m_sid AND parent.id = :m_pid), :m_role, :m_kind, :m_content,"
    " :m_at)"
)
"""`parent_ordinal` is looked up as each row is inserted: a parent earlier in the batch counts."""
INSERT_EVENT = (
    "INSERT INTO events (run_id, session_id, seq, type, payload, at)"
    " VALUES (:run_id, :session_id, :seq, :type, :payload, :at)"
)
INSERT_ARTIFACT = (
    "INSERT INTO artifacts (id, session_id, run_id, filename, size, sha256, preview, created_at)"
    " VALUES (:id, :session_id, :run_id, :filename, :size, :sha256, :preview, :created_at)"
)
UPSERT_MARK = (
    'INSERT INTO session_marks (session_id, "key", value, updated_at) VALUES (:session_id, :key,'
    ' :value, :updated_at) ON CONFLICT (session_id, "key") DO UPDATE SET value = excluded.value,'
    " updated_at = excluded.updated_at"
)

# --- reads ---------------------------------------------------------------------------------------

_SESSION_SELECT = (
    "SELECT sessions.id, sessions.project_dir, sessions.created_at, sessions.updated_at,"
    " sessions.title, sessions.agent, sessions.active_leaf_id, sessions.parent_session_id \n"
    "FROM sessions"
)
GET_SESSION = _SESSION_SELECT + " \nWHERE sessions.id = :sid"
LIST_SESSIONS = (
    _SESSION_SELECT
    + " ORDER BY sessions.updated_at DESC, sessions.rowid DESC\n LIMIT :limit OFFSET 0"
)
CHILD_SESSIONS = (
    _SESSION_SELECT
    + " \nWHERE sessions.parent_session_id = :sid ORDER BY sessions.created_at, sessions.rowid"
)
ALL_MESSAGES = (
    "SELECT messages.content \n"
    "FROM messages \n"
    "WHERE messages.session_id = :sid ORDER BY messages.ordinal"
)
LIST_RUNS = (
    "SELECT runs.id, runs.session_id, runs.started_at, runs.status, runs.finished_at,"
    " runs.reason, runs.model \n"
    "FROM runs \n"
    "WHERE runs.session_id = :sid ORDER BY runs.started_at, runs.rowid"
)
RUN_EVENTS = "SELECT events.payload \nFROM events \nWHERE events.run_id = :rid ORDER BY events.seq"
GET_ARTIFACT = (
    "SELECT artifacts.id, artifacts.session_id, artifacts.filename, artifacts.size,"
    " artifacts.sha256, artifacts.preview \n"
    "FROM artifacts \n"
    "WHERE artifacts.id = :aid AND artifacts.session_id = :sid"
)
GET_MARK = (
    "SELECT session_marks.value \n"
    "FROM session_marks \n"
    'WHERE session_marks.session_id = :sid AND session_marks."key" = :key'
)
INTERRUPT_RUN = (
    "UPDATE runs SET status=:status, reason=:reason, finished_at=:finished_at"
    " WHERE runs.id = :rid AND runs.status = :was"
)
"""A run left `running` by a process that is gone becomes `interrupted` (only if it still is
`running`: the write cannot undo an end another process saved meanwhile)."""

PINNED = (
    "UPSERT_SESSION",
    "UPSERT_RUN",
    "INSERT_MESSAGE",
    "INSERT_EVENT",
    "INSERT_ARTIFACT",
    "GET_SESSION",
    "LIST_SESSIONS",
    "ALL_MESSAGES",
    "LIST_RUNS",
    "RUN_EVENTS",
    "GET_ARTIFACT",
    "GET_MARK",
    "UPSERT_MARK",
    "INTERRUPT_RUN",
)
"""The names of the statements above that must equal `tables.compiled_statements()`."""

PATH_SQL = """
WITH RECURSIVE path(parent_ordinal, content) AS (
    SELECT m.parent_ordinal, m.content
    FROM messages AS m
    WHERE m.session_id = :sid
      AND m.id = (SELECT s.active_leaf_id FROM sessions AS s WHERE s.id = :sid)
    UNION ALL
    SELECT m.parent_ordinal, m.content
    FROM path AS p JOIN messages AS m ON m.ordinal = p.parent_ordinal
    LIMIT :limit
)
SELECT content FROM path
"""
"""The active path, leaf first, at most `:limit` messages (a negative limit: all of them).

The leaf is found through the (session_id, id) unique index and each step is one rowid lookup.
The rows come out leaf first without an ORDER BY (which would cost a sort): every message has
one parent, so each step adds exactly one row and the queue of the recursion never holds more
than one, whatever order SQLite would extract a longer queue in. `LIMIT` in a recursive CTE
bounds the rows ever added (documented), so the walk stops there.
"""

PATH_TO_SQL = PATH_SQL.replace(
    "AND m.id = (SELECT s.active_leaf_id FROM sessions AS s WHERE s.id = :sid)", "AND m.id = :mid"
)
"""The path from the root to message `:mid`, leaf first, at most `:limit` messages."""

_LEAF_ORDINAL = (
    "(SELECT l.ordinal FROM messages AS l WHERE l.session_id = :sid AND l.id ="
    " (SELECT s.active_leaf_id FROM sessions AS s WHERE s.id = :sid))"
)
TAIL_SQL = (
    "SELECT m.ordinal, m.parent_ordinal, m.content FROM messages AS m"
    f" WHERE m.session_id = :sid AND m.ordinal <= {_LEAF_ORDINAL}"
    " ORDER BY m.ordinal DESC LIMIT :limit"
)
"""The session's messages from the active leaf backwards in write order, at most `:limit`.

When a path was written in one go (no branch since, the usual case: compaction starts a new
root, which ends the path) these rows *are* the path, read through the (session_id, ordinal)
index without the recursion's queue; the store follows their `parent_ordinal` links and falls
back to `PATH_SQL` at the first row that is not the previous row's parent."""

TAIL_TO_SQL = TAIL_SQL.replace(
    "(SELECT s.active_leaf_id FROM sessions AS s WHERE s.id = :sid)", ":mid"
)
"""`TAIL_SQL` from message `:mid` backwards (for `PATH_TO_SQL`)."""


# --- statements built from others ---------------------------------------------------------------

MESSAGE_PARAMS = ("m_id", "m_sid", "m_pid", "m_role", "m_kind", "m_content", "m_at")
"""The parameters of `INSERT_MESSAGE`, in the order of a `message_params` tuple."""
EVENT_PARAMS = ("run_id", "session_id", "seq", "type", "payload", "at")
"""The parameters of `INSERT_EVENT`, in the order of an `event_params` tuple."""


def positional(statement: str, names: tuple[str, ...]) -> str:
    """`statement` with each `:name` written `?N`, N the name's place in `names`, so that its
    parameters can be bound from a tuple (binding a tuple costs less than looking each name up
    in a dict, and a turn's rows are many). A name not in `names` raises ValueError."""

    def number(match: re.Match[str]) -> str:
        return f"?{names.index(match.group(1)) + 1}"

    return re.sub(r":(\w+)", number, statement)


INSERT_MESSAGE_BY_POSITION = positional(INSERT_MESSAGE, MESSAGE_PARAMS)


EVENTS_PER_INSERT = 100
"""Rows of one multi-row `insert_events` statement (6 parameters each, well under the 999 host
parameters of the oldest SQLite the stdlib may bring)."""


@functools.lru_cache(maxsize=EVENTS_PER_INSERT)
def insert_events(count: int) -> str:
    """`INSERT_EVENT` for `count` rows in one statement, bound from `event_values`: a turn's
    events are one statement step instead of one each (and the writer thread gives up and takes
    back the interpreter lock once, not once per event)."""
    head = INSERT_EVENT.partition(" VALUES ")[0]
    row = "(" + ", ".join("?" * len(EVENT_PARAMS)) + ")"
    return f"{head} VALUES {', '.join([row] * count)}"
