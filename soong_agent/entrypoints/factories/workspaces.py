"""What the application's run variants need from the adapters (`runs.variants`): a model
provider per profile, and a teammate's worktree as a file system and command tools."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.application.tools.base import Tool
    from soong_agent.domain.config.resolve import ResolvedProfile
    from soong_agent.entrypoints.factories.safety import CommandSandboxing
    from soong_agent.ports.filesystem import FileSystem
    from soong_agent.ports.model import ModelProvider
    from soong_agent.ports.system import SecretSource


class ConfigProfileModels:
    """The provider of each model profile, over the runtime's shared HTTP client."""

    def __init__(
        self,
        loaded: LoadedConfig,
        client: Callable[[], httpx.AsyncClient],
        secrets: SecretSource,
    ) -> None:
        self._loaded = loaded
        self._client = client
        self._secrets = secrets

    def provider(self, profile: ResolvedProfile) -> ModelProvider:
        from soong_agent.entrypoints.factories.models import model_provider

        return model_provider(self._loaded, profile, self._client(), self._secrets)


class WorktreeWorkspaces:
    """A teammate's git worktree: its files through the sandboxed file system, its commands
    and declarative tools in an OS sandbox whose only write root is the worktree (TEAM-4)."""

    def __init__(self, loaded: LoadedConfig, sandboxing: Callable[[], CommandSandboxing]) -> None:
        self._loaded = loaded
        self._sandboxing = sandboxing
        self._inside: Path | None = None

    def root(self, worktree: str) -> str:
        if self._inside is None:  # the project's place in its repository, looked up once
            project = Path(self._loaded.project)
            repo = next((p for p in (project, *project.parents) if (p / ".git").exists()), project)
            self._inside = project.relative_to(repo)
        return str(Path(worktree) / self._inside)

    def filesystem(self, root: str) -> FileSystem:
        from soong_agent.adapters.sandbox.local_fs import LocalFileSystem

        tools = self._loaded.config.tools
        return LocalFileSystem(
            project=Path(root),
            write_roots=[Path(root)],
            sensitive=list(tools.sensitive_paths),
            allow_tmp_write=tools.allow_tmp_write,
        )

    def command_tools(self, root: str) -> list[Tool]:
        from soong_agent.adapters.declarative.loader import load_enabled_declarative_tools
        from soong_agent.adapters.ossandbox.config import command_tmp_dir, policy_for_config
        from soong_agent.adapters.process.runner import SubprocessRunner
        from soong_agent.application.tools.catalog import apply_tool_config
        from soong_agent.application.tools.declarative import add_declarative_tools
        from soong_agent.application.tools.shell import run_command_tool
        from soong_agent.entrypoints.factories.safety import secret_names

        loaded, sandboxing = self._loaded, self._sandboxing()
        config = loaded.config
        tools_config = config.tools.model_copy(update={"allowed_write_roots": [root]})
        policy = policy_for_config(
            tools_config,
            project=root,
            agent_home=str(loaded.home),
            session_db=config.context.session_db_path,
            tmp_dir=command_tmp_dir(),
            network=config.sandbox.command_network(
                config.tools.network, sandboxing.choice.sandbox.mechanism
            ),
        )
        runner = SubprocessRunner(sandbox=sandboxing.choice.sandbox, policy=policy)
        env, secrets = dict(os.environ), secret_names(loaded)
        shell = run_command_tool(
            runner=runner,
            project=root,
            tools=config.tools,
            base_env=env,
            secret_names=secrets,
            sandbox_note=sandboxing.note,
        )
        specs, _ = load_enabled_declarative_tools(loaded.home / "tools", config.tools)
        own, _ = add_declarative_tools(
            [shell],
            specs,
            runner=runner,
            project=root,
            config=config.tools,
            env=env,
            secret_names=secrets,
        )
        return apply_tool_config(own, config.tools)[0]
