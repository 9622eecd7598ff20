"""The one place a run is put together: a run spec in, the loop and its collaborators out.

Root runs go through `RunAssembler.assemble`; so does everything that makes a run of its own
(`run.compact()` reaches the run's own loop through the `CompactionRequests` it builds here),
and so will sub-agent, fork and worker runs: they differ only in the `RunSpec` they pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from soong_agent.application.context.compaction_requests import CompactionRequests
from soong_agent.application.context.instructions import FolderInstructions
from soong_agent.application.context.summarizer import Summarizer, tools_text
from soong_agent.application.context.window import ContextWindow
from soong_agent.application.hooks import HookContext, HookPipeline, RunHooks
from soong_agent.application.mcp.run_link import McpRunLink
from soong_agent.application.mcp.tools import McpTools, RunTools
from soong_agent.application.permissions.gate import PermissionGate
from soong_agent.application.permissions.plan_mode import PlanModes
from soong_agent.application.runs.handle import Run
from soong_agent.application.runs.loop import AgentLoop, LoopSettings
from soong_agent.application.runs.recorder import RunRecorder, redacting_artifacts
from soong_agent.application.tools.base import (
    ChildLauncher,
    TeamSeat,
    Tool,
    ToolContext,
    ToolRegistry,
)
from soong_agent.application.tools.catalog import apply_tool_config
from soong_agent.application.tools.compact import compact_tool
from soong_agent.application.tools.pipeline import RESULT_MAX_CHARS, ToolPipeline
from soong_agent.application.tools.skills import skills_catalogue_text
from soong_agent.domain.budget import ContextBudget, compute_budget
from soong_agent.domain.compaction import approx_tokens
from soong_agent.domain.config.schema import (
    CompactConfig,
    ContextConfig,
    McpToolsConfig,
    PermissionsConfig,
    ToolsConfig,
)
from soong_agent.domain.permissions import SessionGrants
from soong_agent.domain.prompt import assemble_system_prompt, fit_instructions
from soong_agent.domain.run_limits import RunLimits
from soong_agent.domain.skills import DEFAULT_CATALOGUE_TOKENS
from soong_agent.domain.token_estimate import ProviderCalibration
from soong_agent.ports.approval import Approver
from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.errors import ConfigError, UsageError
from soong_agent.ports.filesystem import FileSystem
from soong_agent.ports.mcp import McpHub
from soong_agent.ports.messages import Message
from soong_agent.ports.model import ModelProvider, SystemPart, ToolChoice, ToolSpec
from soong_agent.ports.prompt import ContextSource, InstructionDoc
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.ports.shell import ShellAnalyzer
from soong_agent.ports.skills import SkillSource
from soong_agent.ports.storage import RunInfo, SessionInfo, SessionStore
from soong_agent.ports.system import Clock, IdGenerator, TokenCounter


class ChildLinks(Protocol):
    """What starts the children of a run (`ChildRuns` of the runtime): the launcher its
    spawning tools call (AGT-2, AGT-4)."""

    def link(
        self,
        *,
        assembler: RunAssembler,
        spec: RunSpec,
        recorder: RunRecorder,
        grants: SessionGrants,
        hooks: RunHooks | None,
        memory: str,
        task_session_id: str | None = None,
        depth: int = 0,
    ) -> ChildLauncher:
        """The launcher of one parent run; `depth`: the parent's."""
        ...


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


@dataclass(frozen=True, slots=True)
class AssembledRun:
    """A run ready to start: its handle, its loop and what records it."""

    run: Run
    loop: AgentLoop
    recorder: RunRecorder


