"""Builders the containers call; heavy adapters are imported here lazily, when first built."""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.errors import ConfigError, MissingSecretError, UsageError
from soong_agent.ports.mcp import McpHub
from soong_agent.ports.memory import MemoryStore
from soong_agent.ports.model import ModelProvider
from soong_agent.ports.ossandbox import SandboxPolicy
from soong_agent.ports.process import ProcessRunner
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.ports.shell import ShellAnalysis, ShellAnalyzer
from soong_agent.ports.skills import SkillSource
from soong_agent.ports.system import SecretSource, TokenCounter
from soong_agent.ports.web import FetchResult, WebFetcher

if TYPE_CHECKING:
    import httpx

    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.adapters.ossandbox.select import SandboxChoice
    from soong_agent.adapters.sandbox.local_fs import LocalFileSystem
    from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
    from soong_agent.application.assembly import RunAssembler, RunPolicies, RunSpec
    from soong_agent.application.child_runs import ChildRuns, ChildSetup
    from soong_agent.application.hooks import HookPipeline
    from soong_agent.application.memory.consolidation import MemoryConsolidation
    from soong_agent.application.memory.extraction import MemoryExtraction
    from soong_agent.application.memory.recall import MemoryRecall
    from soong_agent.application.plan_mode import PlanModes
    from soong_agent.application.runs.starter import RunStarter
    from soong_agent.application.runs.variants import AgentVariants
    from soong_agent.application.teams import TeamService
    from soong_agent.application.tools.base import Tool, ToolRegistry
    from soong_agent.application.tools.todo import TodoBoard
    from soong_agent.domain.config.resolve import ResolvedProfile
    from soong_agent.domain.memory import MemoryPolicy
    from soong_agent.ports.agents import AgentSource
    from soong_agent.ports.approval import Approver
    from soong_agent.ports.mailbox import Mailbox
    from soong_agent.ports.storage import SessionStore
    from soong_agent.ports.system import Clock
    from soong_agent.ports.tasks import TaskLog
    from soong_agent.ports.worktrees import Worktrees


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

    common: dict[str, Any] = {
        "client": client,
        "base_url": model.resolved_base_url,
        "model": model.name,
        "api_key": api_key_reader(profile, secrets),
        "retry": RetryPolicy.from_config(model.retry),
        "timeout_s": model.timeout_ms / 1000,
        "idle_timeout_s": model.idle_timeout_ms / 1000,
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


def secret_names(loaded: LoadedConfig) -> set[str]:
    """Every variable a model profile reads its key from: never passed to tools."""
    from soong_agent.domain.config.schema import DEFAULT_KEY_ENVS

    names = {n for n in DEFAULT_KEY_ENVS.values() if n}
    names |= {p.model.resolved_key_env for p in loaded.profiles if p.model.resolved_key_env}
    return names


def secret_redactor(loaded: LoadedConfig, secrets: SecretSource) -> SecretRedactor:
    """The scrubber of everything stored or shown (CFG-6): the values of every key variable
    (`secret_names`), read when first needed, and high-confidence secret patterns."""
    from soong_agent.adapters.redaction import SecretScrubber

    return SecretScrubber(secrets, secret_names(loaded))


@dataclass(frozen=True)
class ToolCatalog:
    """The tools of a runtime and the problems met while loading them (shown as warnings)."""

    registry: ToolRegistry
    warnings: list[str]


def tool_catalog(
    loaded: LoadedConfig,
    runner: ProcessRunner,
    fetcher: WebFetcher,
    artifacts: ArtifactStore,
    board: TodoBoard,
    user_tools: list[Tool],
    sandbox: CommandSandboxing | None = None,
    knowledge: Knowledge | None = None,
    plan_modes: PlanModes | None = None,
    approver: Approver | None = None,
    tasks: TaskLog | None = None,
    clock: Clock | None = None,
) -> ToolCatalog:
    """Built-in tools, declarative tools from the home, the SDK caller's Python tools, then
    `tools.disabled`/`overrides`. A Python tool named like another tool is a UsageError.

    `runner` runs the commands of run_command and declarative tools; `sandbox` is the OS
    sandbox it starts them in: what it allows is told to the model, and its warning (no
    sandbox works here) joins the catalog's warnings. `knowledge` adds `load_skill` (when
    the home has skills) and the memory tools (when `memory.enabled`)."""
    import os

    from soong_agent.adapters.declarative.loader import load_enabled_declarative_tools
    from soong_agent.application.tools.agents import agent_tools
    from soong_agent.application.tools.artifacts import read_artifact_tool
    from soong_agent.application.tools.base import ToolRegistry
    from soong_agent.application.tools.catalog import apply_tool_config
    from soong_agent.application.tools.declarative import add_declarative_tools
    from soong_agent.application.tools.files import file_tools
    from soong_agent.application.tools.shell import run_command_tool
    from soong_agent.application.tools.todo import todo_write_tool
    from soong_agent.application.tools.web import web_fetch_tool

    config = loaded.config.tools
    project = str(loaded.project)
    secrets = secret_names(loaded)
    env = dict(os.environ)
    if tasks is None:
        tasks = task_log(loaded)
    if clock is None:
        from soong_agent.adapters.system.clock import SystemClock

        clock = SystemClock()
    tools = [
        *file_tools(),
        run_command_tool(
            runner=runner,
            project=project,
            tools=config,
            base_env=env,
            secret_names=secrets,
            sandbox_note=sandbox.note if sandbox is not None else "",
        ),
        web_fetch_tool(fetcher=fetcher, max_bytes=config.fetch_max_bytes),
        todo_write_tool(board),
        read_artifact_tool(store=artifacts),
        *_deferrable(
            [
                *(agent_tools() if loaded.config.agents.max_children_per_run > 0 else ()),
                *(knowledge.tools if knowledge is not None else ()),
                *_plan_tools(loaded, plan_modes, approver),
                *_task_tools(loaded, tasks, clock),
            ]
        ),
    ]
    specs, problems = load_enabled_declarative_tools(loaded.home / "tools", config)
    tools, clashes = add_declarative_tools(
        tools,
        specs,
        runner=runner,
        project=project,
        config=config,
        env=env,
        secret_names=secrets,
    )
    taken = {t.name for t in tools} | {"compact"}  # `compact` is added to every run
    for tool in user_tools:
        if tool.name in taken:
            raise UsageError(
                f"tools: a tool named {tool.name!r} already exists (a built-in or declarative "
                "tool, or another of yours); give yours another name with @tool(name=...)"
            )
        taken.add(tool.name)
    tools, warnings = apply_tool_config([*tools, *user_tools], config)
    loud = [sandbox.choice.warning] if sandbox is not None and sandbox.choice.warning else []
    known = knowledge.warnings if knowledge is not None else []
    return ToolCatalog(ToolRegistry(tools), [*loud, *problems, *clashes, *known, *warnings])


def _deferrable(tools: list[Tool]) -> list[Tool]:
    """Tools a run with many tools offers by name only, behind tool_search (so a small
    context window is not filled with schemas): sub-agents and forks, skills, memory, plans
    and tasks."""
    import dataclasses

    return [dataclasses.replace(tool, deferrable=True) for tool in tools]


ACTIVE_PLAN_LINES = 40
"""How much of the active plan compaction carries over (its file holds the rest)."""


def active_plan_reader(loaded: LoadedConfig) -> Callable[[str], str]:
    """The session's active plan as compaction carries it over (PLAN-1): the plan file this
    session wrote last (its marker line names the session), by name and path, and its first
    `ACTIVE_PLAN_LINES` lines; "" when the session wrote none."""
    from soong_agent.application.tools.plans import PlanFile

    folder = Path(loaded.config.plan.default_dir)
    # a plans folder inside the project is read only where it really is (no link of the
    # project's leads this read elsewhere); one the user put outside is theirs, as it is
    in_project = folder.is_relative_to(loaded.project)

    def read(session_id: str) -> str:
        try:
            if in_project and os.path.realpath(folder) != os.fspath(folder):
                return ""
            files = sorted(
                (p for p in folder.glob("*.md") if not p.is_symlink()),
                key=lambda p: p.lstat().st_mtime,
                reverse=True,
            )
        except OSError:
            return ""
        for path in files:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as file:
                    text = file.read().decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            plan = PlanFile(text)
            if plan.owner != session_id:
                continue
            lines = plan.body.strip().splitlines()
            shown = "\n".join(lines[:ACTIVE_PLAN_LINES])
            more = len(lines) - ACTIVE_PLAN_LINES
            tail = f"\n[… {more} more lines in the file]" if more > 0 else ""
            return f"Active plan {path.stem!r} ({path}):\n{shown}{tail}"
        return ""

    return read


def task_board_reader(loaded: LoadedConfig, log: TaskLog, clock: Clock) -> Callable[[str], str]:
    """The task board of a session, as the system prompt and compaction show it (TASK-2):
    read from the WAL files, cut to `task.task_board_token_budget`; "" without tasks."""
    from soong_agent.application.tools.tasks import task_board_text

    task = loaded.config.task
    folder = os.fspath(task.wal_dir)

    def read(session_id: str) -> str:
        if not os.path.isdir(os.path.join(folder, session_id)):
            return ""  # no task yet: no file is opened (a look per run: no Path built)
        return task_board_text(
            log,
            session_id,
            task.task_board_token_budget,
            clock=clock,
            recent_limit=task.task_recent_changes_limit,
            recent_window_minutes=task.task_recent_changes_window_minutes,
        )

    return read


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


def _task_tools(loaded: LoadedConfig, log: TaskLog, clock: Clock) -> list[Tool]:
    """The task-graph tools over the project's WAL files (TASK-1, TASK-2)."""
    from soong_agent.application.tools.tasks import task_tools

    task = loaded.config.task
    return task_tools(
        log,
        clock,
        task.step_lease_timeout_ms,
        recent_limit=task.task_recent_changes_limit,
        recent_window_minutes=task.task_recent_changes_window_minutes,
    )


def _plan_tools(
    loaded: LoadedConfig, modes: PlanModes | None, approver: Approver | None
) -> list[Tool]:
    """plan_write/read/list and, with `modes`, enter/exit_plan_mode (PLAN-1, PLAN-2)."""
    from soong_agent.application.plan_mode import plan_mode_tools
    from soong_agent.application.tools.plans import plan_tools

    plan = loaded.config.plan
    tools = plan_tools(plan)
    if modes is not None:
        tools += plan_mode_tools(modes, approver=approver, plan=plan)
    return tools


@dataclass(frozen=True)
class Knowledge:
    """What the agent knows beyond the project: the home's skills (SKILL-1) and its memory
    store (MEM-1), with the tools that reach them and what was wrong reading them."""

    skills: SkillSource | None
    memory: MemoryStore | None
    tools: list[Tool]
    warnings: list[str]
    policy: MemoryPolicy | None = None
    """The memory policy every writer goes through (None without memory)."""


def knowledge(loaded: LoadedConfig, redactor: SecretRedactor) -> Knowledge:
    """The skills of `${SOONG_AGENT_HOME}/skills` (never a project's) and, with
    `memory.enabled`, the memory store of `memory.memory_dir` behind the memory policy (a
    secret, a file listing or task progress is refused whatever the model says)."""
    from pathlib import Path

    from soong_agent.adapters.memory import FileMemoryStore
    from soong_agent.adapters.skills import HomeSkillSource
    from soong_agent.application.tools.memory import memory_tools
    from soong_agent.application.tools.skills import skills_tool
    from soong_agent.domain.memory import MemoryPolicy

    tools: list[Tool] = []
    source = HomeSkillSource(loaded.home)
    skills: SkillSource | None = None
    if source.skills():
        skills = source
        tools.append(skills_tool(source))
    warnings = [f"skills: {w}" for w in source.warnings()]
    memory: MemoryStore | None = None
    policy: MemoryPolicy | None = None
    config = loaded.config.memory
    if config.enabled:
        memory = FileMemoryStore(Path(config.memory_dir))
        policy = MemoryPolicy(redactor, categories=config.categories)
        tools += memory_tools(memory, policy)
    return Knowledge(skills, memory, tools, warnings, policy)


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


def memory_recall(
    loaded: LoadedConfig,
    known: Knowledge,
    provider: ModelProvider,
    profile: ResolvedProfile,
    redactor: SecretRedactor,
) -> MemoryRecall | None:
    """Recall (MEM-4) over the memory store; None without memory (`memory.enabled`)."""
    if known.memory is None:
        return None
    from soong_agent.application.memory.recall import MemoryRecall, RecallSettings

    config = loaded.config.memory
    settings = RecallSettings(
        top_k=config.recall_top_k,
        catalog_max_tokens=config.catalog_max_tokens,
        context_tokens=config.memory_context_token_budget,
        temperature=profile.model.temperature,
    )
    return MemoryRecall(known.memory, provider, settings, redactor=redactor)


def memory_extraction(
    loaded: LoadedConfig,
    known: Knowledge,
    sessions: SessionStore,
    provider: ModelProvider,
    profile: ResolvedProfile,
    clock: Clock,
    redactor: SecretRedactor,
    closables: list[Callable[[], Awaitable[None]]],
) -> MemoryExtraction | None:
    """The extraction job (MEM-3); None without memory. Closing the runtime gives a running
    extraction `CLOSE_TIMEOUT_S` to finish."""
    if known.memory is None or known.policy is None:
        return None
    from soong_agent.application.memory.extraction import ExtractionSettings, MemoryExtraction

    config = loaded.config.memory
    extraction = MemoryExtraction(
        sessions=sessions,
        memory=known.memory,
        policy=known.policy,
        provider=provider,
        clock=clock,
        settings=ExtractionSettings(
            every_messages=config.extract_every_messages,
            every_tokens=config.extract_every_tokens,
            idle_seconds=config.idle_seconds,
            catalog_max_tokens=config.catalog_max_tokens,
            temperature=profile.model.temperature,
        ),
        redactor=redactor,
    )
    closables.append(extraction.aclose)
    return extraction


def memory_consolidation(
    loaded: LoadedConfig,
    known: Knowledge,
    sessions: SessionStore,
    provider: ModelProvider,
    clock: Clock,
    redactor: SecretRedactor,
) -> MemoryConsolidation | None:
    """The consolidation pass (seed 002 "Dream"); None without memory. Due at most once per
    `memory.consolidate_min_hours`, after `consolidate_min_sessions` new sessions."""
    if known.memory is None or known.policy is None:
        return None
    from soong_agent.application.memory.consolidation import (
        ConsolidationSettings,
        MemoryConsolidation,
    )

    config = loaded.config.memory
    return MemoryConsolidation(
        memory=known.memory,
        policy=known.policy,
        provider=provider,
        clock=clock,
        folder=config.memory_dir,
        sessions=sessions,
        settings=ConsolidationSettings(
            min_hours=config.consolidate_min_hours, min_sessions=config.consolidate_min_sessions
        ),
        redactor=redactor,
    )


def run_policies(loaded: LoadedConfig, profile: ResolvedProfile) -> RunPolicies:
    """The configuration every run of this runtime follows."""
    from soong_agent.application.assembly import RunPolicies

    config = loaded.config
    return RunPolicies(
        permissions=config.permissions,
        context=config.context,
        compact=config.compact,
        context_window=profile.model.context_window,
        provider_name=profile.model.provider,
        max_result_chars=config.tools.max_result_chars,
        cancel_timeout_s=config.runtime.cancel_timeout_ms / 1000,
        max_stop_continuations=config.hooks.max_stop_continuations,
        mcp=config.tools.mcp,
        defer_threshold=config.tools.defer_threshold,
        tools=config.tools,
    )


def mcp_hub(
    loaded: LoadedConfig,
    closables: list[Callable[[], Awaitable[None]]],
    *,
    use_cache: bool = True,
) -> McpHub | None:
    """The MCP servers of `${SOONG_AGENT_HOME}/mcp.json` (MCP-1; a project cannot add any),
    read once at start: a bad file is a ConfigError naming the server and field. None when
    there is no server (`tools.mcp.disabled_servers` left out). Tool lists are cached under
    `${SOONG_AGENT_HOME}/cache/mcp` for `discovery_cache_ttl_ms` (not with `use_cache=False`).
    The servers start with the first run (or `start()`)."""
    from soong_agent.adapters.mcp import load_mcp_servers

    mcp = loaded.config.tools.mcp
    specs = load_mcp_servers(loaded.home, mcp.disabled_servers)
    if not specs:
        return None  # the mcp SDK (~0.5 s to import) is loaded only when servers exist
    from soong_agent.adapters.mcp import SdkMcpHub

    hub = SdkMcpHub(
        specs,
        startup_timeout_s=mcp.startup_timeout_ms / 1000,
        call_timeout_s=mcp.call_timeout_ms / 1000,
        cache_dir=loaded.home / "cache" / "mcp" if use_cache else None,
        cache_ttl_s=mcp.discovery_cache_ttl_ms / 1000,
    )
    closables.append(hub.aclose)
    return hub


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
    import os
    import platform
    import sys

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


def root_spec(
    loaded: LoadedConfig, catalog: ToolCatalog, profile: ResolvedProfile, provider: ModelProvider
) -> RunSpec:
    """What the root runs of this runtime are made of: the catalog's tools, the main model."""
    from soong_agent.application.assembly import RunSpec
    from soong_agent.application.loop import LoopSettings
    from soong_agent.domain.run_limits import RunLimits
    from soong_agent.domain.stuck import StuckSettings

    runtime, model = loaded.config.runtime, profile.model
    stuck = runtime.stuck
    return RunSpec(
        tools=catalog.registry,
        compact="compact" not in loaded.config.tools.disabled,
        settings=LoopSettings(
            model_label=provider.label,
            max_turns=runtime.max_turns,
            max_continuations=runtime.max_continuations,
            max_output_tokens=model.max_output_tokens,
            temperature=model.temperature,
            price=model.price,
            limits=RunLimits(
                max_cost_usd=runtime.max_cost_usd,
                max_tokens=runtime.max_tokens,
                max_wall_ms=runtime.max_wall_ms,
            ),
            stuck=StuckSettings(
                same_call=stuck.same_call,
                same_error=stuck.same_error,
                cycle=stuck.cycle,
                monologue=stuck.monologue,
                compaction=stuck.compaction,
                max_interventions=stuck.max_interventions,
            ),
        ),
    )


def agent_source(loaded: LoadedConfig) -> AgentSource:
    """The agent definitions: the built-ins and `${SOONG_AGENT_HOME}/agents` (never a
    project's), read at the first question."""
    from soong_agent.adapters.agents import HomeAgentSource

    return HomeAgentSource(loaded.home)


def agent_setups(
    loaded: LoadedConfig,
    assembler: RunAssembler,
    root: RunSpec,
    client: Callable[[], httpx.AsyncClient],
    secrets: SecretSource,
    known: Knowledge,
    agents: AgentSource,
    sandboxing: Callable[[], CommandSandboxing],
) -> AgentVariants:
    """How a run of each agent definition is put together: root, child and teammate alike
    (AGT-1, TEAM-4), over the ports it needs (definitions, a model per profile, the skills,
    a teammate's worktree)."""
    from soong_agent.application.runs.variants import AgentVariants, late_tools
    from soong_agent.entrypoints.workspaces import ConfigProfileModels, WorktreeWorkspaces

    config = loaded.config

    def member_tools() -> list[Tool]:  # (a teammate's: imported only when teams are used)
        from soong_agent.application.tools.team import send_message_tool

        return late_tools([send_message_tool()], config)

    return AgentVariants(
        config,
        assembler,
        root,
        agents=agents,
        models=ConfigProfileModels(loaded, client, secrets),
        skills=known.skills,
        workspaces=WorktreeWorkspaces(loaded, sandboxing),
        member_tools=member_tools,
    )


def agent_presets(setups: AgentVariants) -> Callable[[str], ChildSetup]:
    """The set-up of a root run of each agent definition (AGT-1, AGT-3): definitions come
    from the built-ins and `${SOONG_AGENT_HOME}/agents` only; an unknown id is a UsageError
    listing the known ones."""
    return setups.root


def child_runs(loaded: LoadedConfig, setups: AgentVariants, starter: RunStarter) -> ChildRuns:
    """The runtime's child agents (AGT-2, AGT-4): how a child of each definition is put
    together (`AgentSetups.child`), the limits of `[agents]`, and the declared worker pools."""
    from soong_agent.application.child_runs import ChildLimits, ChildRuns, Worker, WorkerPool
    from soong_agent.domain.agents import worker_id
    from soong_agent.domain.run_limits import RunLimits

    config = loaded.config
    source = setups.source
    pools = [
        WorkerPool(
            pool_id=pool.pool_id,
            workers=tuple(
                Worker(
                    pool=pool.pool_id,
                    worker_id=worker_id(pool.pool_id, i, w.agent_definition_id, w.worker_id),
                    agent=w.agent_definition_id,
                    allowed_tools=tuple(w.allowed_tools) if w.allowed_tools is not None else None,
                    limits=RunLimits(max_tokens=w.max_tokens, max_cost_usd=w.max_cost_usd),
                )
                for i, w in enumerate(pool.workers, start=1)
                if source.get(w.agent_definition_id) is not None
            ),
            limits=RunLimits(max_tokens=pool.max_tokens, max_cost_usd=pool.max_cost_usd),
        )
        for pool in config.agents.worker_pools
    ]
    agents = config.agents
    limits = ChildLimits(
        max_children_per_run=agents.max_children_per_run,
        max_concurrent_per_session=agents.max_concurrent_children_per_session,
        timeout_s=agents.default_child_timeout_ms / 1000,
        cancel_timeout_s=agents.child_cancel_timeout_ms / 1000,
        default_sub_agent=agents.default_sub_agent_definition,
    )
    return ChildRuns(setups.child, limits, pools=[p for p in pools if p.workers], starter=starter)


def team_service(
    loaded: LoadedConfig,
    assembler: RunAssembler,
    setups: AgentVariants,
    artifacts: ArtifactStore,
    closables: list[Callable[[], Awaitable[None]]],
    starter: RunStarter,
    inboxes: Mailbox,
    tasks: TaskLog,
    trees: Worktrees | None,
) -> TeamService:
    """The runtime's teams (issue 20): mailboxes under `<project>/.soong-agent/teams`, the
    task WALs, and a git worktree per teammate when `agents.worktrees` (default: when the
    project is a git repository); a teammate is put together by `AgentVariants.member`."""
    from soong_agent.application.teams import TeamLimits, TeamService

    agents = loaded.config.agents
    service = TeamService(
        store=assembler.ports.store,
        mailbox=inboxes,
        tasks=tasks,
        clock=assembler.ports.clock,
        ids=assembler.ports.ids,
        setup=setups.member,
        limits=TeamLimits(
            max_teammates=agents.max_teammates,
            run_timeout_s=agents.default_child_timeout_ms / 1000,
            cancel_timeout_s=agents.child_cancel_timeout_ms / 1000,
        ),
        worktrees=trees,
        artifacts=artifacts,
        starter=starter,
    )
    closables.append(service.close)
    return service


def pool_problems(loaded: LoadedConfig) -> list[str]:
    """Why each `agents.worker_pools` entry (or worker) cannot work: an unknown definition,
    a pool without workers (AGT-4)."""
    from soong_agent.adapters.agents import HomeAgentSource
    from soong_agent.domain.agents import unknown_agent_message

    source = HomeAgentSource(loaded.home)
    known = [d.id for d in source.definitions()]
    problems: list[str] = []
    for pool in loaded.config.agents.worker_pools:
        if not pool.workers:
            problems.append(f"agents.worker_pools: pool {pool.pool_id!r} lists no workers")
        for i, worker in enumerate(pool.workers, start=1):
            if source.get(worker.agent_definition_id) is None:
                problems.append(
                    f"agents.worker_pools: pool {pool.pool_id!r}, worker {i}: "
                    + unknown_agent_message(worker.agent_definition_id, known)
                )
    return problems


def orchestrator_spec(
    loaded: LoadedConfig, children: ChildRuns, teams: bool = True
) -> Callable[[RunSpec], RunSpec]:
    """The spec of an orchestrator's run (AGT-4): a spec's tools plus `dispatch_worker` over
    the declared pools. Without a usable pool it is a UsageError naming why."""
    made: dict[str | None, RunSpec] = {}
    persona = (
        "You are an orchestrator: split the work into a task graph (task_create, "
        "task_add_step), then hand work to workers with dispatch_worker, or to long-lived "
        "teammates (spawn_teammate, send_message, team_wait); workers and idle teammates claim "
        "ready steps themselves. Check the board, then report what was done."
    )

    def spec(base: RunSpec) -> RunSpec:
        if base.agent in made:
            return made[base.agent]
        import dataclasses  # (only for an orchestrator's run: the others never import these)

        from soong_agent.application.tools.agents import dispatch_worker_tool
        from soong_agent.application.tools.base import ToolRegistry
        from soong_agent.application.tools.team import lead_tools

        if not children.pools:
            problems = pool_problems(loaded)
            why = "; ".join(problems) if problems else "agents.worker_pools is empty"
            raise UsageError(
                "orchestrator mode needs at least one worker pool with a usable worker "
                f"({why}; in {loaded.path})"
            )
        from soong_agent.application.tools.catalog import apply_tool_config

        tool = dispatch_worker_tool(children.pools_text())
        team = lead_tools() if teams and loaded.config.agents.max_teammates > 0 else []
        # `tools.disabled` / `tools.overrides` reach the orchestrator's tools too (TOOL-3)
        added, _ = apply_tool_config([tool, *team], loaded.config.tools)
        made[base.agent] = dataclasses.replace(
            base,
            tools=ToolRegistry([*base.tools.tools(), *added]),
            persona="\n\n".join(p for p in (base.persona, persona) if p),
        )
        return made[base.agent]

    return spec


def process_runner() -> ProcessRunner:
    """A runner without an OS sandbox (for hooks with `hooks.sandboxed = false`)."""
    from soong_agent.adapters.process.runner import SubprocessRunner

    return SubprocessRunner()


@dataclass(frozen=True)
class CommandSandboxing:
    """The OS sandbox commands run in (SBX-3), the policy it enforces, and the sentence that
    tells the model what it allows."""

    choice: SandboxChoice
    policy: SandboxPolicy
    note: str


def command_sandboxing(loaded: LoadedConfig) -> CommandSandboxing:
    """`sandbox.os` applied: the host is probed once per process (unless ``off``); the policy
    comes from `[tools]` (write roots, sensitive paths) and `[sandbox]` (network)."""
    from soong_agent.adapters.ossandbox import choose_sandbox, model_note
    from soong_agent.adapters.ossandbox.config import command_tmp_dir, policy_for_config

    config = loaded.config
    choice = choose_sandbox(config.sandbox.os)
    policy = policy_for_config(
        config.tools,
        project=str(loaded.project),
        agent_home=str(loaded.home),
        session_db=config.context.session_db_path,
        tmp_dir=command_tmp_dir(),
        network=config.sandbox.network,
    )
    return CommandSandboxing(choice, policy, model_note(choice.sandbox, policy))


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


def artifact_store(
    loaded: LoadedConfig, closables: list[Callable[[], Awaitable[None]]]
) -> ArtifactStore:
    from pathlib import Path

    from soong_agent.adapters.storage.artifacts import SqliteArtifactStore

    store = SqliteArtifactStore(Path(loaded.config.context.session_db_path), loaded.home)
    closables.append(store.close)
    return store


class LazyShellAnalyzer:
    """The tree-sitter analyzer, imported when the first command line is checked."""

    def __init__(self) -> None:
        self._inner: ShellAnalyzer | None = None

    def analyze(self, command: str) -> ShellAnalysis:
        if self._inner is None:
            from soong_agent.adapters.shell.treesitter import TreeSitterShellAnalyzer

            self._inner = TreeSitterShellAnalyzer()
        return self._inner.analyze(command)


def token_counter() -> TokenCounter:
    from soong_agent.adapters.tokens.o200k import O200kTokenCounter

    return O200kTokenCounter()


def compact_profile(loaded: LoadedConfig) -> ResolvedProfile:
    for profile in loaded.profiles:
        if profile.purpose == "compact":
            return profile
    return main_profile(loaded)
