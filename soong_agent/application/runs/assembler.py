"""The one place a run is put together: a run spec in, the loop and its collaborators out.

Root runs go through `RunAssembler.assemble`; so does everything that makes a run of its own
(`run.compact()` reaches the run's own loop through the `CompactionRequests` it builds here),
and so will sub-agent, fork and worker runs: they differ only in the `RunSpec` they pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from soong_agent.application.checkpoints.keeper import FILES_ONLY, TurnCheckpoints
from soong_agent.application.context.compaction_requests import CompactionRequests
from soong_agent.application.context.instructions import FolderInstructions
from soong_agent.application.context.window import ContextWindow
from soong_agent.application.hooks import HookContext, RunHooks
from soong_agent.application.mcp.tools import RunTools
from soong_agent.application.permissions.gate import PermissionGate
from soong_agent.application.runs.budget import PolicyBudget, budget_of
from soong_agent.application.runs.handle import Run
from soong_agent.application.runs.loop import AgentLoop
from soong_agent.application.runs.prompt import (
    RunPrompt,
    ToolSets,
    build_system_prompt,
    context_window,
    instruction_chain,
    system_text,
)
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.runs.scrubbing import redacting_artifacts
from soong_agent.application.runs.spec import RunPolicies, RunPorts, RunSpec
from soong_agent.application.tools.base import (
    ChildLauncher,
    TeamSeat,
    Tool,
    ToolContext,
    ToolRegistry,
)
from soong_agent.application.tools.catalog import apply_tool_config
from soong_agent.application.tools.compact import compact_tool
from soong_agent.application.tools.pipeline import ToolPipeline
from soong_agent.domain.budget import ContextBudget
from soong_agent.domain.permissions import SessionGrants
from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.errors import ConfigError
from soong_agent.ports.messages import Message
from soong_agent.ports.model import SystemPart
from soong_agent.ports.prompt import InstructionDoc
from soong_agent.ports.storage import RunInfo, SessionInfo

__all__ = ["AssembledRun", "ChildLinks", "RunAssembler", "RunPolicies", "RunPorts", "RunSpec"]


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
        self._per_policies = PolicyBudget()
        self._tool_sets = ToolSets()

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
        """The system prompt of a run with these tools (PROMPT-1, `prompt.build_system_prompt`);
        `folders`: the folder instruction files the run loaded; `memory`: the memories
        recalled for the run (MEM-4); `session_id`: whose task board it shows."""
        ports = self.ports
        return build_system_prompt(
            tools,
            skills=ports.skills,
            source=ports.context,
            instructions=self.instruction_chain(folders),
            memory=memory,
            persona=persona,
            board=self._board(session_id) if self._board is not None and session_id else "",
        )

    def instruction_chain(self, folders: FolderInstructions | None = None) -> list[InstructionDoc]:
        """Home, project, then the loaded folders' files (PROMPT-2), cut to fit the system
        budget (`context.dynamic_system_budget`, as fitted to the window), least specific
        first."""
        try:
            budget = self.budget().system
        except ConfigError:  # the window cannot work at all: the run fails on that, with that
            budget = self.policies.context.dynamic_system_budget  # error, when it measures
        ports = self.ports
        return instruction_chain(ports.context, folders, budget=budget, counter=ports.token_counter)

    def budget(self, system_tokens: int = 0) -> ContextBudget:
        """The main model's effective context budget; ConfigError when the window cannot work."""
        p = self.policies
        if system_tokens == 0:
            return self._per_policies.of(p)[0]
        return budget_of(p, system_tokens)

    def fitted_budget(self, spec: RunSpec) -> tuple[ContextBudget, int]:
        """The budget for the system prompt of a run of `spec`, counted exactly, and that
        prompt's size (what `config check` shows)."""
        tools = self.tools_of(spec, CompactionRequests())
        run_tools = RunTools(
            tools, None, defer_threshold=self.policies.defer_threshold, adjust=self._late
        )
        text = system_text(self.system_prompt(run_tools, persona=spec.persona), run_tools)
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
        ports = self.ports
        board_of = task_session_id or session.id
        said = self._prompt(spec, session.id, board_of, mcp_loaded, earlier, memory)
        said.context.measure(history)  # a window that cannot work fails here, before any write
        run = Run(
            session_id=session.id,
            run_id=run_info.id,
            cancel_timeout_s=self.policies.cancel_timeout_s,
            compaction=said.compaction,
        )
        hooks = self._hooks(spec, HookContext(session.id, run_info.id, agent_id, depth))
        pipeline = self._pipeline(said.tools, grants, hooks)
        recorder = self._recorder(run, session, run_info, history)
        said.folders.warn_skipped(recorder)  # instruction files left out: one warning each
        launcher = None
        if children is not None:
            launcher = children.link(
                assembler=self,
                spec=spec,
                recorder=recorder,
                grants=grants,
                hooks=hooks,
                memory=memory,
                task_session_id=task_session_id,
                depth=depth,
            )
        seat = team(recorder, hooks) if team is not None else None
        tool_context = ToolContext(
            fs=ports.fs,
            session_id=session.id,
            run_id=run_info.id,
            children=launcher,
            task_session_id=task_session_id,
            actor=actor,
            team=seat,
        )
        loop = self._loop(spec, said, pipeline, hooks, tool_context, seat)
        if said.link is not None and ports.mcp_asks is not None:  # MCP-4
            said.link.asking = ports.mcp_asks.for_run(
                recorder, ports, self.policies.permissions, grants, spec.settings, loop.count_usage
            )
        return AssembledRun(run=run, loop=loop, recorder=recorder)

    def _loop(
        self,
        spec: RunSpec,
        said: RunPrompt,
        pipeline: ToolPipeline,
        hooks: RunHooks | None,
        tool_context: ToolContext,
        seat: TeamSeat | None,
    ) -> AgentLoop:
        return AgentLoop(
            provider=self.ports.provider,
            registry=said.tools,
            pipeline=pipeline,
            system=said.system,
            settings=spec.loop_settings(),
            tool_context=tool_context,
            context=said.context,
            compaction=said.compaction,
            clock=self.ports.clock,
            hooks=hooks,
            mcp=said.link,
            run_tools=said.run_tools,
            system_of=said.system_of,
            instructions=said.folders,
            inbox=seat.inbox if seat is not None else None,
            notices=self.ports.background.notices if self.ports.background is not None else None,
        )

    def _prompt(
        self,
        spec: RunSpec,
        session_id: str,
        board_of: str,
        mcp_loaded: Iterable[str],
        earlier: Sequence[Message],
        memory: str,
    ) -> RunPrompt:
        """What the run sends before its messages: its tools (over the MCP hub), the folder
        instruction files it had loaded, its system prompt and the context window counting
        them."""
        compaction = CompactionRequests()
        tools = self.tools_of(spec, compaction)
        run_tools, link = self._tool_sets.of(
            tools, mcp_loaded, hub=self.ports.mcp, policies=self.policies, adjust=self._late
        )
        folders = FolderInstructions(self.ports.context, root=self.ports.fs.root)
        folders.replay(earlier)

        def system_of() -> list[SystemPart]:
            return self.system_prompt(run_tools, folders, memory, board_of, spec.persona)

        system = system_of()
        return RunPrompt(
            compaction=compaction,
            tools=tools,
            run_tools=run_tools,
            link=link,
            folders=folders,
            system=system,
            system_of=system_of,
            context=self._context_window(system, run_tools, session_id),
        )

    def _pipeline(
        self, tools: ToolRegistry, grants: SessionGrants, hooks: RunHooks | None
    ) -> ToolPipeline:
        """How the run's tool calls are checked (the permission gate) and run."""
        ports, policies = self.ports, self.policies
        artifacts = redacting_artifacts(ports.artifacts, ports.redactor)
        return ToolPipeline(
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
            artifacts=artifacts,
            max_result_chars=policies.max_result_chars,
            hooks=hooks,
            checkpoints=self._checkpoints(artifacts),
        )

    def _checkpoints(self, artifacts: ArtifactStore | None) -> TurnCheckpoints | None:
        """What each turn changes, kept with the session (RWD-1, `tools.checkpoints`)."""
        mode = self.policies.tools.checkpoints
        if artifacts is None or mode == "off":
            return None
        if mode == "files":
            return TurnCheckpoints(artifacts=artifacts, snapshots=None, no_snapshots=FILES_ONLY)
        return TurnCheckpoints(artifacts=artifacts, snapshots=self.ports.snapshots)

    def _recorder(
        self, run: Run, session: SessionInfo, run_info: RunInfo, history: list[Message]
    ) -> RunRecorder:
        ports = self.ports
        return RunRecorder(
            run=run,
            store=ports.store,
            clock=ports.clock,
            ids=ports.ids,
            session=session,
            run_info=run_info,
            history=history,
            redactor=ports.redactor,
            telemetry=ports.telemetry,
        )

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
        budget, calibration = self._per_policies.of(self.policies)
        todos = self._todos
        return context_window(
            self.ports,
            self.policies.compact,
            budget,
            calibration,
            system=system,
            tools=tools,
            todos=(lambda: todos(session_id)) if todos is not None else (lambda: ""),
        )