class RunAssembler:
    """Turns run specs into loops, the same way for every kind of run."""

    def __init__(
        self,
        ports: RunPorts,
        policies: RunPolicies,
        *,
        todos: Callable[[str], str] | None = None,
        task_board: Callable[[str], str] | None = None,
    ) -> None:
        self.ports = ports
        self.policies = policies
        self._todos = todos
        self._board = task_board
        self._per_policies: tuple[RunPolicies, ContextBudget, ProviderCalibration] | None = None
        """What depends only on the policies (the budget, the calibration a run starts with),
        with the policies it was computed for (they are frozen)."""
        self._mcp_tools: tuple[McpHub, McpToolsConfig, tuple[str, ...], McpTools] | None = None
        """The MCP tools of the last runs, with the hub, configuration and reserved names
        they were made for: runs with the same ones share them."""

    def derived(
        self, ports: RunPorts | None = None, policies: RunPolicies | None = None
    ) -> RunAssembler:
        """This assembler with other ports or policies (a child's model, approver or
        permission mode, AGT-2); what it reads of the session (todos, task board) is shared."""
        return RunAssembler(
            ports or self.ports,
            policies or self.policies,
            todos=self._todos,
            task_board=self._board,
        )

    # --- what a run would send ---------------------------------------------------------------
    def tools_of(self, spec: RunSpec, compaction: CompactionRequests) -> ToolRegistry:
        """The spec's tools plus the run's own `compact` tool (when the spec offers it, with
        `tools.overrides` applied)."""
        if not spec.compact:
            return spec.tools.extended(())
        return spec.tools.extended(self._late([compact_tool(compaction.request)]))

    def _late(self, tools: list[Tool]) -> list[Tool]:
        """`tools.disabled` and `tools.overrides` applied to tools made for one run."""
        config = self.policies.tools
        if not config.disabled and not config.overrides:
            return tools
        return apply_tool_config(tools, config)[0]

    def system_prompt(
        self,
        tools: ToolRegistry | RunTools,
        folders: FolderInstructions | None = None,
        memory: str = "",
        session_id: str | None = None,
        persona: str = "",
    ) -> list[SystemPart]:
        """The system prompt of a run with these tools (PROMPT-1); deferred MCP tools are
        listed by name and one line; `folders`: the folder instruction files the run loaded;
        `memory`: the memories recalled for the run (MEM-4)."""
        registry = tools.registry if isinstance(tools, RunTools) else tools
        skills = self.ports.skills
        catalogue = ""
        if skills is not None and registry.get("load_skill") is not None:
            catalogue = skills_catalogue_text(skills, DEFAULT_CATALOGUE_TOKENS)
        parts = assemble_system_prompt(
            skills=catalogue,
            tools=tools.catalogue() if isinstance(tools, RunTools) else tools.specs(),
            instructions=self.instruction_chain(folders),
            environment=self.ports.context.environment(),
            memory=memory,
        )
        if persona:  # the agent definition's section, in the stable prefix (AGT-1)
            at = next((i for i, p in enumerate(parts) if p.label == "tools"), 0) + 1
            parts.insert(at, SystemPart(label="agent", text=persona))
        board = self._board(session_id) if self._board is not None and session_id else ""
        if board:  # the session's task graphs (TASK-2), before the environment
            parts.insert(len(parts) - 1, SystemPart(label="tasks", text=board, stable=False))
        return parts

    def instruction_chain(self, folders: FolderInstructions | None = None) -> list[InstructionDoc]:
        """Home, project, then the loaded folders' files (PROMPT-2), cut to fit the system
        budget (`context.dynamic_system_budget`, as fitted to the window), least specific
        first."""
        docs = [*self.ports.context.instructions(), *(folders.docs if folders else ())]
        counter = self.ports.token_counter
        count = counter.count if counter is not None else approx_tokens
        try:
            budget = self.budget().system
        except ConfigError:  # the window cannot work at all: the run fails on that, with that
            budget = self.policies.context.dynamic_system_budget  # error, when it measures
        return fit_instructions(docs, budget, count)

    def budget(self, system_tokens: int = 0) -> ContextBudget:
        """The main model's effective context budget; ConfigError when the window cannot work."""
        p = self.policies
        if system_tokens == 0:
            return self._of_policies(p)[1]
        return self._compute_budget(p, system_tokens)

    def _of_policies(
        self, p: RunPolicies
    ) -> tuple[RunPolicies, ContextBudget, ProviderCalibration]:
        """The budget and the starting calibration of runs under `p`, computed once per
        policies (ConfigError, never remembered, when the window cannot work)."""
        fixed = self._per_policies
        if fixed is None or fixed[0] is not p:
            budget = self._compute_budget(p, 0)
            fixed = self._per_policies = (p, budget, ProviderCalibration.initial(p.provider_name))
        return fixed

    @staticmethod
    def _compute_budget(p: RunPolicies, system_tokens: int) -> ContextBudget:
        try:
            return compute_budget(
                context_window=p.context_window,
                context=p.context,
                compact=p.compact,
                system_tokens=system_tokens,
            )
        except ValueError as exc:
            raise ConfigError(f"context budget of the model: {exc}") from exc

    def fitted_budget(self, spec: RunSpec) -> tuple[ContextBudget, int]:
        """The budget for the system prompt of a run of `spec`, counted exactly, and that
        prompt's size (what `config check` shows)."""
        tools = self.tools_of(spec, CompactionRequests())
        run_tools = RunTools(
            tools, None, defer_threshold=self.policies.defer_threshold, adjust=self._late
        )
        text = _system_text(self.system_prompt(run_tools, persona=spec.persona), run_tools)
        counter = self.ports.token_counter
        tokens = counter.count(text) if counter is not None else len(text) // 4
        return self.budget(tokens), tokens

    # --- a run ---------------------------------------------------------------------------------
    def assemble(
        self,
        spec: RunSpec,
        *,
        session: SessionInfo,
        run_info: RunInfo,
        history: list[Message],
        grants: SessionGrants,
        mcp_loaded: Iterable[str] = (),
        earlier: Sequence[Message] = (),
        memory: str = "",
        children: ChildLinks | None = None,
        task_session_id: str | None = None,
        team: Callable[[RunRecorder, RunHooks | None], TeamSeat] | None = None,
        actor: str | None = None,
        depth: int = 0,
        agent_id: str = "root",
    ) -> AssembledRun:
        """The loop of one run and everything it works with; nothing is written yet.

        `mcp_loaded`: deferred MCP tools the session loaded before (`mcp_tools.loaded_in`).
        `earlier`: the session's stored messages (every branch), whose tool calls say which
        folders' instruction files a resumed session had loaded (PROMPT-2).
        `memory`: the text of the memories recalled for this run (`MemoryRecall`, MEM-4).
        `children`: the runtime's child agents, when this run may start some (AGT-2; None for
        children themselves). `task_session_id`: whose task graphs the task tools and the board
        show (an orchestrator's, for its workers; None: the run's own session). `team` gives
        the run its seat in a team (its mails arrive at each turn); `actor`: who it acts as in
        task graphs (a teammate's name; None: the run). `depth` and `agent_id` say who the
        run's hooks fire for (0 and ``root`` for a root run; a child's definition id, one
        deeper than its parent).
        Raises ConfigError when the model's window cannot hold this run's system prompt.
        """
        ports, policies = self.ports, self.policies
        compaction = CompactionRequests()
        tools = self.tools_of(spec, compaction)
        run_tools, link = self._mcp(tools, mcp_loaded)
        folders = FolderInstructions(ports.context, root=ports.fs.root)
        folders.replay(earlier)
        board_of = task_session_id or session.id
        system = self.system_prompt(run_tools, folders, memory, board_of, spec.persona)
        context = self._context_window(system, run_tools, session.id)
        context.measure(history)  # a window that cannot work fails here, before any write
        run = Run(
            session_id=session.id,
            run_id=run_info.id,
            cancel_timeout_s=policies.cancel_timeout_s,
            compaction=compaction,
        )
        hooks = self._hooks(spec, HookContext(session.id, run_info.id, agent_id, depth))
        pipeline = ToolPipeline(
            registry=tools,
            gate=PermissionGate(
                approver=ports.approver,
                policy=policies.permissions,
                grants=grants,
                analyzer=ports.shell_analyzer,
                hooks=hooks,
                plan_mode=ports.plan_modes,
            ),
            clock=ports.clock,
            artifacts=redacting_artifacts(ports.artifacts, ports.redactor),
            max_result_chars=policies.max_result_chars,
            hooks=hooks,
        )
        recorder = RunRecorder(
            run=run,
            store=ports.store,
            clock=ports.clock,
            ids=ports.ids,
            session=session,
            run_info=run_info,
            history=history,
            redactor=ports.redactor,
        )
        folders.warn_skipped(recorder)  # instruction files left out (PROMPT-2): one warning each
        launcher = (
            children.link(
                assembler=self,
                spec=spec,
                recorder=recorder,
                grants=grants,
                hooks=hooks,
                memory=memory,
                task_session_id=task_session_id,
                depth=depth,
            )
            if children is not None
            else None
        )
        seat = team(recorder, hooks) if team is not None else None
        loop = AgentLoop(
            provider=ports.provider,
            registry=tools,
            pipeline=pipeline,
            system=system,
            settings=(
                spec.settings
                if spec.settings.tool_choice == spec.tool_choice
                else dataclasses.replace(spec.settings, tool_choice=spec.tool_choice)
            ),
            tool_context=ToolContext(
                fs=ports.fs,
                session_id=session.id,
                run_id=run_info.id,
                children=launcher,
                task_session_id=task_session_id,
                actor=actor,
                team=seat,
            ),
            context=context,
            compaction=compaction,
            clock=ports.clock,
            hooks=hooks,
            mcp=link,
            run_tools=run_tools,
            system_of=lambda: self.system_prompt(
                run_tools, folders, memory, board_of, spec.persona
            ),
            instructions=folders,
            inbox=seat.inbox if seat is not None else None,
        )
        return AssembledRun(run=run, loop=loop, recorder=recorder)

    def _mcp(
        self, tools: ToolRegistry, loaded: Iterable[str]
    ) -> tuple[RunTools, McpRunLink | None]:
        """The run's tool set (deferral of optional tools past `tools.defer_threshold`), over
        the MCP hub when there is one, and its link to the hub (None without MCP servers)."""
        hub, policies = self.ports.mcp, self.policies
        if hub is None:
            return RunTools(
                tools,
                None,
                defer_threshold=policies.defer_threshold,
                loaded=loaded,
                adjust=self._late,
            ), None
        reserved = tuple(tools.names())
        held = self._mcp_tools
        if held is not None and held[0] is hub and held[1] is policies.mcp and held[2] == reserved:
            mcp = held[3]  # its tools are rebuilt only when the hub's set changed
        else:
            mcp = McpTools(hub, policies.mcp, reserved=reserved)
            self._mcp_tools = (hub, policies.mcp, reserved, mcp)
        run_tools = RunTools(
            tools, mcp, defer_threshold=policies.defer_threshold, loaded=loaded, adjust=self._late
        )
        link = McpRunLink(hub, run_tools, startup_timeout_s=policies.mcp.startup_timeout_ms / 1000)
        return run_tools, link

    def _hooks(self, spec: RunSpec, who: HookContext) -> RunHooks | None:
        """The run's hooks over the runtime's one pipeline (None when no hook is registered,
        so a run without hooks pays nothing for them)."""
        pipeline = self.ports.hooks
        if pipeline is None or not pipeline:
            return None
        return RunHooks(
            pipeline,
            who,
            model=spec.settings.model_label,
            max_stop_continuations=self.policies.max_stop_continuations,
        )

    def _context_window(
        self, system: list[SystemPart], tools: RunTools, session_id: str
    ) -> ContextWindow:
        ports, compact = self.ports, self.policies.compact
        _policies, budget, calibration = self._of_policies(self.policies)
        todos = self._todos
        return ContextWindow(
            counter=ports.token_counter,
            budget=budget,
            compact=compact,
            summarizer=Summarizer(
                ports.compact_provider or ports.provider, max_summary_tokens=budget.max_summary
            ),
            calibration=calibration,
            system_text=_system_text(system, tools),
            instructions="\n\n".join([p.text for p in system if p.label == "instructions"]),
            todos=(lambda: todos(session_id)) if todos is not None else (lambda: ""),
            new_id=lambda: ports.ids.new_id("msg"),
        )


_SYSTEM_TEXTS_MAX = 16
_SYSTEM_TEXTS: dict[
    tuple[tuple[int, ...], int], tuple[tuple[SystemPart, ...], list[ToolSpec], str]
] = {}
"""`_system_text` by the ids of the parts and of the request's spec list (kept alive with the
text, so the ids stay theirs; both are frozen or never changed): runs of one runtime share
their stable parts and, without memories or tasks, the whole prompt."""


def _system_text(system: list[SystemPart], tools: RunTools) -> str:
    """What the model is sent before the messages: the system parts and the tool schemas the
    request carries (deferred tools only by their line in the system prompt)."""
    specs = tools.request_specs()
    key = (tuple(map(id, system)), id(specs))
    hit = _SYSTEM_TEXTS.get(key)
    if hit is not None:
        return hit[2]
    text = "\n\n".join([p.text for p in system]) + tools_text(specs)
    if len(_SYSTEM_TEXTS) >= _SYSTEM_TEXTS_MAX:
        _SYSTEM_TEXTS.clear()
    _SYSTEM_TEXTS[key] = (tuple(system), specs, text)
    return text
