"""The `config.toml` tables of tools and their guards (CFG-5): `[permissions]`, `[hooks]`,
`[tools]` (with `[tools.network]`, `[tools.mcp]`, tool overrides) and `[sandbox]`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from soong_agent.domain.config.section import Section, defaults
from soong_agent.domain.permissions.decision import Outcome, PermissionMode
from soong_agent.domain.permissions.protected import DEFAULT_PROTECTED_PATHS
from soong_agent.domain.permissions.rules import parse_rule
from soong_agent.ports.defaults import no_entries, no_items


def _valid_rule(text: str) -> str:
    """A `permissions.allow` / `permissions.deny` entry must parse (PERM-2)."""
    parse_rule(text)
    return text


PermissionRule = Annotated[str, AfterValidator(_valid_rule)]


class PermissionsConfig(Section):
    """Who may allow what."""

    readonly_default: Outcome = "allow"
    write_without_callback: Literal["allow", "deny"] = "deny"
    remember_scope: Literal["session"] = "session"
    allow_for_session_enabled: bool = True
    network_policy: Literal["allowlist", "deny"] = "allowlist"
    mode: PermissionMode = "default"
    allow: list[PermissionRule] = Field(default_factory=no_items)
    deny: list[PermissionRule] = Field(default_factory=no_items)
    protected_paths: list[str] = Field(default_factory=lambda: list(DEFAULT_PROTECTED_PATHS))


class HooksConfig(Section):
    """Command hooks from `${SOONG_AGENT_HOME}/hooks.json`."""

    enabled: bool = True
    default_timeout_ms: int = Field(default=30_000, gt=0)
    max_stop_continuations: int = Field(default=3, ge=0)
    """How often a `stop` hook may make the agent go on, per run."""
    sandboxed: bool = True
    """Hook commands run in the same OS sandbox as run_command (`[sandbox]`); false: as
    plain processes (for a hook that must write outside the project or reach the network)."""


class NetworkConfig(Section):
    """Where network tools may connect."""

    allowed_hosts: list[str] = Field(default_factory=no_items)
    allowed_domains: list[str] = Field(default_factory=no_items)


class McpToolsConfig(Section):
    """Which MCP servers and tools are used, and how long they may take."""

    disabled_servers: list[str] = Field(default_factory=no_items)
    disabled_tools: list[str] = Field(default_factory=no_items)
    """Full tool names (`mcp__git__git_push`); `*` matches any run of characters."""
    tool_overrides: dict[str, McpToolOverride] = Field(default_factory=no_entries)
    discovery_cache_ttl_ms: int = Field(default=300_000, ge=0)
    startup_timeout_ms: int = Field(default=10_000, gt=0)
    """How long the first model request waits for servers still starting."""
    call_timeout_ms: int = Field(default=60_000, gt=0)
    """Time limit of one MCP tool call (a tool's override `timeout_ms` replaces it)."""
    sampling_profile: str | None = None
    """The `[model_overrides]` profile that answers a server's sampling requests (MCP-4);
    unset: the model of the run the request arrives in."""


class ToolOverride(Section):
    """Replaces parts of one tool's definition."""

    description: str | None = None
    timeout_ms: int | None = Field(default=None, gt=0)
    permission_class: Literal["read_only", "write", "exec", "network"] | None = None


class McpToolOverride(ToolOverride):
    """Replaces parts of one MCP tool's definition; `name` renames it (what the model sees and
    rules match)."""

    name: str | None = Field(default=None, pattern=r"^[a-zA-Z0-9_-]{1,64}$")


DEFAULT_SENSITIVE_PATHS = [
    "~/.ssh",
    "~/.aws",
    "~/.gnupg",
    ".env",
    ".env.*",
    "${SOONG_AGENT_HOME}/config.toml",
    "${SOONG_AGENT_HOME}/sessions.sqlite",
    # what the runtime loads from its home: a tool writing these would change the agent
    "${SOONG_AGENT_HOME}/tools",
    "${SOONG_AGENT_HOME}/hooks.json",
    "${SOONG_AGENT_HOME}/mcp.json",
    "${SOONG_AGENT_HOME}/agents",
    "${SOONG_AGENT_HOME}/skills",
    "${SOONG_AGENT_HOME}/rules",
    "${SOONG_AGENT_HOME}/CLAUDE.md",
    "${SOONG_AGENT_HOME}/AGENTS.md",
    "${SOONG_AGENT_HOME}/memory",
    "${SOONG_AGENT_HOME}/sessions",
]


class ToolsConfig(Section):
    """Tool limits and the sandbox."""

    declarative_enabled: bool = True
    disabled: list[str] = Field(default_factory=no_items)
    overrides: dict[str, ToolOverride] = Field(default_factory=no_entries)
    allowed_write_roots: list[str] = Field(default_factory=lambda: ["<project>"])
    allow_tmp_write: bool = False
    default_timeout_ms: int = Field(default=120_000, gt=0)
    max_timeout_ms: int = Field(default=600_000, gt=0)
    env_allowlist: list[str] = Field(default_factory=lambda: ["PATH", "HOME", "LANG", "TERM"])
    stdout_limit_bytes: int = Field(default=200_000, gt=0)
    stderr_limit_bytes: int = Field(default=100_000, gt=0)
    max_background_commands: int = Field(default=4, ge=0)
    """How many `run_command(background=true)` commands may run at once (BG-1); 0: none."""
    max_result_chars: int = Field(default=30_000, gt=0)
    fetch_max_bytes: int = Field(default=2_000_000, gt=0)
    max_image_bytes: int = Field(default=5_242_880, gt=0)
    checkpoints: Literal["on", "files", "off"] = "on"
    """What each turn's changes keep for a rewind (RWD-1): ``on`` the file tools' files and, in
    a git work tree, snapshots around commands; ``files`` the files only; ``off`` nothing."""
    """The largest image `read_file` or an attachment shows a model (5 MiB, Anthropic's cap)."""
    network: NetworkConfig = Field(default_factory=defaults(NetworkConfig))
    sensitive_paths: list[str] = Field(default_factory=lambda: list(DEFAULT_SENSITIVE_PATHS))
    mcp: McpToolsConfig = Field(default_factory=defaults(McpToolsConfig))
    defer_threshold: int = Field(default=15, ge=0)
    """Past this many tools in all, MCP tools are offered by name only, behind `tool_search`."""


McpToolsConfig.model_rebuild()


CommandNetwork = bool | Literal["allowlist"]
"""What network a sandboxed command has: none, all of it, or the hosts of ``tools.network``
through the host's filtering proxy (SBX-4)."""


class SandboxConfig(Section):
    """The OS sandbox commands run in (SBX-3): `run_command` and declarative tools."""

    os: Literal["auto", "required", "off"] = "auto"
    network: CommandNetwork | None = None
    """``false``: no network; ``true``: any; ``"allowlist"``: only the hosts of
    ``tools.network``, through the filtering proxy. Unset: ``"allowlist"`` when
    ``tools.network`` lists a host or a domain, else ``false`` (`command_network`)."""

    def command_network(
        self, allowed: NetworkConfig, mechanism: str | None = None
    ) -> CommandNetwork:
        """`network`, or when it is unset the default: ``"allowlist"`` when `allowed` lists
        anything (the user named hosts tools may reach: commands may reach them too, and
        nothing else), ``false`` otherwise — and ``false`` under Landlock (`mechanism`), which
        cannot keep a command from the proxy's port on another address (bubblewrap's network
        namespace can): there the allow-list is taken only when it is set."""
        if self.network is not None:
            return self.network
        if not (allowed.allowed_hosts or allowed.allowed_domains):
            return False
        return False if mechanism == "landlock" else "allowlist"
