"""`soong-agent worker` (WORK-2): claim the queued runs of the projects it serves and run each as
`soong-agent run` would, until SIGTERM or SIGINT.

Each project folder gets its own runtime (its config, sandbox, hooks, MCP servers), made at its
first run; a run that asks for another model, permission mode or turn limit gets a runtime of
its own with those in place. A project is known by its path, which must be the same on every
host (a shared file system, or identical checkouts at one path). A call that would ask a person
becomes a pending approval anyone answers (`approvals answer`, the SDK; a `permission_request`
hook is asked first), waited for up to `[workers] approval_timeout_ms`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
import sys
from typing import TYPE_CHECKING, Any

from soong_agent.entrypoints.cli.common import EXIT_OK, guarded
from soong_agent.ports.errors import UsageError

if TYPE_CHECKING:
    from soong_agent.application.runs.handle import Run
    from soong_agent.entrypoints.containers import WorkerContainer
    from soong_agent.ports.run_queue import Lease


def worker_command(
    projects: tuple[str, ...], *, concurrency: int, worker_id: str | None, quiet: bool = False
) -> int:
    def go() -> int:
        if concurrency < 1:
            raise UsageError(f"--concurrency: expected at least 1, found {concurrency}")
        folders = _folders(projects)
        return asyncio.run(_serve(folders, concurrency, worker_id, quiet))

    return guarded(go)


def _folders(projects: tuple[str, ...]) -> tuple[str, ...]:
    from pathlib import Path

    from soong_agent.adapters.config.project import resolve_project

    given: tuple[str | None, ...] = projects or (None,)
    folders: list[str] = []
    for project in given:
        resolved = str(resolve_project(project, cwd=Path.cwd()))
        if resolved not in folders:
            folders.append(resolved)
    return tuple(folders)


class _Runtimes:
    """One CLI container per (project, model, permission mode, turn limit), made when first
    needed; all of them closed at the end. Containers whose `[storage]` is the same share its
    PostgreSQL pools (a pool closes with the last store using it)."""

    def __init__(self) -> None:
        self._made: dict[tuple[str, str | None, str | None, int | None], WorkerContainer] = {}
        self._databases: dict[Any, Any] = {}  # by storage target: its `StateDatabases`

    def get(self, project: str, model: str | None, mode: str | None, turns: int | None) -> Any:
        from soong_agent.entrypoints.cli.overrides import Overrides
        from soong_agent.entrypoints.containers import WorkerContainer
        from soong_agent.entrypoints.sdk import load

        key = (project, model, mode, turns)
        container = self._made.get(key)
        if container is None:
            overrides = Overrides(model=model, permission_mode=mode, max_turns=turns)
            loaded = overrides.applied(load(project, None))
            container = WorkerContainer(loaded=loaded)
            self._share_databases(container, loaded)
            self._made[key] = container
        return container

    def _share_databases(self, container: Any, loaded: Any) -> None:
        from dependency_injector import providers

        from soong_agent.entrypoints.factories import storage_target

        target = storage_target(loaded)
        shared = self._databases.get(target)
        if shared is None:
            self._databases[target] = container.adapters.databases()
        else:
            container.adapters.databases.override(providers.Object(shared))

    async def close(self) -> None:
        from soong_agent.entrypoints.closing import close_all

        for container in self._made.values():
            await close_all(container.adapters.closables())
        self._made.clear()


async def _serve(
    folders: tuple[str, ...], concurrency: int, worker_id: str | None, quiet: bool
) -> int:
    from soong_agent.application.workers.approvals import close_left_over
    from soong_agent.application.workers.queued import start_queued
    from soong_agent.application.workers.worker import Worker

    runtimes = _Runtimes()
    home = runtimes.get(folders[0], None, None, None)
    adapters = home.adapters
    name = worker_id or f"{socket.gethostname()}-{os.getpid()}"
    settings = dataclasses.replace(
        adapters.worker_settings(), worker_id=name, projects=folders, concurrency=concurrency
    )

    services: dict[str, Any] = {}  # by run id: the run service that started it

    async def start(lease: Lease, fence_only: bool) -> Run:
        opts = lease.run.options
        container = runtimes.get(
            lease.run.project_dir, opts.model, opts.permission_mode, opts.max_turns
        )
        service = container.services.run_service()
        store = container.adapters.session_store()
        if lease.run.attempts > 1:  # what the lost attempt asked is asked again
            await close_left_over(
                container.adapters.approval_store(), lease.run.id, container.adapters.clock()
            )
        run = await start_queued(
            service, store, lease, fence_only=fence_only, now=container.adapters.clock().now()
        )
        services[lease.run.id] = service
        return run

    async def after(lease: Lease, run: Run) -> None:
        """As `run` does: a lead's teammates finish their work before its end is recorded;
        then their loops here stop (the team comes back with the session)."""
        service = services.pop(lease.run.id, None)
        team = service.team_of(run.session_id) if service is not None else None
        if team is not None:
            try:
                await team.settle(run.session_id)
            finally:
                await team.close(run.session_id)

    def report(line: str) -> None:
        if not quiet:
            sys.stderr.write(f"soong-agent worker {name}: {line}\n")
            sys.stderr.flush()

    redactor = adapters.redactor()
    worker = Worker(
        adapters.run_queue(),
        start,
        adapters.clock(),
        settings,
        report=report,
        redact=redactor.redact,
        after=after,
        telemetry=adapters.telemetry(),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    report(f"serving {', '.join(folders)} ({concurrency} at once)")
    try:
        tally = await worker.serve(stop)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        await runtimes.close()
    finished = ", ".join(f"{n} {status}" for status, n in sorted(tally.finished.items()))
    report(
        f"stopped: {tally.claimed} claimed ({finished or 'none ended here'}), "
        f"{tally.released} given back, {tally.lost} taken over"
    )
    return EXIT_OK
