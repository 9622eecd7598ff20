"""The `config.toml` schema (CFG-5): thirteen sections, unknown keys rejected, seed defaults.

The tables of tools and their guards are in `tool_sections` (imported from here too), the base
of every table in `section`.
"""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, model_validator

from soong_agent.domain.config.section import Section, defaults
from soong_agent.domain.config.storage_section import StorageConfig, WorkersConfig
from soong_agent.domain.config.telemetry_section import TelemetryConfig
from soong_agent.domain.config.tool_sections import (
    DEFAULT_SENSITIVE_PATHS,
    HooksConfig,
    McpToolOverride,
    McpToolsConfig,
    NetworkConfig,
    PermissionRule,
    PermissionsConfig,
    SandboxConfig,
    ToolOverride,
    ToolsConfig,
)
from soong_agent.ports.defaults import no_entries, no_items

ProviderName = Literal["openai", "anthropic", "ollama"]
ReasoningEffort = Literal["low", "medium", "high"]

DEFAULT_BASE_URLS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "ollama": "http://127.0.0.1:11434",
}
DEFAULT_KEY_ENVS: dict[str, str] = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "ollama": "",
}


def _valid_base_url(text: str) -> str:
    """`base_url` must be an http(s) URL with a host; a bare `host:port/v1` is the usual slip."""
    try:
        parts = urlsplit(text)
        host = parts.hostname
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError as exc:
        raise ValueError(f"expected an http(s) URL, found {text!r}: {exc}") from exc
    if parts.scheme not in ("http", "https") or not host:
        example = f"http://{text}" if "://" not in text else "http://127.0.0.1:8080/v1"
        raise ValueError(
            f"expected an http(s) URL with a host, such as {example!r}, found {text!r}"
        )
    return text


BaseUrl = Annotated[str, AfterValidator(_valid_base_url)]


class RetryConfig(Section):
    """How failed model calls are retried: before the first byte arrives, and (at most
    `stream_max_retries` times) when an answer is cut off part-way."""

    max_attempts: int = Field(default=4, ge=1, le=20)
    initial_backoff_ms: int = Field(default=500, ge=0)
    max_backoff_ms: int = Field(default=30_000, ge=0)
    max_retry_after_ms: int = Field(default=60_000, ge=0)
    stream_max_retries: int = Field(default=3, ge=0, le=20)


class PriceConfig(Section):
    """Prices of one model in US dollars per million tokens, to show what runs cost."""

    input_per_mtok: float = Field(default=0.0, ge=0.0)
    output_per_mtok: float = Field(default=0.0, ge=0.0)
    cache_read_per_mtok: float = Field(default=0.0, ge=0.0)
    cache_write_per_mtok: float = Field(default=0.0, ge=0.0)


class ModelConfig(Section):
    """The main model profile; every other profile is layered over it."""

    provider: ProviderName = "openai"
    base_url: BaseUrl | None = None
    api_key_env: str | None = None
    name: str = ""
    context_window: int = Field(default=128_000, gt=0)
    max_output_tokens: int = Field(default=8_192, gt=0)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    timeout_ms: int = Field(default=600_000, gt=0)
    """One whole model call: from sending the request to the end of the answer's stream."""
    idle_timeout_ms: int = Field(default=300_000, gt=0)
    """The longest the server may send nothing (before the answer or between its pieces)."""
    retry: RetryConfig = Field(default_factory=defaults(RetryConfig))
    thinking_budget_tokens: int | None = Field(default=None, ge=1024)
    reasoning_effort: ReasoningEffort | None = None
    """How hard a reasoning model thinks (PROV-7); unset: nothing is sent."""
    vision: bool | None = None
    """Whether the model is shown images; unset: decided by its name (`domain.images`)."""
    price: PriceConfig | None = None

    @property
    def resolved_base_url(self) -> str:
        """`base_url`, or the provider's public endpoint when unset."""
        return (self.base_url or DEFAULT_BASE_URLS[self.provider]).rstrip("/")

    @property
    def resolved_key_env(self) -> str:
        """`api_key_env`, or the provider's usual variable; empty means no key is sent."""
        return DEFAULT_KEY_ENVS[self.provider] if self.api_key_env is None else self.api_key_env


