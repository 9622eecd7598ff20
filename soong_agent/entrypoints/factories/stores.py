"""Where a runtime keeps its state: sessions, artifacts, task logs, mailboxes, worktrees, the
agent definitions and the project's files.

`[storage] url` picks the backend of the four stores that hold a session's state (STORE-1):
SQLite and files (the default), or one PostgreSQL database shared by every process and host
pointed at it. The PostgreSQL stores share two pools (`StateDatabases`), made at the first store
that needs one; nothing connects before the first use.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from soong_agent.ports.artifacts import ArtifactStore

if TYPE_CHECKING:
    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.adapters.postgres import (
        PostgresDatabase,
        PostgresSettings,
        PostgresSyncDatabase,
    )
    from soong_agent.adapters.sandbox.local_fs import LocalFileSystem
    from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
    from soong_agent.application.workers.approvals import DurableApprover
    from soong_agent.application.workers.worker import WorkerSettings
    from soong_agent.domain.config.storage_section import StorageTarget
    from soong_agent.ports.agents import AgentSource
    from soong_agent.ports.approval_store import ApprovalStore
    from soong_agent.ports.mailbox import Mailbox
    from soong_agent.ports.run_queue import RunQueue
    from soong_agent.ports.secrets import SecretRedactor
    from soong_agent.ports.storage import SessionStore
    from soong_agent.ports.system import Clock, IdGenerator
    from soong_agent.ports.tasks import TaskLog
    from soong_agent.ports.worktrees import Worktrees


Closables = list[Callable[[], Awaitable[None]]]


class StateDatabases:
    """The PostgreSQL pools of one runtime, made at the first store that asks: an async one
    (sessions, artifacts) and a blocking one (the task log and mailbox, called from threads).
    Each store closes itself; a pool closes with the last store using it."""

    def __init__(self, loaded: LoadedConfig) -> None:
        self._loaded = loaded
        self._async: PostgresDatabase | None = None
        self._blocking: PostgresSyncDatabase | None = None

    @property
    def postgres(self) -> bool:
        """Whether `[storage]` names a PostgreSQL database."""
        return storage_target(self._loaded).kind == "postgresql"

    def settings(self) -> PostgresSettings:
        from soong_agent.adapters.postgres import PostgresSettings

        target = storage_target(self._loaded)
        return PostgresSettings(
            target.postgres_url or "",
            password_env=target.password_env,
            pool_size=target.pool_size,
            statement_timeout_ms=target.statement_timeout_ms,
        )

    def pooled(self) -> PostgresDatabase:
        if self._async is None:
            from soong_agent.adapters.postgres import PostgresDatabase

            self._async = PostgresDatabase(self.settings())
        return self._async

    def blocking(self) -> PostgresSyncDatabase:
        if self._blocking is None:
            from soong_agent.adapters.postgres import PostgresSyncDatabase

            self._blocking = PostgresSyncDatabase(self.settings())
        return self._blocking


def session_store(
    loaded: LoadedConfig, closables: Closables, databases: StateDatabases | None = None
) -> SessionStore:
    """The session store `[storage]` names."""
    databases = databases or StateDatabases(loaded)
    if databases.postgres:
        from soong_agent.adapters.postgres import PostgresSessionStore

        pg = PostgresSessionStore(databases.pooled())
        closables.append(pg.close)
        return pg
    return sqlite_session_store(loaded, closables)


def sqlite_session_store(loaded: LoadedConfig, closables: Closables) -> SqliteSessionStore:
    """The SQLite file of `[storage]` (or `context.session_db_path`)."""
    from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore

    store = SqliteSessionStore(Path(storage_target(loaded).sqlite_path))
    closables.append(store.close)
    return store


def filesystem(loaded: LoadedConfig) -> LocalFileSystem:

    from soong_agent.adapters.sandbox.local_fs import LocalFileSystem

    tools = loaded.config.tools
    return LocalFileSystem(
        project=loaded.project,
        write_roots=[Path(p) for p in tools.allowed_write_roots],
        sensitive=list(tools.sensitive_paths),
        allow_tmp_write=tools.allow_tmp_write,
    )


def task_log(
    loaded: LoadedConfig,
    closables: Closables | None = None,
    databases: StateDatabases | None = None,
) -> TaskLog:
    """The Task WAL (TASK-1): the files of `task.wal_dir`, or the PostgreSQL database of
    `[storage]`; every task tool, the board and the teams read and write this one log."""
    if databases is not None and databases.postgres:
        from soong_agent.adapters.postgres import PostgresTaskLog

        log = PostgresTaskLog(databases.blocking())
        if closables is not None:
            closables.append(log.close)
        return log
    from soong_agent.adapters.tasks import FileTaskLog

    return FileTaskLog(loaded.config.task.wal_dir, project=loaded.project)


def mailbox(
    loaded: LoadedConfig,
    closables: Closables | None = None,
    databases: StateDatabases | None = None,
) -> Mailbox:
    """The teams' inboxes (TEAM-2): under `<project>/.soong-agent/teams`, or in the
    PostgreSQL database of `[storage]`."""
    if databases is not None and databases.postgres:
        from soong_agent.adapters.postgres import PostgresMailbox

        box = PostgresMailbox(databases.blocking())
        if closables is not None:
            closables.append(box.close)
        return box
    from soong_agent.adapters.mailbox import FileMailbox

    return FileMailbox(loaded.project / ".soong-agent" / "teams", project=loaded.project)


def worktrees(loaded: LoadedConfig) -> Worktrees | None:
    """A git worktree per teammate (TEAM-4), unless `agents.worktrees = false`."""
    if loaded.config.agents.worktrees is False:
        return None
    from soong_agent.adapters.worktrees import GitWorktrees

    return GitWorktrees(loaded.project)


def agent_source(loaded: LoadedConfig) -> AgentSource:
    """The agent definitions: the built-ins and `${SOONG_AGENT_HOME}/agents` (never a
    project's), read at the first question."""
    from soong_agent.adapters.agents import HomeAgentSource

    return HomeAgentSource(loaded.home)


def artifact_store(
    loaded: LoadedConfig, closables: Closables, databases: StateDatabases | None = None
) -> ArtifactStore:
    """The artifact store `[storage]` names (in PostgreSQL, the content is in the database:
    any host reads what another wrote)."""
    databases = databases or StateDatabases(loaded)
    if databases.postgres:
        from soong_agent.adapters.postgres import PostgresArtifactStore

        pg = PostgresArtifactStore(databases.pooled())
        closables.append(pg.close)
        return pg
    from soong_agent.adapters.storage.artifacts import SqliteArtifactStore

    store = SqliteArtifactStore(Path(storage_target(loaded).sqlite_path), loaded.home)
    closables.append(store.close)
    return store


def storage_target(loaded: LoadedConfig) -> StorageTarget:
    """Where this runtime keeps sessions (STORE-1): `[storage] url`, else the SQLite file of
    `context.session_db_path`."""
    from soong_agent.domain.config.storage_section import storage_target as target

    config = loaded.config
    return target(config.storage, config.context.session_db_path)


def worker_settings(loaded: LoadedConfig) -> WorkerSettings:
    """`[workers]` as a worker's settings (WORK-2); the `worker` command adds its id, its
    projects and its concurrency."""
    from soong_agent.application.workers.worker import WorkerSettings

    workers, runtime = loaded.config.workers, loaded.config.runtime
    return WorkerSettings(
        worker_id="",
        projects=(),
        lease_s=workers.lease_timeout_ms / 1000,
        heartbeat_s=workers.heartbeat_ms / 1000,
        max_attempts=workers.max_attempts,
        cancel_timeout_s=runtime.cancel_timeout_ms / 1000,
        # a lease that ran out wakes nobody: an idle worker looks again at least this often,
        # so a takeover starts within a heartbeat of the lease's end
        idle_poll_s=min(1.0, workers.heartbeat_ms / 1000),
    )


def run_queue(
    loaded: LoadedConfig, closables: Closables, databases: StateDatabases | None = None
) -> RunQueue:
    """The run queue (WORK-1) in the database of `[storage]`: the SQLite file beside the
    sessions (several workers on one host), or PostgreSQL (workers on many hosts)."""
    databases = databases or StateDatabases(loaded)
    if databases.postgres:
        from soong_agent.adapters.postgres.run_queue import PostgresRunQueue

        pg = PostgresRunQueue(databases.pooled(), server_clock=True)  # hosts' clocks differ
        closables.append(pg.close)
        return pg
    from soong_agent.adapters.storage.run_queue import SqliteRunQueue

    queue = SqliteRunQueue(Path(storage_target(loaded).sqlite_path))
    closables.append(queue.close)
    return queue


def approval_store(
    loaded: LoadedConfig, closables: Closables, databases: StateDatabases | None = None
) -> ApprovalStore:
    """Pending approvals (WORK-3) in the database of `[storage]`, answerable from any process
    (SQLite) or host (PostgreSQL)."""
    databases = databases or StateDatabases(loaded)
    if databases.postgres:
        from soong_agent.adapters.postgres.approvals import PostgresApprovalStore

        pg = PostgresApprovalStore(databases.pooled())
        closables.append(pg.close)
        return pg
    from soong_agent.adapters.storage.approvals import SqliteApprovalStore

    store = SqliteApprovalStore(Path(storage_target(loaded).sqlite_path))
    closables.append(store.close)
    return store


def durable_approver(
    loaded: LoadedConfig,
    store: ApprovalStore,
    clock: Clock,
    ids: IdGenerator,
    redactor: SecretRedactor,
) -> DurableApprover:
    """The approver of a worker's runs (WORK-3): each question stored for anyone to answer,
    waited for `[workers] approval_timeout_ms` (unset: as long as it takes)."""
    from soong_agent.application.workers.approvals import DurableApprover

    timeout_ms = loaded.config.workers.approval_timeout_ms
    return DurableApprover(
        store,
        clock=clock,
        ids=ids,
        redactor=redactor,
        timeout_s=None if timeout_ms is None else timeout_ms / 1000,
    )
