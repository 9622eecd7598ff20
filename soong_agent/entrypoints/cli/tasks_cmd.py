"""`soong-agent tasks list|show`: the task DAGs of a project, from their WALs alone (TASK-1):
the files of `task.wal_dir`, or the PostgreSQL database of `[storage]`.

`list` prints one line per task (session/name, title, steps by status); `show SESSION/NAME`
prints the task's steps as a DAG (dependencies, status, owner, lease end) and its history.
Log problems (a torn last line, a corrupt line) go to stderr. What is printed goes through the
runtime's secret redactor: the WAL holds what the model wrote.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sys
import time
from typing import TYPE_CHECKING

from soong_agent.entrypoints.cli.common import EXIT_OK, guarded
from soong_agent.ports.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from soong_agent.domain.tasks.state import FoldResult
    from soong_agent.ports.secrets import SecretRedactor
    from soong_agent.ports.tasks import TaskLog


def _when(at: float) -> str:
    return dt.datetime.fromtimestamp(at, tz=dt.UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")


class _Opened:
    """The configured task log, where it is (for messages) and the redactor."""

    def __init__(self, log: TaskLog, where: str, redactor: SecretRedactor) -> None:
        self.log, self.where, self.redactor = log, where, redactor

    def place(self, session_id: str, name: str) -> str:
        """Where one task's records are: its file, or the database."""
        from soong_agent.adapters.tasks import FileTaskLog

        if isinstance(self.log, FileTaskLog):
            return f"file:    {self.log.path(session_id, name)}"
        return f"store:   {self.where}"


@contextlib.contextmanager
def _open(path: str | None) -> Iterator[_Opened]:
    """The task log `[storage]` names (the files of `task.wal_dir` by default), closed after."""
    import asyncio

    from soong_agent.adapters.tasks import FileTaskLog
    from soong_agent.entrypoints.containers import CliContainer
    from soong_agent.entrypoints.sdk import load

    loaded = load(path, None)
    adapters = CliContainer(loaded=loaded).adapters
    redactor: SecretRedactor = adapters.redactor()
    log: TaskLog = adapters.task_log()
    where = str(log.root) if isinstance(log, FileTaskLog) else adapters.storage_target().label
    try:
        yield _Opened(log, where, redactor)
    finally:
        from soong_agent.entrypoints.closing import close_all

        closables = adapters.closables()
        if closables:
            asyncio.run(close_all(closables))


def _fold(log: TaskLog, session_id: str, name: str) -> tuple[FoldResult, list[str]]:
    from soong_agent.domain.tasks.state import fold

    records, problems = log.read(session_id, name)
    result = fold(records)
    return result, [*problems, *result.problems]


def _warn(ref: str, problems: list[str], redactor: SecretRedactor) -> None:
    for problem in problems:
        sys.stderr.write(f"soong-agent: warning: {ref}: {redactor.redact(problem)}\n")


def tasks_list(path: str | None) -> int:
    """One line per task WAL: SESSION/NAME, its title, its steps counted by status."""

    def go() -> int:
        with _open(path) as opened:
            return _list(opened)

    return guarded(go)


def _list(opened: _Opened) -> int:
    log, redactor = opened.log, opened.redactor
    refs = log.list()
    if not refs:
        sys.stdout.write(f"no tasks yet ({opened.where})\n")
        return EXIT_OK
    now = time.time()
    lines = [f"{len(refs)} tasks in {opened.where}:\n"]
    for ref in refs:
        result, problems = _fold(log, ref.session_id, ref.name)
        _warn(str(ref), problems, redactor)
        counts = result.state.counts(now)
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no steps"
        title = redactor.redact(result.state.title or "(not created)")
        lines.append(f"{ref}  {title}  [{summary}]\n")
    sys.stdout.write("".join(lines))
    return EXIT_OK


def tasks_show(ref: str, path: str | None) -> int:
    """The task SESSION/NAME: its steps in order with dependencies, status, owner and lease
    times, then its history; exit 2 when there is no such task."""

    def go() -> int:
        session_id, sep, name = ref.partition("/")
        if not sep or not session_id or not name:
            raise UsageError(f"expected SESSION/NAME, got {ref!r}")
        with _open(path) as opened:
            return _show(opened, ref, session_id, name)

    return guarded(go)


def _show(opened: _Opened, ref: str, session_id: str, name: str) -> int:
    from soong_agent.domain.tasks.board import describe_record

    log, redactor = opened.log, opened.redactor
    result, problems = _fold(log, session_id, name)
    _warn(ref, problems, redactor)
    state = result.state
    if not state.created:
        raise UsageError(f"no task {ref} in {opened.where}")
    now = time.time()
    lines = [
        f"task:    {ref}",
        f"title:   {state.title}",
        f"created: {_when(state.created_at)} by {state.created_by}",
        opened.place(session_id, name),
    ]
    if state.description:
        lines += ["", state.description]
    lines += ["", "steps:"]
    for step in state.steps.values():
        status = state.status(step.id, now)
        lines.append(f"  [{status}] {step.id}: {step.title}")
        if step.depends_on:
            lines.append(f"      after: {', '.join(step.depends_on)}")
        if step.owner is not None and step.lease_expires_at is not None:
            verb = "ends" if now < step.lease_expires_at else "ended"
            lines.append(
                f"      owner: {step.owner}, lease {verb} {_when(step.lease_expires_at)}"
                f" ({step.claims} claim{'s' if step.claims != 1 else ''})"
            )
        elif step.owner is not None:
            lines.append(f"      owner: {step.owner}")
        if step.summary:
            lines.append(f"      summary: {step.summary}")
        if step.reason:
            lines.append(f"      reason: {step.reason}")
    if not state.steps:
        lines.append("  (none)")
    lines += ["", "history:"]
    lines += [f"  {r.seq:>4} {_when(r.at)} {r.actor}: {describe_record(r)}" for r in state.history]
    sys.stdout.write(redactor.redact("\n".join(lines)) + "\n")
    return EXIT_OK
