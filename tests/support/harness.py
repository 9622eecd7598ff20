"""Builds a RunService from fakes of every port, for fast loop tests."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from soong_agent.application.hooks import HookPipeline
from soong_agent.application.permissions.plan_mode import PlanModes
from soong_agent.application.runs.assembler import RunAssembler, RunPolicies, RunPorts, RunSpec
from soong_agent.application.runs.loop import LoopSettings
from soong_agent.application.runs.service import RunService
from soong_agent.application.tools.base import Tool, ToolRegistry
from soong_agent.application.tools.files import file_tools
from soong_agent.domain.config.schema import (
    CompactConfig,
    ContextConfig,
    McpToolsConfig,
    PermissionsConfig,
    PriceConfig,
)
from soong_agent.domain.run_limits import RunLimits
from soong_agent.domain.stuck import StuckSettings
from soong_agent.ports.approval import Approver
from soong_agent.ports.mcp import McpHub
from soong_agent.ports.prompt import ContextSource
from soong_agent.testing import (
    FixedClock,
    InMemoryArtifactStore,
    InMemoryFileSystem,
    InMemorySessionStore,
    RecordingApprover,
    ScriptedModel,
    SequentialIds,
    StaticContextSource,
)


@dataclass
class Harness:
    model: ScriptedModel
    store: InMemorySessionStore = field(default_factory=InMemorySessionStore)
    fs: InMemoryFileSystem = field(default_factory=InMemoryFileSystem)
    approver: Approver | None = field(default_factory=RecordingApprover)
    permissions: PermissionsConfig = field(default_factory=PermissionsConfig)
    extra_tools: list[Tool] = field(default_factory=list)
    max_turns: int = 20
    max_continuations: int = 2
    settings_price: PriceConfig | None = None
    artifacts: InMemoryArtifactStore | None = None
    max_result_chars: int = 30_000
    context_window_tokens: int = 128_000
    context_config: ContextConfig = field(default_factory=ContextConfig)
    compact_config: CompactConfig = field(default_factory=CompactConfig)
    clock: FixedClock = field(default_factory=FixedClock)
    stuck: StuckSettings = field(default_factory=StuckSettings)
    limits: RunLimits = field(default_factory=RunLimits)
    ids: SequentialIds = field(default_factory=SequentialIds)
    hooks: HookPipeline | None = None
    mcp: McpHub | None = None
    plan_modes: PlanModes | None = None
    mcp_config: McpToolsConfig = field(default_factory=McpToolsConfig)
    defer_threshold: int = 15
    max_stop_continuations: int = 3
    context: ContextSource = field(default_factory=StaticContextSource)
    _service: RunService | None = None

    @property
    def service(self) -> RunService:
        if self._service is None:
            registry = ToolRegistry([*file_tools(), *self.extra_tools])
            assembler = RunAssembler(
                RunPorts(
                    provider=self.model,
                    store=self.store,
                    fs=self.fs,
                    context=self.context,
                    clock=self.clock,
                    ids=self.ids,
                    approver=self.approver,
                    artifacts=self.artifacts,
                    hooks=self.hooks,
                    mcp=self.mcp,
                    plan_modes=self.plan_modes,
                ),
                RunPolicies(
                    permissions=self.permissions,
                    context=self.context_config,
                    compact=self.compact_config,
                    context_window=self.context_window_tokens,
                    max_result_chars=self.max_result_chars,
                    cancel_timeout_s=2.0,
                    max_stop_continuations=self.max_stop_continuations,
                    mcp=self.mcp_config,
                    defer_threshold=self.defer_threshold,
                ),
            )
            settings = LoopSettings(
                model_label="scripted",
                max_turns=self.max_turns,
                max_continuations=self.max_continuations,
                price=self.settings_price,
                stuck=self.stuck,
                limits=self.limits,
            )
            self._service = RunService(assembler, RunSpec(tools=registry, settings=settings))
        return self._service


def assert_every_call_answered(requests: Iterable[object]) -> None:
    """Each request's history gives every tool call exactly one result right after it."""
    for request in requests:
        messages = request.messages  # type: ignore[attr-defined]
        for index, message in enumerate(messages):
            calls = [c.id for c in message.tool_calls]
            if not calls:
                continue
            assert index + 1 < len(messages), "a tool call is the last message of a request"
            results = [r.call_id for r in messages[index + 1].tool_results]
            assert results == calls, f"calls {calls} answered by {results}"
