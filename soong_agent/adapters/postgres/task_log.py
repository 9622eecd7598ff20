"""`PostgresTaskLog`: the task DAG's write-ahead logs in PostgreSQL (TASK-1, STORE-1), shared by
every process and host that reaches the database.

A log is a row of `task_logs` and its records, one row each (`task_sql`, `line_logs`). An
append is one transaction: it locks the log's row (``SELECT … FOR UPDATE``), reads every record,
folds them with the domain's fold (`domain.tasks`), checks the new record against that state at
its own time, and inserts it with the next ``seq``. Two claimers of one step, on two hosts,
take the lock in turn: the second reads the first's claim and is refused, so a step is never
held twice; a lease is claimed, renewed (a heartbeat) and given up the same way.

Reading folds exactly as the file log does: the records are read back as the log's lines and
parsed by the same parser (`domain.tasks.wal`), so a corrupt record (a hand edit) stops reading
at its line and refuses appends, and a torn last line (only a log copied as it was from a
file can hold one) is ignored, then cut off by the next append.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from typing import TYPE_CHECKING, Any

from soong_agent.adapters.postgres import task_sql as sql
from soong_agent.adapters.postgres.line_logs import content
from soong_agent.domain.tasks.names import name_problem, session_problem
from soong_agent.domain.tasks.state import TaskState, check, fold_into
from soong_agent.domain.tasks.wal import encode, parse
from soong_agent.ports.errors import UsageError
from soong_agent.ports.tasks import (
    TaskLogCorrupt,
    TaskNameRefused,
    TaskRecord,
    TaskRef,
    TaskTransitionRefused,
    WalRead,
)

if TYPE_CHECKING:
    from psycopg import Connection

    from soong_agent.adapters.postgres.sync_database import PostgresSyncDatabase


class PostgresTaskLog:
    """A `TaskLog` in a PostgreSQL database (`PostgresSyncDatabase`).

    Its calls block (the port is synchronous: the application calls it from a worker thread).
    Besides the port's errors, database failures raise `RunError` (`UsageError` when the
    database cannot be reached at all); an append whose connection is lost is tried once
    more on a new one, and is not written twice.
    """

    def __init__(self, database: PostgresSyncDatabase) -> None:
        self._db = database
        database.attach()
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresTaskLog({self._db.where!r})"

    def read(self, session_id: str, name: str) -> WalRead:
        """The records of the log (none when it does not exist) and its problems."""
        key = self._key(session_id, name)

        def work(conn: Connection[Any], _retrying: bool) -> bytes:
            return content(sql.TABLES.read(conn, key))

        parsed = parse(self._db.run(work, what=f"read task log {session_id}/{name}"))
        return WalRead(parsed.records, list(parsed.problems))

    def append(self, session_id: str, name: str, record: TaskRecord) -> TaskRecord:
        """Append `record` if it is a legal next step of the log, in one transaction holding
        the log's row lock; returns it as written (with its `seq`)."""
        key = self._key(session_id, name)
        ref = f"{session_id}/{name}"

        def work(conn: Connection[Any], retrying: bool) -> TaskRecord:
            with conn.transaction():
                sql.TABLES.lock(conn, key, create=True, at=time.time())
                lines = sql.TABLES.read(conn, key)
                parsed = parse(content(lines))
                if parsed.corrupt_line is not None:
                    raise TaskLogCorrupt(ref, parsed.problems[0])
                state = TaskState()
                problem = fold_into(state, parsed.records)
                if problem is not None:
                    raise TaskLogCorrupt(ref, problem)
                if retrying and _written_before(state, record):
                    return state.history[-1]  # committed before the connection was lost
                stored = record.model_copy(update={"seq": state.last_seq + 1})
                reason = check(state, stored, stored.at)
                if reason is not None:
                    raise TaskTransitionRefused(reason)
                line = encode(stored).decode("utf-8")
                sql.TABLES.append(conn, key, lines, parsed.valid_bytes, line)
                return stored

        return self._db.run(work, what=f"append to task log {ref}")

    def list(self, session_id: str | None = None) -> builtins.list[TaskRef]:
        """Every log (of one session when given), sorted by session then name."""
        self._check_open()
        if session_id is not None and session_problem(session_id) is not None:
            return []

        def work(conn: Connection[Any], _retrying: bool) -> builtins.list[tuple[str, str]]:
            return sql.TABLES.keys_of(conn, session_id)

        keys = self._db.run(work, what="list the task logs")
        return sorted(
            TaskRef(s, n) for s, n in keys if session_problem(s) is None and name_problem(n) is None
        )

    async def close(self) -> None:
        """Stop using the database (its pool closes with the last store using it)."""
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._db.detach)

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"the task log in the {self._db.where} is closed")

    def _key(self, session_id: str, name: str) -> tuple[str, str]:
        self._check_open()
        problem = session_problem(session_id)
        if problem is not None:
            raise TaskNameRefused(session_id, problem)
        problem = name_problem(name)
        if problem is not None:
            raise TaskNameRefused(name, problem)
        return (session_id, name)


def _written_before(state: TaskState, record: TaskRecord) -> bool:
    """Whether the log's last record is `record` (whatever its seq): the append being retried
    after a lost connection was committed before the connection went."""
    if not state.history:
        return False
    last = state.history[-1]
    return last == record.model_copy(update={"seq": last.seq})
