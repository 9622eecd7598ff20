"""A store beside the session store in its database (the run queue, the approvals): a connection
of its own, opened as the session store opens its own (`transactions`: WAL, the busy timeout,
the schema made sure of), used only on the store's worker thread (`SideStore`)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from soong_agent.adapters.storage import transactions
from soong_agent.adapters.storage.worker import SerialWorker
from soong_agent.ports.errors import RunError, UsageError

_T = TypeVar("_T")


class SideDatabase:
    """The connection, one-transaction writes and failures named after `what` (e.g. "the
    run queue")."""

    def __init__(self, path: Path, busy_timeout_ms: int, *, what: str) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self.what = what
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    def connection(self) -> sqlite3.Connection:
        if self._closed:  # work queued behind the close opens nothing again
            raise UsageError(f"{self.what} in {self.path} is closed")
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
            raise RunError(f"{self.what.removeprefix('the ')} in {self.path}: {exc}") from exc

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


def _into(future: concurrent.futures.Future[Any], call: Callable[..., Any], *args: Any) -> None:
    """On the worker: `call(*args)` into `future` (skipped when its caller gave up first)."""
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = call(*args)
    except BaseException as exc:  # handed to the awaiting coroutine, raised there
        future.set_exception(exc)
        return
    future.set_result(result)


_D = TypeVar("_D", bound=SideDatabase)


class SideStore(Generic[_D]):
    """The async face of a `SideDatabase`: each call runs on the store's own worker thread, in
    order; `close` finishes what is pending, then closes the connection and the thread."""

    def __init__(self, db: _D, *, poll_s: float, thread: str) -> None:
        if not poll_s > 0:
            raise ValueError(f"poll_s must be positive, not {poll_s}")
        self._db = db
        self._poll_s = poll_s
        self._worker = SerialWorker(thread)
        self._closed = False

    @property
    def db_path(self) -> Path:
        """The database file."""
        return self._db.path

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self._db.path)!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"{self._db.what} in {self._db.path} is closed")

    def _start(self, fn: Callable[..., _T], *args: Any) -> concurrent.futures.Future[_T]:
        self._check_open()
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        self._worker.submit(_into, future, self._db.call, fn, *args)
        return future

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.wrap_future(self._start(fn, *args))

    async def close(self) -> None:
        """Finish pending work, then close the connection and stop the worker thread."""
        if self._closed:
            return
        self._closed = True
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._worker.submit(_into, future, self._db.close)
        try:
            await asyncio.shield(asyncio.wrap_future(future))
        finally:
            self._worker.stop()
