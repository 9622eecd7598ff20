"""Starting a run: find or create the session, have the run assembled, launch its loop (LOOP-1)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from soong_agent.application.children.launcher import ORCHESTRATOR_MARK, ChildRuns
from soong_agent.application.hooks import RunHooks
from soong_agent.application.mcp.tools import loaded_in
from soong_agent.application.memory.recall import MemoryRecall
from soong_agent.application.runs.assembler import RunAssembler, RunSpec
from soong_agent.application.runs.handle import Run
from soong_agent.application.runs.lineage import Lineage
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.runs.starter import RunStarter
from soong_agent.domain.budget import ContextBudget
from soong_agent.domain.permissions import SessionGrants
from soong_agent.domain.run_limits import RunLimits
from soong_agent.ports.errors import SessionNotFound, UsageError
from soong_agent.ports.events import (
    AgentSwitched,
    ErrorEvent,
    MemoryRecalled,
    RunStarted,
)
from soong_agent.ports.messages import Message
from soong_agent.ports.model import ToolChoice
from soong_agent.ports.storage import SessionInfo

if TYPE_CHECKING:  # imported when first used: not on the way to a run's first request
    from soong_agent.application.memory.consolidation import MemoryConsolidation
    from soong_agent.application.memory.extraction import MemoryExtraction
    from soong_agent.application.teams.seat import Seat
    from soong_agent.application.teams.service import TeamService


log = logging.getLogger(__name__)


class RunService:
    """Starts the root runs of a runtime; keeps each session's `allow_for_session` grants in
    memory (PERM-1: never on disk).

    With `recall`, each run's prompt holds the memories recalled for its message (MEM-4; a
    `memory_recalled` event says which and how). With `extraction`, the runtime's extraction
    job hears of every run's start and end (MEM-3), and its notices for a session (memories it
    refused, its failures) are recorded as events of that session's next run.
    """

    def __init__(
        self,
        assembler: RunAssembler,
        root: RunSpec,
        *,
        recall: MemoryRecall | None = None,
        extraction: MemoryExtraction | Callable[[], MemoryExtraction | None] | None = None,
        presets: Callable[[str], tuple[RunAssembler, RunSpec]] | None = None,
        consolidation: MemoryConsolidation | Callable[[], MemoryConsolidation | None] | None = None,
        children: ChildRuns | None = None,
        orchestrator: Callable[[RunSpec], RunSpec] | None = None,
        teams: Callable[[], TeamService] | None = None,
        starter: RunStarter | None = None,
    ) -> None:
        self._assembler = assembler
        self.starter = starter or RunStarter(clock=assembler.ports.clock, ids=assembler.ports.ids)
        self._root = root
        self._presets = presets
        self.children = children
        self._orchestrator = orchestrator
        self._teams = teams
        self._team_service: TeamService | None = None
        self._consolidation: MemoryConsolidation | None = None
        self._consolidation_of: Callable[[], MemoryConsolidation | None] | None = None
        if callable(consolidation):  # made once the first run is under way
            self._consolidation_of = consolidation
        else:
            self._consolidation = consolidation
        self._background: set[asyncio.Task[object]] = set()
        self.recall = recall
        self._extraction: MemoryExtraction | None = None
        self._extraction_of: Callable[[], MemoryExtraction | None] | None = None
        if callable(extraction):  # made at the end of the first run (see `extraction`)
            self._extraction_of = extraction
        else:
            self._extraction = extraction
        self._grants: dict[str, SessionGrants] = {}
        self._active: dict[str, int] = {}  # runs in progress per session

    def _setup_for(self, agent: str | None) -> tuple[RunAssembler, RunSpec]:
        """The root's assembler and spec, or those of the agent definition `agent`: its tools
        within its ceiling, its prompt, `max_turns`, `model_profile`, `permission_mode` and
        `skills`, exactly as a child of that definition gets them (AGT-1, AGT-3). UsageError
        when there is no such definition, or no presets in this runtime."""
        if agent is None:
            return self._assembler, self._root
        if self._presets is None:
            raise UsageError("agent presets are not available in this runtime")
        return self._presets(agent)

    @property
    def extraction(self) -> MemoryExtraction | None:
        """The runtime's memory extraction job (MEM-3), made when first needed: at the end of
        the first run (a run's start has nothing to hear from a job that never ran)."""
        if self._extraction is None and self._extraction_of is not None:
            self._extraction = self._extraction_of()
            self._extraction_of = None
        return self._extraction

    @extraction.setter
    def extraction(self, job: MemoryExtraction | None) -> None:
        self._extraction, self._extraction_of = job, None

    @property
    def consolidation(self) -> MemoryConsolidation | None:
        """The runtime's memory consolidation pass, made when first needed: once the first
        run is under way (its first request does not wait for the module). A job that cannot
        be made is logged once; the runtime goes on without it."""
        make = self._consolidation_of
        if self._consolidation is None and make is not None:
            self._consolidation_of = None
            try:
                self._consolidation = make()
            except Exception:  # a background job must not take the runtime down
                log.exception("memory consolidation could not be set up; it is off")
        return self._consolidation

    @property
    def teams(self) -> TeamService | None:
        """The runtime's teams, made when an orchestrator run first needs them."""
        if self._team_service is None and self._teams is not None:
            self._team_service = self._teams()
        return self._team_service

    def team_of(self, session_id: str) -> TeamService | None:
        """The teams, when the session has teammates in this process (else None, and nothing
        is made)."""
        service = self._team_service
        return service if service is not None and service.has_members(session_id) else None

    def fitted_budget(self) -> tuple[ContextBudget, int]:
        """The main model's budget for a root run's system prompt, and that prompt's size."""
        return self._assembler.fitted_budget(self._root)

    async def _history(
        self, session_id: str, from_message: str | None
    ) -> tuple[SessionInfo, list[Message]]:
        store = self._assembler.ports.store
        session = await store.get_session(session_id)
        if session is None:
            raise SessionNotFound(session_id)
        if from_message is None:
            return session, await store.active_path(session_id)
        path = await store.path_to(session_id, from_message)
        if not path:
            raise UsageError(f"session {session_id} has no message {from_message!r}")
        target = path[-1]
        if target.role != "user" or target.kind != "normal":
            what = target.role if target.kind == "normal" else f"{target.kind} ({target.role})"
            article = "an" if what[0] in "aeiou" else "a"
            raise UsageError(
                f"message {from_message} is {article} {what} message, not one the user wrote; a "
                'branch starts from a user message (context.allow_branch_from = "user_message")'
            )
        return session, path[:-1]

    async def start(
        self,
        message: str,
        *,
        session_id: str | None = None,
        from_message: str | None = None,
        tool_choice: ToolChoice | None = None,
        limits: RunLimits | None = None,
        plan_mode: bool = False,
        agent: str | None = None,
        orchestrator: bool = False,
    ) -> Run:
        """Begin a run in the background and return its handle.

        `session_id` resumes a session; with `from_message` (a user message of it) the run
        starts a new branch: its message replaces that one, and the rest of the old path stays
        in the store as another branch. `tool_choice` applies to the run's first model request;
        `limits` replace the configured budgets they set, for this run. `plan_mode` starts it in
        plan mode (PLAN-2); a resumed session is in the mode its last run left it in.
        `orchestrator` gives the run `dispatch_worker` over the declared worker pools (AGT-4;
        a UsageError without a usable pool); a session that dispatched work resumes so.
        """
        if not message.strip():
            raise UsageError("the message is empty; say what the agent should do")
        if from_message is not None and session_id is None:
            raise UsageError("from_message needs the session_id of the session to branch")
        ports = self._assembler.ports
        history: list[Message] = []
        session: SessionInfo | None = None
        switched: tuple[str | None, str] | None = None
        if session_id is not None:
            session, history = await self._history(session_id, from_message)
            _same_project(session, ports.fs.root)
            if agent is None:
                agent = session.agent  # a session keeps its preset (AGT-3)
            elif agent != session.agent:
                if history:
                    raise UsageError(
                        f"session {session_id} runs the agent {session.agent or 'default'!r}; "
                        "the agent can be switched only while a session has no messages"
                    )
                switched = (session.agent, agent)
                session = dataclasses.replace(session, agent=agent)
        if session_id is not None and not orchestrator and self.children and self.children.pools:
            orchestrator = await ports.store.get_mark(session_id, ORCHESTRATOR_MARK) is not None
        assembler, spec = self._setup_for(agent)
        if orchestrator:
            if self._orchestrator is None or self.children is None:
                raise UsageError("orchestrator mode is not available in this runtime")
            spec = self._orchestrator(spec)
        spec = spec.for_run(tool_choice=tool_choice, limits=limits)
        if spec.settings.limits.max_cost_usd is not None and spec.settings.price is None:
            raise UsageError(
                "a cost budget (max_cost_usd, --max-cost) needs the model's prices: set "
                "[model.price] in config.toml"
            )
        starter = self.starter
        if session is None:
            session = starter.new_session(
                project_dir=ports.fs.root,
                title=message.strip().splitlines()[0],
                agent=spec.agent,
            )
        grants = self._grants.setdefault(session.id, SessionGrants())
        # every branch: what was loaded before (deferred MCP tools, folder instructions)
        earlier = await ports.store.all_messages(session.id) if session_id is not None else []
        recalled = await self.recall.recall(message) if self.recall is not None else None
        prepared = await starter.prepare(
            assembler,
            spec,
            Lineage(agent=agent),
            session=session,
            message=message,
            history=history,
            resumed=session_id is not None,
            grants=grants,
            plan_mode=plan_mode,
            mode_source=self._mode_source(agent, assembler),
            earlier=earlier,
            memory=recalled.text if recalled is not None else "",
            mcp_loaded=loaded_in(earlier),  # tools a tool_search loaded stay loaded
            children=self.children,
            team=self._lead_seat(session.id) if orchestrator else None,
        )
        recorder = prepared.recorder
        teams = self.teams if orchestrator else None
        if teams is not None:
            teams.set_lead_mode(session.id, prepared.bound.mode)  # it binds the teammates
            if session_id is not None:
                await teams.restore(session.id, session.project_dir)  # they come back
        if session_id is not None and switched is None and spec.settings.agent_hash:
            edited = await self._definition_changed(session_id, spec)
            if edited is not None:
                recorder.event(ErrorEvent, kind="agent_changed", message=edited, fatal=False)
        if switched is not None:  # the switch of a blank session's agent is logged (AGT-3)
            recorder.event(AgentSwitched, previous=switched[0], agent=switched[1])
        if recalled is not None:
            recorder.event(MemoryRecalled, **recalled.event_fields())
        if self._extraction is not None:  # (not made yet: no notice, no idle wait to end)
            for notice in self._extraction.run_started(session.id):
                recorder.event(notice.event, **notice.fields)
        task = starter.launch(prepared)
        self._active[session.id] = self._active.get(session.id, 0) + 1
        task.add_done_callback(lambda _: self._run_ended(session.id))
        if self._consolidation_of is not None:  # the first run: the job is made (its module
            # imported) once the run is under way, while its first commit is being written
            asyncio.get_running_loop().call_soon(self._consolidate_when_due)
        else:
            self._consolidate_when_due()
        if self._extraction is not None or self._extraction_of is not None:
            # before a waiter resumes: the job starts first
            fresh = session_id is None  # every message of a new session is in its history

            def ended(_: object) -> None:
                extraction = self.extraction
                if extraction is not None:
                    whole = fresh and not recorder.rewritten
                    extraction.run_ended(session.id, recorder.history if whole else None)

            task.add_done_callback(ended)
        return prepared.run

    async def _definition_changed(self, session_id: str, spec: RunSpec) -> str | None:
        """Why the session's agent definition differs from the one its last run followed
        (its text was edited since), or None."""
        store = self._assembler.ports.store
        runs = await store.list_runs(session_id)
        if not runs:
            return None
        for event in await store.run_events(runs[-1].id):
            if isinstance(event, RunStarted):
                before = event.agent_hash
                if before and before != spec.settings.agent_hash:
                    return (
                        f"the agent definition {spec.agent!r} changed since this session's "
                        f"last run (sha256 {before[:12]}… -> "
                        f"{(spec.settings.agent_hash or '')[:12]}…); the session goes on with "
                        "the new one"
                    )
                return None
        return None

    def _lead_seat(self, team_id: str) -> Callable[[RunRecorder, RunHooks | None], Seat] | None:
        """How an orchestrator's run takes its seat as the lead of its team (issue 20)."""
        teams = self.teams
        if teams is None:
            return None
        return lambda rec, hooks: teams.lead_seat(team_id, rec, hooks)

    def _mode_source(self, agent: str | None, assembler: RunAssembler) -> str:
        """What set the permission mode of a root run's assembler (for its plan-mode event)."""
        root_mode = self._assembler.policies.permissions.mode
        if agent is not None and assembler.policies.permissions.mode != root_mode:
            return f"the permission_mode of the agent definition {agent!r}"
        return "permissions.mode"

    def _consolidate_when_due(self) -> None:
        """Start the memory consolidation pass beside the run when it is due (it checks its
        own gates and lock; one at a time; it never raises)."""
        if self._background:
            return
        consolidation = self.consolidation
        if consolidation is None or not consolidation.may_be_due():  # most runs: no job
            return
        job: asyncio.Task[object] = asyncio.ensure_future(consolidation.maybe_run())
        self._background.add(job)
        job.add_done_callback(self._background.discard)

    def _run_ended(self, session_id: str) -> None:
        """When a session's last active run ends without grants, drop its empty grant set, so
        that serving many sessions stays flat in memory (a grant, once given, lives as long as
        the runtime)."""
        active = self._active.pop(session_id, 1) - 1
        if active > 0:
            self._active[session_id] = active
            return
        grants = self._grants.get(session_id)
        if grants is not None and len(grants) == 0:
            del self._grants[session_id]


def _same_project(session: SessionInfo, root: str) -> None:
    """A session resumes only in its own project: its context, its files and its commands'
    folder all belong there (UsageError naming both folders otherwise)."""
    if session.project_dir == root:
        return
    if os.path.realpath(session.project_dir) == os.path.realpath(root):
        return
    raise UsageError(
        f"session {session.id} belongs to the project {session.project_dir}, not {root}: "
        "resume it there (the CLI: run it from that folder or with --path; the SDK: "
        "project_dir)"
    )
