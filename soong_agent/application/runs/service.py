"""Starting a run: find or create the session, have the run assembled, launch its loop (LOOP-1)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from soong_agent.application.children.launcher import ORCHESTRATOR_MARK, ChildRuns
from soong_agent.application.hooks import RunHooks
from soong_agent.application.mcp.tools import loaded_in
from soong_agent.application.memory.recall import MemoryRecall, Recalled
from soong_agent.application.runs.assembler import RunAssembler, RunSpec
from soong_agent.application.runs.handle import Run
from soong_agent.application.runs.lineage import Lineage
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.runs.request import StartRequest, Target
from soong_agent.application.runs.resume import definition_changed, same_project, session_path
from soong_agent.application.runs.starter import Assigned, PreparedRun, RunStarter
from soong_agent.domain.budget import ContextBudget
from soong_agent.domain.permissions import SessionGrants
from soong_agent.domain.run_limits import RunLimits
from soong_agent.ports.errors import UsageError
from soong_agent.ports.events import (
    AgentSwitched,
    ErrorEvent,
    MemoryRecalled,
)
from soong_agent.ports.messages import ImageBlock, PromptWithImages
from soong_agent.ports.model import ToolChoice
from soong_agent.ports.storage import SessionClaim
from soong_agent.ports.text import safe_text

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
        self.telemetry = assembler.ports.telemetry  # (OBS-1: queued runs join their trace)
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
        images: Sequence[ImageBlock] = (),
        assigned: Assigned | None = None,
    ) -> Run:
        """Begin a run in the background and return its handle.

        `session_id` resumes a session; with `from_message` (a user message of it) the run
        starts a new branch: its message replaces that one, and the rest of the old path stays
        in the store as another branch. `tool_choice` applies to the run's first model request;
        `limits` replace the configured budgets they set, for this run. `plan_mode` starts it in
        plan mode (PLAN-2); a resumed session is in the mode its last run left it in.
        `orchestrator` gives the run `dispatch_worker` over the declared worker pools (AGT-4;
        a UsageError without a usable pool); a session that dispatched work resumes so.
        `images` go into the user message, before its text (PROV-7; checked by the caller).
        `assigned`: a queued run's ids and its worker's lease (a new session gets its id).
        """
        if not message.strip():
            raise UsageError("the message is empty; say what the agent should do")
        if images:
            message = PromptWithImages(safe_text(message), images)
        if from_message is not None and session_id is None:
            raise UsageError("from_message needs the session_id of the session to branch")
        ports = self._assembler.ports
        # the session is held from before its path is read until the run ends (STORE-2):
        # a second process resuming it meanwhile is refused, never interleaved
        held = session_id is not None and (assigned is None or not assigned.fence_only)
        claims = [await ports.store.claim_session(session_id)] if held and session_id else []
        try:
            request = StartRequest(
                message,
                session_id,
                from_message,
                tool_choice,
                limits,
                plan_mode,
                agent,
                orchestrator,
                assigned,
            )
            return await self._start(request, claims)
        except BaseException:  # not launched: the run never holds it
            for claim in claims:
                await claim.release()
            raise

    async def _start(self, request: StartRequest, claims: list[SessionClaim]) -> Run:
        message, session_id, plan_mode = request.message, request.session_id, request.plan_mode
        from_message, agent, assigned = request.from_message, request.agent, request.assigned
        tool_choice, limits, orchestrator = (
            request.tool_choice,
            request.limits,
            request.orchestrator,
        )
        ports, starter = self._assembler.ports, self.starter
        target = await self._target(session_id, from_message, agent)
        orchestrator = orchestrator or await self._resumes_as_orchestrator(session_id)
        assembler, spec = self._spec(target.agent, orchestrator, tool_choice, limits)
        session = target.session
        if session is None:
            title = message.strip().splitlines()[0]
            session = starter.new_session(
                project_dir=ports.fs.root,
                title=title,
                agent=spec.agent,
                session_id=assigned.session_id if assigned is not None else None,
            )
            if assigned is None or not assigned.fence_only:
                claims.append(await ports.store.claim_session(session.id))
        grants = self._grants.setdefault(session.id, SessionGrants())
        # every branch: what was loaded before (deferred MCP tools, folder instructions)
        earlier = await ports.store.all_messages(session.id) if session_id is not None else []
        recalled = await self.recall.recall(message) if self.recall is not None else None
        prepared = await starter.prepare(
            assembler,
            spec,
            Lineage(agent=target.agent),
            session=session,
            message=message,
            history=target.history,
            resumed=session_id is not None,
            grants=grants,
            plan_mode=plan_mode,
            mode_source=self._mode_source(target.agent, assembler),
            earlier=earlier,
            memory=recalled.text if recalled is not None else "",
            mcp_loaded=loaded_in(earlier),  # tools a tool_search loaded stay loaded
            children=self.children,
            team=self._lead_seat(session.id) if orchestrator else None,
            run_id=assigned.run_id if assigned is not None else None,
        )
        if assigned is not None:
            prepared.recorder.fence = assigned.fence
        await self._first_events(prepared, target, recalled, session_id, orchestrator)
        self._launch(prepared, fresh=session_id is None, claim=claims.pop() if claims else None)
        return prepared.run

    async def _target(
        self, session_id: str | None, from_message: str | None, agent: str | None
    ) -> Target:
        """The session the run goes into (None: a new one), the path it continues and the
        agent it runs: a resumed session keeps its preset, a blank one may switch (AGT-3)."""
        if session_id is None:
            return Target(None, [], agent)
        session, history = await session_path(self._assembler.ports.store, session_id, from_message)
        fs = self._assembler.ports.fs
        same_project(session, fs.root, fs)
        if agent is None or agent == session.agent:
            return Target(session, history, session.agent)
        if history:
            raise UsageError(
                f"session {session_id} runs the agent {session.agent or 'default'!r}; "
                "the agent can be switched only while a session has no messages"
            )
        switched = dataclasses.replace(session, agent=agent)
        return Target(switched, history, agent, switched=(session.agent, agent))

    async def _resumes_as_orchestrator(self, session_id: str | None) -> bool:
        """Whether a resumed session dispatched work to workers: it resumes as an
        orchestrator (AGT-4)."""
        if session_id is None or not self.children or not self.children.pools:
            return False
        store = self._assembler.ports.store
        return await store.get_mark(session_id, ORCHESTRATOR_MARK) is not None

    def budgets(self, agent: str | None, orchestrator: bool = False) -> RunLimits:
        """The budgets a run of `agent` starts with (`[runtime]`'s, its definition's)."""
        return self._spec(agent, orchestrator, None, None)[1].settings.limits

    def _spec(
        self,
        agent: str | None,
        orchestrator: bool,
        tool_choice: ToolChoice | None,
        limits: RunLimits | None,
    ) -> tuple[RunAssembler, RunSpec]:
        """The assembler and spec of the run: its agent's (or the root's), an orchestrator's
        when it is one, with this run's tool choice and budgets."""
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
        return assembler, spec

    async def _first_events(
        self,
        prepared: PreparedRun,
        target: Target,
        recalled: Recalled | None,
        session_id: str | None,
        orchestrator: bool,
    ) -> None:
        """What only a root run records before its loop starts: its team (the lead's mode
        binds the teammates; a resumed team comes back), an edited or switched agent, the
        memories recalled, the extraction job's notices."""
        recorder, session, spec = prepared.recorder, prepared.session, prepared.spec
        teams = self.teams if orchestrator else None
        if teams is not None:
            teams.set_lead_mode(session.id, prepared.bound.mode)  # it binds the teammates
            if session_id is not None:
                await teams.restore(session.id, session.project_dir)  # they come back
        switched = target.switched
        if session_id is not None and switched is None and spec.settings.agent_hash:
            edited = await definition_changed(self._assembler.ports.store, session_id, spec)
            if edited is not None:
                recorder.event(ErrorEvent, kind="agent_changed", message=edited, fatal=False)
        if switched is not None:  # the switch of a blank session's agent is logged (AGT-3)
            recorder.event(AgentSwitched, previous=switched[0], agent=switched[1])
        if recalled is not None:
            recorder.event(MemoryRecalled, **recalled.event_fields())
        if self._extraction is not None:  # (not made yet: no notice, no idle wait to end)
            for notice in self._extraction.run_started(session.id):
                recorder.event(notice.event, **notice.fields)

    def _launch(self, prepared: PreparedRun, *, fresh: bool, claim: SessionClaim | None) -> None:
        """Start the run's loop and wire what follows it: the session's grants, the memory
        consolidation pass and the extraction job (`fresh`: a new session's run)."""
        session, recorder = prepared.session, prepared.recorder
        task = self.starter.launch(prepared, claim=claim)
        self._active[session.id] = self._active.get(session.id, 0) + 1
        task.add_done_callback(lambda _: self._run_ended(session.id))
        if self._consolidation_of is not None:  # the first run: the job is made (its module
            # imported) once the run is under way, while its first commit is being written
            asyncio.get_running_loop().call_soon(self._consolidate_when_due)
        else:
            self._consolidate_when_due()
        if self._extraction is not None or self._extraction_of is not None:
            # before a waiter resumes: the job starts first

            def ended(_: object) -> None:
                extraction = self.extraction
                if extraction is not None:
                    whole = fresh and not recorder.rewritten
                    extraction.run_ended(session.id, recorder.history if whole else None)

            task.add_done_callback(ended)

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
