"""What a run is made of, as data: the adapters it talks to (`RunPorts`), the configuration
that shapes every run of a runtime (`RunPolicies`) and one run's tools and settings
(`RunSpec`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from soong_agent.application.hooks import HookPipeline
from soong_agent.application.mcp.asking import McpAsks
from soong_agent.application.permissions.plan_mode import PlanModes
from soong_agent.application.runs.settings import LoopSettings
from soong_agent.application.tools.background import BackgroundCommands
from soong_agent.application.tools.base import ToolRegistry
from soong_agent.application.tools.pipeline import RESULT_MAX_CHARS
from soong_agent.domain.config.schema import (
    CompactConfig,
    ContextConfig,
    McpToolsConfig,
    PermissionsConfig,
    ToolsConfig,
)
from soong_agent.domain.run_limits import RunLimits
from soong_agent.ports.approval import Approver
from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.errors import UsageError
from soong_agent.ports.filesystem import FileSystem
from soong_agent.ports.mcp import McpHub
from soong_agent.ports.model import ModelProvider, ToolChoice
from soong_agent.ports.prompt import ContextSource
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.ports.shell import ShellAnalyzer
from soong_agent.ports.skills import SkillSource
from soong_agent.ports.snapshots import WorkTreeSnapshots
from soong_agent.ports.storage import SessionStore
from soong_agent.ports.system import Clock, IdGenerator, TokenCounter
from soong_agent.ports.telemetry import Telemetry

__all__ = ["RunPolicies", "RunPorts", "RunSpec"]


@dataclass(frozen=True, slots=True)
class RunPorts:
    """The adapters a run talks to."""

    provider: ModelProvider
    store: SessionStore
    fs: FileSystem
    context: ContextSource
    clock: Clock
    ids: IdGenerator
    approver: Approver | None = None
    artifacts: ArtifactStore | None = None
    compact_provider: ModelProvider | None = None
    """Writes compaction summaries; None: the run's own provider."""
    token_counter: TokenCounter | None = None
    shell_analyzer: ShellAnalyzer | None = None
    redactor: SecretRedactor | None = None
    """Scrubs secrets out of what is stored and shown (CFG-6); None: nothing is scrubbed."""
    hooks: HookPipeline | None = None
    """The user's hooks (HOOK-1), fired the same way for every run; None: no hooks."""
    mcp: McpHub | None = None
    """The runtime's MCP servers (MCP-1); None: none configured."""
    plan_modes: PlanModes | None = None
    """Which sessions are in plan mode (PLAN-2): the gate then allows only reading and plans."""
    skills: SkillSource | None = None
    """The home's skills (SKILL-1): their catalogue joins the prompt of runs with load_skill."""
    snapshots: WorkTreeSnapshots | None = None
    """Snapshots of the git work tree around commands (RWD-1); None: commands' changes are
    not kept (a rewind lists them as not restorable)."""
    background: BackgroundCommands | None = None
    """The runtime's background commands (BG-1): their ends are told before the next request."""
    telemetry: Telemetry | None = None
    """Traces and metrics of runs (OBS-1): it watches every event a run publishes; None (off:
    the default) costs nothing."""
    mcp_asks: McpAsks | None = None
    """Answers what MCP servers ask while a run works (sampling, elicitation; MCP-4): each
    run with servers enters it; None: nothing is answered for runs."""


@dataclass(frozen=True, slots=True)
class RunPolicies:
    """The configuration that shapes every run of a runtime."""

    permissions: PermissionsConfig = dataclasses.field(default_factory=PermissionsConfig)
    context: ContextConfig = dataclasses.field(default_factory=ContextConfig)
    compact: CompactConfig = dataclasses.field(default_factory=CompactConfig)
    context_window: int = 128_000
    provider_name: str = "openai"
    """Which provider's tokenizer the estimates are calibrated for."""
    max_result_chars: int = RESULT_MAX_CHARS
    cancel_timeout_s: float = 10.0
    max_stop_continuations: int = 3
    """How often `stop` hooks may make one run go on (`hooks.max_stop_continuations`)."""
    mcp: McpToolsConfig = dataclasses.field(default_factory=McpToolsConfig)
    defer_threshold: int = 15
    """Past this many tools in all, MCP tools are deferred behind `tool_search`."""
    tools: ToolsConfig = dataclasses.field(default_factory=ToolsConfig)
    """`tools.disabled` / `tools.overrides` for the tools a run is given here (`compact`,
    `tool_search`): the catalog's were applied when it was built."""


@dataclass(frozen=True, slots=True)
class RunSpec:
    """What one run is made of: its tools, its loop settings and this run's choices."""

    tools: ToolRegistry
    settings: LoopSettings
    tool_choice: ToolChoice | None = None
    """Sent with the run's first model request only."""
    agent: str | None = None
    """The agent definition (preset) the run follows (AGT-1, AGT-3); None: the default."""
    persona: str = ""
    """The definition's prompt section, after the tools in the system prompt."""
    compact: bool = True
    """Whether the run is offered the `compact` tool (not when `tools.disabled` names it or
    the agent definition's ceiling leaves it out)."""

    def for_run(
        self, *, tool_choice: ToolChoice | None = None, limits: RunLimits | None = None
    ) -> RunSpec:
        """This spec with one run's choices: a `tool_choice` (it must name one of the tools)
        and budgets that replace the configured ones they set."""
        if tool_choice is not None and tool_choice.mode == "tool":
            names = self.tools.names()
            if tool_choice.name not in names:
                raise UsageError(
                    f"tool_choice names the tool {tool_choice.name!r}, which this run does not "
                    f"have; use auto, none, required or one of: {', '.join(sorted(names))}"
                )
        if tool_choice is None and limits is None:
            return self
        settings = self.settings
        if limits is not None:
            settings = dataclasses.replace(settings, limits=settings.limits.merged(limits))
        return dataclasses.replace(self, settings=settings, tool_choice=tool_choice)

    def loop_settings(self) -> LoopSettings:
        """The loop's settings, carrying this run's `tool_choice`."""
        if self.settings.tool_choice == self.tool_choice:
            return self.settings
        return dataclasses.replace(self.settings, tool_choice=self.tool_choice)
