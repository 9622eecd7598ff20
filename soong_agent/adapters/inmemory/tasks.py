"""`InMemoryTaskLog`: the TaskLog fake (TASK-1). Each log is kept as the bytes a file would hold,
so a test can tear or corrupt one behind the log's back (`raw`, `put_raw`); appends are checked
and refused exactly as the file adapter does."""

from __future__ import annotations

import builtins
import threading

from soong_agent.domain.tasks.names import name_problem, session_problem
from soong_agent.domain.tasks.state import TaskState, check, fold_into
from soong_agent.domain.tasks.wal import encode, parse
from soong_agent.ports.tasks import (
    TaskLogCorrupt,
    TaskNameRefused,
    TaskRecord,
    TaskRef,
    TaskTransitionRefused,
    WalRead,
)


class InMemoryTaskLog:
    """Task WALs in memory, one byte string per log."""

    def __init__(self) -> None:
        self._logs: dict[TaskRef, bytes] = {}
        self._lock = threading.Lock()

    def raw(self, session_id: str, name: str) -> bytes:
        """The bytes of a log (empty when it does not exist)."""
        with self._lock:
            return self._logs.get(self._ref(session_id, name), b"")

    def put_raw(self, session_id: str, name: str, data: bytes) -> None:
        """Replace a log's bytes (a crash or a hand edit, for tests)."""
        with self._lock:
            self._logs[self._ref(session_id, name)] = data

    def read(self, session_id: str, name: str) -> WalRead:
        parsed = parse(self.raw(session_id, name))
        return WalRead(parsed.records, list(parsed.problems))

    def append(self, session_id: str, name: str, record: TaskRecord) -> TaskRecord:
        ref = self._ref(session_id, name)
        with self._lock:
            parsed = parse(self._logs.get(ref, b""))
            if parsed.corrupt_line is not None:
                raise TaskLogCorrupt(str(ref), parsed.problems[0])
            state = TaskState()
            problem = fold_into(state, parsed.records)
            if problem is not None:
                raise TaskLogCorrupt(str(ref), problem)
            stored = record.model_copy(update={"seq": state.last_seq + 1})
            reason = check(state, stored, stored.at)
            if reason is not None:
                raise TaskTransitionRefused(reason)
            data = self._logs.get(ref, b"")[: parsed.valid_bytes]
            self._logs[ref] = data + encode(stored)
            return stored

    def list(self, session_id: str | None = None) -> builtins.list[TaskRef]:
        with self._lock:
            refs = sorted(self._logs)
        return [r for r in refs if session_id is None or r.session_id == session_id]

    @staticmethod
    def _ref(session_id: str, name: str) -> TaskRef:
        problem = session_problem(session_id)
        if problem is not None:
            raise TaskNameRefused(session_id, problem)
        problem = name_problem(name)
        if problem is not None:
            raise TaskNameRefused(name, problem)
        return TaskRef(session_id, name)
