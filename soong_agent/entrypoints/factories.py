"""Builders the containers call; heavy adapters are imported here lazily, when first built."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from soong_agent.ports.errors import ConfigError, MissingSecretError
from soong_agent.ports.model import ModelProvider
from soong_agent.ports.system import SecretSource

if TYPE_CHECKING:
    import httpx

    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.adapters.sandbox.local_fs import LocalFileSystem
    from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
    from soong_agent.application.tools.base import ToolRegistry
    from soong_agent.domain.config.resolve import ResolvedProfile


def main_profile(loaded: LoadedConfig) -> ResolvedProfile:
    for profile in loaded.profiles:
        if profile.purpose == "main":
            return profile
    from soong_agent.domain.config.resolve import resolve_profile

    return resolve_profile(loaded.config, None, purpose="main", source=f"{loaded.path}: [model]")


def _import_httpx() -> None:
    """Import httpx without its command-line module.

    httpx's package import also imports `httpx._main` (its CLI) whenever rich and click are
    installed, which typer brings along: ~100 ms of start-up spent on code we never call.
    Marking that submodule absent makes httpx skip it.
    """
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
        import httpx  # noqa: F401

        if sys.modules.get("httpx._main") is None:
            del sys.modules["httpx._main"]


def http_client(closables: list[Callable[[], Awaitable[None]]]) -> httpx.AsyncClient:
    _import_httpx()
    import httpx

    client = httpx.AsyncClient(follow_redirects=False, trust_env=False)
    closables.append(client.aclose)
    return client


def api_key_reader(profile: ResolvedProfile, secrets: SecretSource) -> Callable[[], str | None]:
    """Reads the profile's key at first use; a missing one names var, profile and source."""
    var = profile.model.resolved_key_env

    def read() -> str | None:
        if not var:
            return None
        value = secrets.get(var)
        if value is None:
            raise MissingSecretError(
                var=var, user=f'model profile "{profile.name}"', source=profile.source
            )
        return value

    return read


def model_provider(
    loaded: LoadedConfig,
    profile: ResolvedProfile,
    client: httpx.AsyncClient,
    secrets: SecretSource,
) -> ModelProvider:
    """The provider adapter of one resolved profile (PROV-1…3); nothing is sent yet."""
    model = profile.model
    if not model.name:
        raise ConfigError(
            f"{loaded.path}: model.name: expected the model's name for {profile.source} "
            '(e.g. name = "gpt-4o"), found nothing'
        )
    from soong_agent.adapters.providers.retry import RetryPolicy

    common: dict[str, Any] = {
        "client": client,
        "base_url": model.resolved_base_url,
        "model": model.name,
        "api_key": api_key_reader(profile, secrets),
        "retry": RetryPolicy.from_config(model.retry),
        "timeout_s": model.timeout_ms / 1000,
    }
    if model.provider == "openai":
        from soong_agent.adapters.providers.openai_chat import OpenAIChatProvider

        return OpenAIChatProvider(**common)
    if model.provider == "anthropic":
        from soong_agent.adapters.providers.anthropic_messages import AnthropicMessagesProvider

        return AnthropicMessagesProvider(
            **common,
            max_output_tokens=model.max_output_tokens,
            thinking_budget_tokens=model.thinking_budget_tokens,
        )
    from soong_agent.adapters.providers.ollama_chat import OllamaChatProvider

    return OllamaChatProvider(**common)


def session_store(
    loaded: LoadedConfig, closables: list[Callable[[], Awaitable[None]]]
) -> SqliteSessionStore:
    from pathlib import Path

    from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore

    store = SqliteSessionStore(Path(loaded.config.context.session_db_path))
    closables.append(store.close)
    return store


def filesystem(loaded: LoadedConfig) -> LocalFileSystem:
    from pathlib import Path

    from soong_agent.adapters.sandbox.local_fs import LocalFileSystem

    tools = loaded.config.tools
    return LocalFileSystem(
        project=loaded.project,
        write_roots=[Path(p) for p in tools.allowed_write_roots],
        sensitive=list(tools.sensitive_paths),
        allow_tmp_write=tools.allow_tmp_write,
    )


def tool_registry(loaded: LoadedConfig) -> ToolRegistry:
    from soong_agent.application.tools.base import ToolRegistry
    from soong_agent.application.tools.files import file_tools

    disabled = set(loaded.config.tools.disabled)
    return ToolRegistry(t for t in file_tools() if t.name not in disabled)
