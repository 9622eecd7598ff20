"""Where a runtime keeps its state: sessions, artifacts, task logs, mailboxes, worktrees, the
agent definitions and the project's files."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from soong_agent.ports.artifacts import ArtifactStore

if TYPE_CHECKING:
    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.adapters.sandbox.local_fs import LocalFileSystem
    from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
    from soong_agent.domain.config.storage_section import StorageTarget
    from soong_agent.ports.agents import AgentSource
    from soong_agent.ports.mailbox import Mailbox
    from soong_agent.ports.tasks import TaskLog
    from soong_agent.ports.worktrees import Worktrees


def session_store(
    loaded: LoadedConfig, closables: list[Callable[[], Awaitable[None]]]
) -> SqliteSessionStore:
    """The session store `[storage]` names."""
    _sqlite_only(loaded)
    from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore

    store = SqliteSessionStore(Path(loaded.config.context.session_db_path))
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


def task_log(loaded: LoadedConfig) -> TaskLog:
    """The Task WAL files of `task.wal_dir` (TASK-1): every task tool, the board and the
    teams read and write them through this one log."""
    from soong_agent.adapters.tasks import FileTaskLog

    return FileTaskLog(loaded.config.task.wal_dir, project=loaded.project)


def mailbox(loaded: LoadedConfig) -> Mailbox:
    """The teams' inboxes under `<project>/.soong-agent/teams` (TEAM-2)."""
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
    loaded: LoadedConfig, closables: list[Callable[[], Awaitable[None]]]
) -> ArtifactStore:
    """The artifact store `[storage]` names."""
    _sqlite_only(loaded)
    from soong_agent.adapters.storage.artifacts import SqliteArtifactStore

    store = SqliteArtifactStore(Path(loaded.config.context.session_db_path), loaded.home)
    closables.append(store.close)
    return store


def storage_target(loaded: LoadedConfig) -> StorageTarget:
    """Where this runtime keeps sessions (STORE-1): `[storage] url`, else the SQLite file of
    `context.session_db_path`."""
    from soong_agent.domain.config.storage_section import storage_target as target

    config = loaded.config
    return target(config.storage, config.context.session_db_path)


def _sqlite_only(loaded: LoadedConfig) -> None:
    """Until the PostgreSQL adapters are wired, a postgresql:// URL is refused, never ignored."""
    if storage_target(loaded).kind != "sqlite":
        from soong_agent.ports.errors import ConfigError

        raise ConfigError(
            f"{loaded.path}: storage.url: PostgreSQL storage is not available in this build"
        )
