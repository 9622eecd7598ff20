"""What keeps tools safe: secrets, the OS sandbox of commands, the network fetcher, the hooks
and the MCP servers."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from soong_agent.ports.mcp import Elicitor, McpHub, Sampler
from soong_agent.ports.ossandbox import SandboxPolicy
from soong_agent.ports.process import ProcessRunner
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.ports.shell import ShellAnalysis, ShellAnalyzer
from soong_agent.ports.system import SecretSource
from soong_agent.ports.web import FetchResult, WebFetcher

if TYPE_CHECKING:
    import httpx

    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.adapters.netproxy import FilteringProxy
    from soong_agent.adapters.ossandbox.select import SandboxChoice
    from soong_agent.application.hooks import HookPipeline
    from soong_agent.application.mcp.asking import McpAsks
    from soong_agent.domain.config.resolve import ResolvedProfile
    from soong_agent.ports.model import ModelProvider

from soong_agent.entrypoints.factories.models import _import_httpx


def secret_names(loaded: LoadedConfig) -> set[str]:
    """Every variable a model profile reads its key from, and those `mcp.json` takes OAuth
    client secrets and private keys from: never passed to tools, their values scrubbed."""
    from soong_agent.adapters.mcp.config import oauth_secret_names
    from soong_agent.domain.config.schema import DEFAULT_KEY_ENVS

    names = {n for n in DEFAULT_KEY_ENVS.values() if n}
    names |= {p.model.resolved_key_env for p in loaded.profiles if p.model.resolved_key_env}
    return names | oauth_secret_names(loaded.home)


def secret_redactor(loaded: LoadedConfig, secrets: SecretSource) -> SecretRedactor:
    """The scrubber of everything stored or shown (CFG-6): the values of every key variable
    (`secret_names`), read when first needed, and high-confidence secret patterns."""
    from soong_agent.adapters.redaction import SecretScrubber

    return SecretScrubber(secrets, secret_names(loaded))


def sampling_provider(
    loaded: LoadedConfig,
    profile: ResolvedProfile,
    client: Callable[[], httpx.AsyncClient],
    secrets: SecretSource,
) -> ModelProvider | None:
    """The model of `[tools.mcp] sampling_profile` (MCP-4); None when it is unset (each run's
    own model answers its servers' sampling requests)."""
    from soong_agent.domain.config.resolve import MAIN
    from soong_agent.entrypoints.factories.models import model_provider

    if profile.name == MAIN:
        return None
    return model_provider(loaded, profile, client(), secrets)


def mcp_asks(
    loaded: LoadedConfig,
    profile: ResolvedProfile,
    provider: Callable[[], ModelProvider | None],
    elicitor: Elicitor | None = None,
    sampler: Sampler | None = None,
) -> McpAsks:
    """What answers MCP servers' sampling and elicitation requests for the runtime's runs
    (MCP-4): `elicitor` asks the user (None: questions are declined), `sampler` answers
    approved sampling requests instead of a model (an SDK program's), else
    `sampling_profile`'s model (`provider`, made at the first request) or the run's own."""
    from soong_agent.application.mcp.asking import McpAsks, SamplingModel

    def model() -> SamplingModel | None:
        made = provider()
        if made is None:
            return None
        settings = profile.model
        return SamplingModel(made, made.label, settings.price, settings.max_output_tokens)

    return McpAsks(elicitor=elicitor, sampler=sampler, sampling_model=model)


def mcp_hub(
    loaded: LoadedConfig,
    closables: list[Callable[[], Awaitable[None]]],
    *,
    use_cache: bool = True,
    authorize: Callable[[str, str], Awaitable[None]] | None = None,
    startup_timeout_s: float | None = None,
    asks: McpAsks | None = None,
) -> McpHub | None:
    """The MCP servers of `${SOONG_AGENT_HOME}/mcp.json` (MCP-1; a project cannot add any),
    read once at start: a bad file is a ConfigError naming the server and field. None when
    there is no server (`tools.mcp.disabled_servers` left out). Tool lists are cached under
    `${SOONG_AGENT_HOME}/cache/mcp` for `discovery_cache_ttl_ms` (not with `use_cache=False`).
    OAuth tokens live in `${SOONG_AGENT_HOME}/mcp-auth`; `authorize(server, url)` takes a person
    through a login a server asks for (None: the server fails, needing `mcp login`).
    `asks` answers servers' sampling and elicitation requests (None: declined); `roots/list`
    answers the project and `tools.allowed_write_roots`.
    The servers start with the first run (or `start()`)."""
    from soong_agent.adapters.mcp import load_mcp_servers

    mcp = loaded.config.tools.mcp
    specs = load_mcp_servers(loaded.home, mcp.disabled_servers)
    if not specs:
        return None  # the mcp SDK (~0.5 s to import) is loaded only when servers exist
    from soong_agent.adapters.mcp import SdkMcpHub

    hub = SdkMcpHub(
        specs,
        startup_timeout_s=startup_timeout_s or mcp.startup_timeout_ms / 1000,
        call_timeout_s=mcp.call_timeout_ms / 1000,
        cache_dir=loaded.home / "cache" / "mcp" if use_cache else None,
        cache_ttl_s=mcp.discovery_cache_ttl_ms / 1000,
        auth_home=loaded.home,
        authorize=authorize,
        elicitation=asks.elicit if asks is not None else None,
        sampling=asks.sample if asks is not None else None,
        roots=write_roots(loaded),
    )
    closables.append(hub.aclose)
    return hub


def write_roots(loaded: LoadedConfig) -> list[Path]:
    """The folders runs may write in: the project, then `tools.allowed_write_roots` (what
    MCP servers are offered as roots, MCP-4)."""
    roots = [Path(loaded.project)]
    for root in loaded.config.tools.allowed_write_roots:
        path = Path(root).expanduser()
        if path.is_absolute() and path not in roots:
            roots.append(path)
    return roots


def hook_pipeline(
    loaded: LoadedConfig,
    runner: ProcessRunner,
    closables: list[Callable[[], Awaitable[None]]],
    sandboxed_runner: ProcessRunner | None = None,
) -> HookPipeline | None:
    """The hooks of `${SOONG_AGENT_HOME}/hooks.json` (HOOK-1; a project's is never read),
    read once at start: a bad file is a ConfigError naming the entry. None when there are no
    hooks or `hooks.enabled` is false. A hook gets the environment run_command gets (the
    allow-list, never a key), plus PROJECT_ROOT, PLATFORM, ARCH and CWD."""
    import platform

    from soong_agent.adapters.config.hooks_loader import load_hooks
    from soong_agent.application.hooks import HookPipeline
    from soong_agent.application.tools.shell import command_env

    config = loaded.config
    hooks = load_hooks(loaded.home, enabled=config.hooks.enabled)
    if not hooks:
        return None
    project = str(loaded.project)
    env = command_env(
        os.environ, config.tools.env_allowlist, secret_names=secret_names(loaded), home=project
    )
    env.update(PROJECT_ROOT=project, PLATFORM=sys.platform, ARCH=platform.machine(), CWD=project)
    if config.hooks.sandboxed and sandboxed_runner is not None:
        runner = sandboxed_runner  # the OS sandbox of run_command (SBX-3)
    pipeline = HookPipeline(
        hooks,
        runner,
        base_env=env,
        cwd=project,
        default_timeout_s=config.hooks.default_timeout_ms / 1000,
    )
    closables.append(pipeline.close)
    return pipeline


def process_runner() -> ProcessRunner:
    """A runner without an OS sandbox (for hooks with `hooks.sandboxed = false`)."""
    from soong_agent.adapters.process.runner import SubprocessRunner

    return SubprocessRunner()


@dataclass(frozen=True)
class CommandSandboxing:
    """The OS sandbox commands run in (SBX-3), the policy it enforces, the sentence that
    tells the model what it allows, and the filtering proxy of ``sandbox.network =
    "allowlist"`` (SBX-4; None otherwise, or when commands are not confined)."""

    choice: SandboxChoice
    policy: SandboxPolicy
    note: str
    proxy: FilteringProxy | None = None


def network_proxy(loaded: LoadedConfig) -> FilteringProxy:
    """The filtering proxy of commands (SBX-4) under `tools.network`, through the allow-list
    `web_fetch` uses (with ``permissions.network_policy = "deny"``: an empty one). Not
    started: that happens at the first command that needs it."""
    from soong_agent.adapters.netproxy import FilteringProxy
    from soong_agent.adapters.web.allowlist import NetworkAllowList

    config = loaded.config
    network = config.tools.network
    off = config.permissions.network_policy == "deny"
    allow = NetworkAllowList(
        allowed_hosts=[] if off else network.allowed_hosts,
        allowed_domains=[] if off else network.allowed_domains,
    )
    return FilteringProxy(allow)


def command_sandboxing(
    loaded: LoadedConfig, closables: list[Callable[[], Awaitable[None]]] | None = None
) -> CommandSandboxing:
    """`sandbox.os` applied: the host is probed once per process (unless ``off``); the policy
    comes from `[tools]` (write roots, sensitive paths) and `[sandbox]` (network). With
    ``"allowlist"`` and a confining sandbox, the filtering proxy is made (and closed with
    `closables`; it starts with the first command)."""
    from soong_agent.adapters.ossandbox import choose_sandbox, model_note
    from soong_agent.adapters.ossandbox.config import command_tmp_dir, policy_for_config

    config = loaded.config
    network = config.sandbox.command_network(config.tools.network)
    proxy = network_proxy(loaded) if network == "allowlist" and config.sandbox.os != "off" else None
    choice = choose_sandbox(config.sandbox.os, proxy=proxy)
    network = config.sandbox.command_network(config.tools.network, choice.sandbox.mechanism)
    if choice.sandbox.unsandboxed or network != "allowlist":
        proxy = None  # nothing confines the command (it has the host's network), or no proxy
    elif proxy is not None and closables is not None:
        closables.append(proxy.aclose)
    policy = policy_for_config(
        config.tools,
        project=str(loaded.project),
        agent_home=str(loaded.home),
        session_db=config.context.session_db_path,
        tmp_dir=command_tmp_dir(),
        network=network,
    )
    return CommandSandboxing(choice, policy, model_note(choice.sandbox, policy), proxy)


def command_runner(sandboxing: CommandSandboxing) -> ProcessRunner:
    """The runner of run_command and declarative tools: every command in the OS sandbox."""
    from soong_agent.adapters.process.runner import SubprocessRunner

    return SubprocessRunner(sandbox=sandboxing.choice.sandbox, policy=sandboxing.policy)


def web_fetcher(loaded: LoadedConfig) -> WebFetcher:
    """The httpx fetcher under `tools.network`. Without allowed hosts or domains (nothing in
    them can be wrong) it is built at the first fetch (`LazyWebFetcher`); with some, at once,
    so that a malformed entry is a ConfigError when the run starts."""
    network = loaded.config.tools.network

    def build() -> WebFetcher:
        _import_httpx()
        from soong_agent.adapters.web.fetcher import HttpxWebFetcher

        return HttpxWebFetcher(
            allowed_hosts=network.allowed_hosts,
            allowed_domains=network.allowed_domains,
            policy=loaded.config.permissions.network_policy,
        )

    if network.allowed_hosts or network.allowed_domains:
        return build()
    return LazyWebFetcher(build)


class LazyWebFetcher:
    """A web fetcher built at the first fetch: the httpx fetcher's module (its address
    checks, the HTML reduction) is not imported by runs that never fetch."""

    def __init__(self, build: Callable[[], WebFetcher]) -> None:
        self._build = build
        self._inner: WebFetcher | None = None

    async def fetch(self, url: str, *, max_bytes: int, timeout_s: float) -> FetchResult:
        if self._inner is None:
            self._inner = self._build()
        return await self._inner.fetch(url, max_bytes=max_bytes, timeout_s=timeout_s)


class LazyShellAnalyzer:
    """The tree-sitter analyzer, imported when the first command line is checked."""

    def __init__(self) -> None:
        self._inner: ShellAnalyzer | None = None

    def analyze(self, command: str) -> ShellAnalysis:
        if self._inner is None:
            from soong_agent.adapters.shell.treesitter import TreeSitterShellAnalyzer

            self._inner = TreeSitterShellAnalyzer()
        return self._inner.analyze(command)
