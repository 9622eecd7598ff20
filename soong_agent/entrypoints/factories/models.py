"""The model profiles and their providers (CFG-7, PROV-1..3), over one shared HTTP client."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from soong_agent.ports.errors import ConfigError, MissingSecretError
from soong_agent.ports.model import ModelProvider
from soong_agent.ports.system import SecretSource, TokenCounter

if TYPE_CHECKING:
    import httpx

    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.application.tools.files import ImageReading
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


def http_client(
    loaded: LoadedConfig, closables: list[Callable[[], Awaitable[None]]]
) -> httpx.AsyncClient:
    """The client every model profile shares (web_fetch makes its own, per fetch).

    When every profile talks plain http (a local gateway, Ollama, a test server), no TLS
    context is built: loading the CA bundle would only delay the first request.
    """
    _import_httpx()
    import httpx

    urls = [p.model.resolved_base_url for p in loaded.profiles] or [
        loaded.config.model.resolved_base_url
    ]
    plain = all(url.lower().startswith("http://") for url in urls)
    client = httpx.AsyncClient(follow_redirects=False, trust_env=False, verify=not plain)
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
    from soong_agent.domain.images import accepts_images

    common: dict[str, Any] = {
        "client": client,
        "base_url": model.resolved_base_url,
        "model": model.name,
        "api_key": api_key_reader(profile, secrets),
        "retry": RetryPolicy.from_config(model.retry),
        "timeout_s": model.timeout_ms / 1000,
        "idle_timeout_s": model.idle_timeout_ms / 1000,
        "reasoning_effort": model.reasoning_effort,
        "vision": accepts_images(model.name, model.vision),
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


def image_reading(loaded: LoadedConfig) -> ImageReading:
    """How read_file treats image files (PROV-7): shown when the main model profile takes
    images (`[model] vision`, else by its name), up to `tools.max_image_bytes`."""
    from soong_agent.application.tools.files import ImageReading
    from soong_agent.domain.images import accepts_images

    model = main_profile(loaded).model
    return ImageReading(
        vision=accepts_images(model.name, model.vision),
        max_bytes=loaded.config.tools.max_image_bytes,
    )


def purpose_profile(loaded: LoadedConfig, purpose: str) -> ResolvedProfile:
    """The resolved profile of a purpose (``memory_recall``, ``memory_extract``; CFG-7), the
    main one when the purpose has none."""
    for profile in loaded.profiles:
        if profile.purpose == purpose:
            return profile
    return main_profile(loaded)


def purpose_provider(
    loaded: LoadedConfig,
    profile: ResolvedProfile,
    main: ModelProvider,
    client: Callable[[], httpx.AsyncClient],
    secrets: SecretSource,
) -> ModelProvider:
    """The model of a memory purpose: `main` itself when the purpose's profile is unset (the
    main model, or the one an SDK caller gave), else the profile's own provider over the shared
    client (`client` is called only then)."""
    from soong_agent.domain.config.resolve import MAIN

    if profile.name == MAIN:
        return main
    return model_provider(loaded, profile, client(), secrets)


def token_counter(loaded: LoadedConfig) -> TokenCounter:
    """The exact o200k counter; the counts of long texts (the system prompt) are kept under
    `${SOONG_AGENT_HOME}/cache`, so a later run knows its prompt's size without loading the
    tokenizer."""
    from soong_agent.adapters.tokens.o200k import O200kTokenCounter

    return O200kTokenCounter(memo=loaded.home / "cache" / "o200k-counts.json")


def compact_profile(loaded: LoadedConfig) -> ResolvedProfile:
    for profile in loaded.profiles:
        if profile.purpose == "compact":
            return profile
    return main_profile(loaded)
