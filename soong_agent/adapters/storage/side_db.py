"""A connection of its own to the session database, for a store beside the session store (the
run queue, the approvals): opened as the session store opens its own (`transactions`: WAL, the
busy timeout, the schema made sure of), used only on that store's worker thread."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from soong_agent.adapters.storage import transactions
from soong_agent.ports.errors import RunError, UsageError

_T = TypeVar("_T")


class SideDatabase:
    """The connection, one-transaction writes and failures named after `what` (e.g. "the
    run queue")."""

    def __init__(self, path: Path, busy_timeout_ms: int, *, what: str) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._what = what
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    def connection(self) -> sqlite3.Connection:
        if self._closed:  # work queued behind the close opens nothing again
            raise UsageError(f"{self._what} in {self.path} is closed")
        if self._conn is None:
            self._conn = transactions.open_database(
                self.path, lambda: transactions.connect(self.path, self.busy_timeout_ms)
            )
        return self._conn

    def call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run one operation; database failures become `RunError`s naming the file."""
        try:
            return fn(*args)
        except sqlite3.Error as exc:
            raise RunError(f"{self._what.removeprefix('the ')} in {self.path}: {exc}") from exc

    def close(self) -> None:
        self._closed = True
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def _write(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """`work` in one `BEGIN IMMEDIATE` transaction; its result."""
        out: list[_T] = []
        transactions.write(self.connection(), lambda c: out.append(work(c)))
        return out[0]
