"""Starting a run: find or create the session, assemble the prompt, launch the loop (LOOP-1)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from soong_agent.application.loop import AgentLoop, LoopSettings
from soong_agent.application.recorder import RunRecorder
from soong_agent.application.run_handle import Run
from soong_agent.application.tool_pipeline import RESULT_MAX_CHARS, ToolPipeline
from soong_agent.application.tools.base import ToolContext, ToolRegistry
from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.domain.permissions import SessionGrants
from soong_agent.domain.prompt import assemble_system_prompt
from soong_agent.ports.approval import Approver
from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.errors import SessionNotFound, UsageError
from soong_agent.ports.filesystem import FileSystem
from soong_agent.ports.messages import Message
from soong_agent.ports.model import ModelProvider
from soong_agent.ports.prompt import ContextSource
from soong_agent.ports.storage import RunInfo, SessionInfo, SessionStore
from soong_agent.ports.system import Clock, IdGenerator


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


class RunService:
    """Starts runs; keeps each session's `allow_for_session` grants in memory."""

    def __init__(self, deps: RunServiceDeps) -> None:
        self._deps = deps
        self._grants: dict[str, SessionGrants] = {}

    async def start(self, message: str, *, session_id: str | None = None) -> Run:
        """Begin a run in the background and return its handle."""
        if not message.strip():
            raise UsageError("the message is empty; say what the agent should do")
        d = self._deps
        now = d.clock.now()
        history: list[Message] = []
        if session_id is None:
            session = SessionInfo(
                id=d.ids.new_id("ses"),
                project_dir=d.fs.root,
                created_at=now,
                updated_at=now,
                title=message.strip().splitlines()[0][:120],
            )
        else:
            found = await d.store.get_session(session_id)
            if found is None:
                raise SessionNotFound(session_id)
            session = found
            history = await d.store.active_path(session_id)
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
        pipeline = ToolPipeline(
            registry=d.registry,
            approver=d.approver,
            policy=d.permissions,
            grants=self._grants.setdefault(session.id, SessionGrants()),
            clock=d.clock,
            artifacts=d.artifacts,
            max_result_chars=d.max_result_chars,
        )
        system = assemble_system_prompt(
            tools=d.registry.specs(),
            instructions=d.context.instructions(),
            environment=d.context.environment(),
        )
        loop = AgentLoop(
            provider=d.provider,
            registry=d.registry,
            pipeline=pipeline,
            system=system,
            settings=d.settings,
            tool_context=ToolContext(fs=d.fs, session_id=session.id, run_id=run_info.id),
        )
        task = asyncio.create_task(
            loop.run(recorder, message, resumed=session_id is not None),
            name=f"soong-run-{run_info.id}",
        )
        run.attach(task)
        return run