class ModelOverride(Section):
    """A partial model profile: only the keys given replace those of `[model]`."""

    provider: ProviderName | None = None
    base_url: BaseUrl | None = None
    api_key_env: str | None = None
    name: str | None = None
    context_window: int | None = Field(default=None, gt=0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    timeout_ms: int | None = Field(default=None, gt=0)
    idle_timeout_ms: int | None = Field(default=None, gt=0)
    retry: RetryConfig | None = None
    thinking_budget_tokens: int | None = Field(default=None, ge=1024)
    reasoning_effort: ReasoningEffort | None = None
    vision: bool | None = None
    price: PriceConfig | None = None


ModelProfileRef = str | ModelOverride

MemoryCategory = Literal["user", "feedback", "reference"]
MEMORY_CATEGORIES: tuple[MemoryCategory, ...] = ("user", "feedback", "reference")


class StuckConfig(Section):
    """When a run counts as stuck, and how often it is steered before it stops."""

    same_call: int = Field(default=4, ge=0)
    """The same call with the same result this many times in a row (0: off)."""
    same_error: int = Field(default=4, ge=0)
    cycle: int = Field(default=3, ge=0)
    """An A-B (or A-B-C) pattern of calls with the same results, repeated this many times."""
    monologue: int = Field(default=4, ge=0)
    compaction: int = Field(default=3, ge=0)
    max_interventions: int = Field(default=3, ge=0)
    """Reminders and prunings before the run stops with status `stuck`."""


class RuntimeConfig(Section):
    """Run-wide limits."""

    cancel_timeout_ms: int = Field(default=10_000, ge=0)
    max_turns: int = Field(default=100, ge=1)
    max_continuations: int = Field(default=3, ge=0)
    max_cost_usd: float | None = Field(default=None, gt=0)
    """Stop a run once it has cost this much (needs the model's prices)."""
    max_tokens: int | None = Field(default=None, gt=0)
    """Stop a run once it has used this many tokens (input + output, cache included)."""
    max_wall_ms: int | None = Field(default=None, gt=0)
    """Stop a run after this long."""
    stuck: StuckConfig = Field(default_factory=defaults(StuckConfig))


class ContextConfig(Section):
    """Where sessions live and how the context window is budgeted."""

    session_db_path: str = "${SOONG_AGENT_HOME}/sessions.sqlite"
    active_path_only: Literal[True] = True
    """Only the active branch (root to the current leaf) is ever sent; `false` is
    refused rather than accepted and ignored."""
    allow_branch_from: Literal["user_message"] = "user_message"
    branch_summary: Literal[False] = False
    reserve_output_tokens: int = Field(default=8_192, ge=0)
    dynamic_system_budget: int = Field(default=12_000, ge=0)
    non_system_budget: int | None = Field(default=None, ge=0)


class CompactConfig(Section):
    """Compaction of long contexts."""

    enabled: bool = True
    reserve_tokens: int = Field(default=16_384, ge=0)
    keep_recent_tokens: int = Field(default=20_000, ge=0)
    auto_background: bool = True
    recovery_sync: bool = True
    model_profile: ModelProfileRef | None = None
    max_summary_tokens: int = Field(default=4_000, gt=0)


class MemoryConfig(Section):
    """Long-term memory across sessions."""

    enabled: bool = True
    memory_dir: str = "${SOONG_AGENT_HOME}/memory"
    categories: list[MemoryCategory] = Field(default_factory=lambda: list(MEMORY_CATEGORIES))
    extract_every_messages: int = Field(default=20, ge=1)
    extract_every_tokens: int = Field(default=12_000, ge=1)
    idle_seconds: int = Field(default=300, ge=0)
    catalog_max_tokens: int = Field(default=2_000, ge=0)
    recall_top_k: int = Field(default=5, ge=0)
    memory_context_token_budget: int = Field(default=2_000, ge=0)
    extract_model_profile: ModelProfileRef | None = None
    recall_model_profile: ModelProfileRef | None = None
    consolidate_min_hours: float = Field(default=24.0, ge=0)
    consolidate_min_sessions: int = Field(default=5, ge=0)


class WorkerConfig(Section):
    """One worker of an orchestrator pool."""

    worker_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    agent_definition_id: str
    allowed_tools: list[str] | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    """Tokens the worker may use over all its tasks for one orchestrator session."""
    max_cost_usd: float | None = Field(default=None, gt=0)


class WorkerPoolConfig(Section):
    """A pool of explicitly listed workers."""

    pool_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    workers: list[WorkerConfig] = Field(default_factory=no_items)
    max_tokens: int | None = Field(default=None, gt=0)
    """Tokens the pool's workers may use together for one orchestrator session."""
    max_cost_usd: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _unique_worker_ids(self) -> WorkerPoolConfig:
        seen: set[str] = set()
        for worker in self.workers:
            if worker.worker_id is None:
                continue
            if worker.worker_id in seen:
                raise ValueError(
                    f"worker_id {worker.worker_id!r} appears twice in pool {self.pool_id!r}"
                )
            seen.add(worker.worker_id)
        return self


class AgentsConfig(Section):
    """Child agents and orchestrator worker pools."""

    max_children_per_run: int = Field(default=8, ge=0)
    default_sub_agent_definition: str = "default_sub_agent"
    worker_pools: list[WorkerPoolConfig] = Field(default_factory=no_items)
    max_concurrent_children_per_session: int = Field(default=4, ge=1)
    default_child_timeout_ms: int = Field(default=600_000, gt=0)
    child_cancel_timeout_ms: int = Field(default=30_000, ge=0)
    max_teammates: int = Field(default=8, ge=0)
    """Teammates of one team that have not stopped (`spawn_teammate`, orchestrator mode)."""
    worktrees: bool | None = None
    """A git worktree per teammate; None: when the project is a git repository."""

    @model_validator(mode="after")
    def _unique_pool_ids(self) -> AgentsConfig:
        seen: set[str] = set()
        for pool in self.worker_pools:
            if pool.pool_id in seen:
                raise ValueError(f"pool_id {pool.pool_id!r} appears twice in agents.worker_pools")
            seen.add(pool.pool_id)
        return self


class PlanConfig(Section):
    """Where plans are written."""

    default_dir: str = "<project>/.soong-agent/plans"
    template_name: str = "default"


class TaskConfig(Section):
    """The task DAG write-ahead logs."""

    wal_dir: str = "<project>/.soong-agent/tasks"
    task_board_token_budget: int = Field(default=1_200, ge=0)
    task_recent_changes_limit: int = Field(default=20, ge=0)
    task_recent_changes_window_minutes: int = Field(default=30, ge=0)
    step_lease_timeout_ms: int = Field(default=300_000, gt=0)


class SoongConfig(Section):
    """The whole `config.toml`."""

    runtime: RuntimeConfig = Field(default_factory=defaults(RuntimeConfig))
    model: ModelConfig = Field(default_factory=defaults(ModelConfig))
    model_overrides: dict[str, ModelOverride] = Field(default_factory=no_entries)
    context: ContextConfig = Field(default_factory=defaults(ContextConfig))
    compact: CompactConfig = Field(default_factory=defaults(CompactConfig))
    memory: MemoryConfig = Field(default_factory=defaults(MemoryConfig))
    agents: AgentsConfig = Field(default_factory=defaults(AgentsConfig))
    plan: PlanConfig = Field(default_factory=defaults(PlanConfig))
    task: TaskConfig = Field(default_factory=defaults(TaskConfig))
    permissions: PermissionsConfig = Field(default_factory=defaults(PermissionsConfig))
    hooks: HooksConfig = Field(default_factory=defaults(HooksConfig))
    tools: ToolsConfig = Field(default_factory=defaults(ToolsConfig))
    sandbox: SandboxConfig = Field(default_factory=defaults(SandboxConfig))
    storage: StorageConfig = Field(default_factory=defaults(StorageConfig))
    workers: WorkersConfig = Field(default_factory=defaults(WorkersConfig))
    telemetry: TelemetryConfig = Field(default_factory=defaults(TelemetryConfig))

    @model_validator(mode="after")
    def _one_sqlite_file(self) -> SoongConfig:
        if self.storage.url is not None and "session_db_path" in self.context.model_fields_set:
            raise ValueError(
                "storage.url and context.session_db_path both say where sessions are kept: "
                "set only storage.url (context.session_db_path is the SQLite file used when "
                "storage.url is unset)"
            )
        return self


__all__ = [
    "DEFAULT_BASE_URLS",
    "DEFAULT_KEY_ENVS",
    "DEFAULT_SENSITIVE_PATHS",
    "AgentsConfig",
    "BaseUrl",
    "CompactConfig",
    "ContextConfig",
    "HooksConfig",
    "McpToolOverride",
    "McpToolsConfig",
    "MemoryCategory",
    "MemoryConfig",
    "ModelConfig",
    "ModelOverride",
    "ModelProfileRef",
    "NetworkConfig",
    "PermissionRule",
    "PermissionsConfig",
    "PlanConfig",
    "PriceConfig",
    "ProviderName",
    "RetryConfig",
    "RuntimeConfig",
    "SandboxConfig",
    "Section",
    "SoongConfig",
    "StuckConfig",
    "TaskConfig",
    "ToolOverride",
    "ToolsConfig",
    "WorkerConfig",
    "WorkerPoolConfig",
]
