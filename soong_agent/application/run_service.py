"""Starting a run: find or create the session, assemble the prompt, launch the loop (LOOP-1)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from soong_agent.application.context_window import ContextWindow
from soong_agent.application.loop import AgentLoop, LoopSettings
from soong_agent.application.recorder import RunRecorder
from soong_agent.application.run_handle import Run
from soong_agent.application.summarizer import Summarizer, tools_text
from soong_agent.application.tool_pipeline import RESULT_MAX_CHARS, ToolPipeline
from soong_agent.application.tools.base import ToolContext, ToolRegistry
from soong_agent.application.tools.compact import compact_tool
from soong_agent.domain.budget import ContextBudget, compute_budget
from soong_agent.domain.config.schema import CompactConfig, ContextConfig, PermissionsConfig
from soong_agent.domain.permissions import SessionGrants
from soong_agent.domain.prompt import assemble_system_prompt
from soong_agent.domain.token_estimate import ProviderCalibration
from soong_agent.ports.approval import Approver
from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.errors import ConfigError, SessionNotFound, UsageError
from soong_agent.ports.filesystem import FileSystem
from soong_agent.ports.messages import Message
from soong_agent.ports.model import ModelProvider, SystemPart, ToolChoice
from soong_agent.ports.prompt import ContextSource
from soong_agent.ports.shell import ShellAnalyzer
from soong_agent.ports.storage import RunInfo, SessionInfo, SessionStore
from soong_agent.ports.system import Clock, IdGenerator, TokenCounter


@dataclass(frozen=True, slots=True)
class RunServiceDeps:
    """The ports a run needs."""

    provider: ModelProvider
    store: SessionStore
    registry: ToolRegistry
    fs: FileSystem
    context: ContextSource
    clock: Clock
    ids: IdGenerator
    approver: Approver | None
    permissions: PermissionsConfig
    settings: LoopSettings
    cancel_timeout_s: float
    artifacts: ArtifactStore | None = None
    max_result_chars: int = RESULT_MAX_CHARS
    context_config: ContextConfig = field(default_factory=ContextConfig)
    compact_config: CompactConfig = field(default_factory=CompactConfig)
    context_window_tokens: int = 128_000
    provider_name: str = "openai"
    token_counter: TokenCounter | None = None
    compact_provider: ModelProvider | None = None
    todos: Callable[[str], str] | None = None
    shell_analyzer: ShellAnalyzer | None = None


class RunService:
    """Starts runs; keeps each session's `allow_for_session` grants in memory."""

    def __init__(self, deps: RunServiceDeps) -> None:
        self._deps = deps
        self._grants: dict[str, SessionGrants] = {}

    async def _history(
        self, session_id: str, from_message: str | None
    ) -> tuple[SessionInfo, list[Message]]:
        d = self._deps
        session = await d.store.get_session(session_id)
        if session is None:
            raise SessionNotFound(session_id)
        if from_message is None:
            return session, await d.store.active_path(session_id)
        path = await d.store.path_to(session_id, from_message)
        if not path:
            raise UsageError(f"session {session_id} has no message {from_message!r}")
        target = path[-1]
        if target.role != "user" or target.kind != "normal":
            raise UsageError(
                f"message {from_message} is a {target.role} message; a branch starts from a "
                'user message (context.allow_branch_from = "user_message")'
            )
        return session, path[:-1]

    def _budget(self, system_tokens: int = 0) -> ContextBudget:
        d = self._deps
        try:
            return compute_budget(
                context_window=d.context_window_tokens,
                context=d.context_config,
                compact=d.compact_config,
                system_tokens=system_tokens,
            )
        except ValueError as exc:
            raise ConfigError(f"context budget of the model: {exc}") from exc

    def _system_prompt(self, registry: ToolRegistry) -> list[SystemPart]:
        d = self._deps
        return assemble_system_prompt(
            tools=registry.specs(),
            instructions=d.context.instructions(),
            environment=d.context.environment(),
        )

    def fitted_budget(self) -> tuple[ContextBudget, int]:
        """The effective budget of the main model for this runtime's system prompt (counted
        exactly), and that prompt's size: what `config check` shows. Raises ConfigError when
        the window cannot work."""
        d = self._deps
        registry = ToolRegistry([*d.registry.tools(), compact_tool(lambda: None)])
        system = self._system_prompt(registry)
        text = "\n\n".join(p.text for p in system) + tools_text(registry.specs())
        counter = d.token_counter
        tokens = counter.count(text) if counter is not None else len(text) // 4
        return self._budget(tokens), tokens

    def _context_window(
        self, system: list[SystemPart], registry: ToolRegistry, session_id: str
    ) -> ContextWindow | None:
        d = self._deps
        budget = self._budget()
        todos = d.todos
        return ContextWindow(
            counter=d.token_counter,
            budget=budget,
            compact=d.compact_config,
            summarizer=Summarizer(
                d.compact_provider or d.provider,
                max_summary_tokens=budget.max_summary,
            ),
            calibration=ProviderCalibration.initial(d.provider_name),
            system_text="\n\n".join(p.text for p in system) + tools_text(registry.specs()),
            instructions="\n\n".join(p.text for p in system if p.label == "instructions"),
            todos=(lambda: todos(session_id)) if todos is not None else (lambda: ""),
            new_id=lambda: d.ids.new_id("msg"),
        )

    async def start(
        self,
        message: str,
        *,
        session_id: str | None = None,
        from_message: str | None = None,
        tool_choice: ToolChoice | None = None,
    ) -> Run:
        """Begin a run in the background and return its handle.

        `session_id` resumes a session; with `from_message` (a user message of it) the run
        starts a new branch: its message replaces that one, and the rest of the old path stays
        in the store as another branch. `tool_choice` applies to the run's first model request.
        """
        if not message.strip():
            raise UsageError("the message is empty; say what the agent should do")
        d = self._deps
        now = d.clock.now()
        history: list[Message] = []
        if from_message is not None and session_id is None:
            raise UsageError("from_message needs the session_id of the session to branch")
        if session_id is None:
            session = SessionInfo(
                id=d.ids.new_id("ses"),
                project_dir=d.fs.root,
                created_at=now,
                updated_at=now,
                title=message.strip().splitlines()[0][:120],
            )
        else:
            session, history = await self._history(session_id, from_message)
        run_info = RunInfo(
            id=d.ids.new_id("run"),
            session_id=session.id,
            started_at=now,
            model=d.settings.model_label,
        )
        run = Run(session_id=session.id, run_id=run_info.id, cancel_timeout_s=d.cancel_timeout_s)
        recorder = RunRecorder(
            run=run,
            store=d.store,
            clock=d.clock,
            ids=d.ids,
            session=session,
            run_info=run_info,
            history=history,
        )
        loops: list[AgentLoop] = []  # the compact tool reaches the loop built below

        def request_compaction() -> object:
            return loops[0].request_compaction()

        registry = ToolRegistry([*d.registry.tools(), compact_tool(request_compaction)])
        pipeline = ToolPipeline(
            registry=registry,
            approver=d.approver,
            policy=d.permissions,
            grants=self._grants.setdefault(session.id, SessionGrants()),
            clock=d.clock,
            artifacts=d.artifacts,
            max_result_chars=d.max_result_chars,
            analyzer=d.shell_analyzer,
        )
        _check_tool_choice(tool_choice, registry)
        system = self._system_prompt(registry)
        context = self._context_window(system, registry, session.id)
        if context is not None:
            context.measure(history)  # a window that cannot work fails here, before any write
        loop = AgentLoop(
            provider=d.provider,
            registry=registry,
            pipeline=pipeline,
            system=system,
            settings=dataclasses.replace(d.settings, tool_choice=tool_choice),
            tool_context=ToolContext(fs=d.fs, session_id=session.id, run_id=run_info.id),
            context=context,
        )
        loops.append(loop)
        run.set_compaction_hook(loop.request_compaction)
        task = asyncio.create_task(
            loop.run(recorder, message, resumed=session_id is not None),
            name=f"soong-run-{run_info.id}",
        )
        run.attach(task)
        return run


def _check_tool_choice(choice: ToolChoice | None, registry: ToolRegistry) -> None:
    if choice is None or choice.mode != "tool":
        return
    names = [spec.name for spec in registry.specs()]
    if choice.name not in names:
        raise UsageError(
            f"tool_choice names the tool {choice.name!r}, which this run does not have; "
            f"use auto, none, required or one of: {', '.join(sorted(names))}"
        )
