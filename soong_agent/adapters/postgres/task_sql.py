"""The tables of `PostgresTaskLog` (schema step 3).

A task's log is a row of `task_logs`, the row its writers lock, and its records, one line each
in `task_lines` (see `line_logs`): ``seq`` is the record's own sequence number, given in the
transaction that appends it, and ``line`` the record's JSON line as the file log writes it.
"""

from __future__ import annotations

from soong_agent.adapters.postgres.ddl import Step
from soong_agent.adapters.postgres.line_logs import LineTables

TABLES = LineTables("task_logs", "task_lines", ("session_id", "name"))

STEPS = (Step(3, "task logs: the task DAG's records", TABLES.create()),)
