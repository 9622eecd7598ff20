"""`run --detach` and `soong-agent runs list|show|wait|cancel` (WORK-1): runs submitted to the
queue of `[storage]` and run by `soong-agent worker`, from any process or host."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from soong_agent.entrypoints.cli.common import EXIT_CANCELLED, EXIT_OK, guarded
from soong_agent.ports.errors import UsageError

if TYPE_CHECKING:
    from soong_agent.entrypoints.cli.overrides import Overrides
    from soong_agent.entrypoints.containers import CliContainer
    from soong_agent.ports.run_queue import QueuedRun, RunOptions, RunQueue

T = TypeVar("T")

EXIT_FAILED = 1
EXIT_TIMEOUT = 124
WAIT_POLL_S = 0.2
STATUSES = ("queued", "running", "completed", "failed", "cancelled", "interrupted")


def _with_container(path: str | None, work: Callable[[CliContainer], Awaitable[T]]) -> T:
    """Run `work` with the CLI container of the project at `path`, closed after."""

    async def go() -> T:
        from soong_agent.entrypoints.closing import close_all
        from soong_agent.entrypoints.containers import CliContainer
        from soong_agent.entrypoints.sdk import load

        container = CliContainer(loaded=load(path, None))
        try:
            return await work(container)
        finally:
            await close_all(container.adapters.closables())

    return asyncio.run(go())


def submit_command(
    message: str,
    *,
    path: str | None,
    session_id: str | None,
    resume_latest: bool,
    options: RunOptions,
    overrides: Overrides,
    output: str,
) -> int:
    """Queue the run and print its session and run ids at once."""

    async def work(container: CliContainer) -> int:
        from soong_agent.application.workers.queued import submit_run

        adapters = container.adapters
        loaded = adapters.loaded()
        store = adapters.session_store()
        chosen = session_id
        if resume_latest:
            from soong_agent.entrypoints.cli.overrides import latest_session

            chosen = await latest_session(store, str(loaded.project))
        run = await submit_run(
            adapters.run_queue(),
            store,
            ids=adapters.ids(),
            clock=adapters.clock(),
            project_dir=str(loaded.project),
            message=message,
            session_id=chosen,
            options=options,
            telemetry=adapters.telemetry(),
        )
        if output == "json":
            sys.stdout.write(json.dumps({"session_id": run.session_id, "run_id": run.id}) + "\n")
        else:
            sys.stdout.write(f"session: {run.session_id}\nrun: {run.id}\n")
        return EXIT_OK

    def go() -> int:
        if output not in ("text", "json"):
            raise UsageError(f"--output: expected text or json, found {output!r}")
        if resume_latest and session_id is not None:
            raise UsageError(
                "--continue resumes the latest session; --session-id names one: give one"
            )
        if overrides.permission_mode is not None:
            from soong_agent.entrypoints.cli.overrides import PERMISSION_MODES

            if overrides.permission_mode not in PERMISSION_MODES:
                raise UsageError(
                    "--permission-mode: expected default, accept_edits, plan or bypass, "
                    f"found {overrides.permission_mode!r}"
                )
        return _with_container(path, work)

    return guarded(go)


def _when(at: float | None) -> str:
    if at is None:
        return "-"
    return dt.datetime.fromtimestamp(at, tz=dt.UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _as_json(run: QueuedRun) -> dict[str, object]:
    return {
        "run_id": run.id,
        "session_id": run.session_id,
        "project_dir": run.project_dir,
        "status": run.status,
        "worker": run.worker,
        "attempts": run.attempts,
        "submitted_at": run.submitted_at,
        "finished_at": run.finished_at,
        "lease_expires_at": run.lease_expires_at,
        "cancel_requested": run.cancel_requested,
        "reason": run.reason,
        "message": run.message,
    }


def list_command(*, path: str | None, status: str | None, limit: int, output: str) -> int:
    """One line per queued run, newest first."""

    async def work(container: CliContainer) -> int:
        redactor = container.adapters.redactor()
        queue = container.adapters.run_queue()
        runs = await queue.list(status=status, limit=limit)
        if output == "json":
            for run in runs:
                sys.stdout.write(redactor.redact(json.dumps(_as_json(run))) + "\n")
            return EXIT_OK
        if not runs:
            sys.stdout.write("no queued runs\n")
            return EXIT_OK
        for run in runs:
            title = run.message.strip().splitlines()[0][:60] if run.message.strip() else ""
            worker = f" on {run.worker}" if run.worker and run.status == "running" else ""
            line = (
                f"{run.id}  {run.status}{worker}  session {run.session_id}  "
                f"attempts {run.attempts}  {_when(run.submitted_at)}  {title}"
            )
            sys.stdout.write(redactor.redact(line) + "\n")
        return EXIT_OK

    def go() -> int:
        if status is not None and status not in STATUSES:
            raise UsageError(f"--status: expected one of {', '.join(STATUSES)}, found {status!r}")
        if output not in ("text", "json"):
            raise UsageError(f"--output: expected text or json, found {output!r}")
        return _with_container(path, work)

    return guarded(go)


async def _find(container: CliContainer, run_id: str) -> QueuedRun:
    from soong_agent.ports.run_queue import RunNotQueued

    queue: RunQueue = container.adapters.run_queue()
    run = await queue.get(run_id)
    if run is None:
        raise RunNotQueued(run_id)
    return run


def show_command(run_id: str, *, path: str | None, output: str) -> int:
    """A queued run: its status, worker, attempts, reason, and the events stored so far."""

    async def work(container: CliContainer) -> int:
        run = await _find(container, run_id)
        redactor = container.adapters.redactor()
        store = container.adapters.session_store()
        known = await store.get_session(run.session_id) is not None
        runs = await store.list_runs(run.session_id) if known else []
        from soong_agent.application.workers.queued import attempts_of

        attempts = attempts_of(run.id, runs)
        events = [e for r in attempts for e in await store.run_events(r.id)]
        if output == "json":
            doc = _as_json(run) | {
                "attempt_runs": [{"run_id": r.id, "status": r.status} for r in attempts],
                "events": len(events),
            }
            sys.stdout.write(redactor.redact(json.dumps(doc)) + "\n")
            return EXIT_OK
        lines = [
            f"run:       {run.id}",
            f"session:   {run.session_id}",
            f"project:   {run.project_dir}",
            f"status:    {run.status}{' (cancel requested)' if run.cancel_requested else ''}",
            f"worker:    {run.worker or '-'}",
            f"attempts:  {run.attempts}",
            f"submitted: {_when(run.submitted_at)}",
        ]
        if run.status == "running":
            lines.append(f"lease:     until {_when(run.lease_expires_at)}")
        if run.finished_at is not None:
            lines.append(f"finished:  {_when(run.finished_at)}")
        if run.reason:
            lines.append(f"reason:    {run.reason}")
        if run.status == "queued":
            lines.append(
                "waiting:   for a worker serving this project "
                f"(soong-agent worker --project {run.project_dir})"
            )
        lines.append(f"events:    {len(events)} stored so far")
        kinds = [e.type for e in events[-8:]]
        if kinds:
            lines.append(f"latest:    {', '.join(kinds)}")
        sys.stdout.write(redactor.redact("\n".join(lines)) + "\n")
        return EXIT_OK

    return guarded(lambda: _with_container(path, work))


def wait_command(run_id: str, *, path: str | None, timeout: float | None) -> int:
    """Wait for the run to end: exit 0 completed, 1 failed or out of budget, 130 cancelled,
    124 when `timeout` seconds pass first."""

    async def work(container: CliContainer) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            run = await _find(container, run_id)
            if run.ended:
                why = f" ({run.reason})" if run.reason else ""
                redactor = container.adapters.redactor()
                sys.stdout.write(redactor.redact(f"run {run.id}: {run.status}{why}") + "\n")
                if run.status == "completed":
                    return EXIT_OK
                return EXIT_CANCELLED if run.status == "cancelled" else EXIT_FAILED
            if deadline is not None and time.monotonic() >= deadline:
                sys.stderr.write(f"soong-agent: run {run.id} is still {run.status} (timed out)\n")
                return EXIT_TIMEOUT
            left = WAIT_POLL_S
            if deadline is not None:
                left = max(0.0, min(WAIT_POLL_S, deadline - time.monotonic()))
            await asyncio.sleep(left)

    def go() -> int:
        if timeout is not None and timeout < 0:
            raise UsageError(f"--timeout: expected seconds ≥ 0, found {timeout}")
        return _with_container(path, work)

    return guarded(go)


def cancel_command(run_id: str, *, path: str | None) -> int:
    """Cancel a queued run at once, or ask its worker to stop it."""

    async def work(container: CliContainer) -> int:
        await _find(container, run_id)
        clock = container.adapters.clock()
        run = await container.adapters.run_queue().cancel(run_id, now=clock.now())
        if run.status == "running":
            sys.stdout.write(
                f"run {run.id}: cancellation asked of {run.worker or 'its worker'} (it stops "
                "the run at its next heartbeat)\n"
            )
        else:
            sys.stdout.write(f"run {run.id}: {run.status}\n")
        return EXIT_OK

    return guarded(lambda: _with_container(path, work))
