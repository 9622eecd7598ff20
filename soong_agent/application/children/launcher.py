"""Child agents (AGT-2, AGT-4): sub-agents, forks and orchestrator workers.

A child is a run of its own session, linked to its parent's (`parent_session_id`, and a
`child_started` event in both runs naming the parent's session, run and tool call). It is put
together by the same `RunAssembler` as a root run, from the `RunSpec` of its agent definition:

- a **sub-agent** (`create_sub_agent`) starts from nothing but its task, with only the tools its
  definition allows (never a spawning tool) and its definition's model (`model_profile`);
- a **fork** (`fork_agent`) starts from a copy of its parent's context and keeps the parent's
  system prompt and tools, so the provider's prompt cache still hits; it cannot spawn either;
- a **worker** (`dispatch_worker`, orchestrator mode) is one declared entry of a worker pool,
  with a stable id, its definition's tools capped by its `allowed_tools`, its own and its pool's
  budgets; its task tools work on the orchestrator's task graphs, so workers claim steps under
  the lease protocol (a worker that dies leaves its step to another once the lease expires).

Only the child's final answer goes back, as the tool result (the tool pipeline keeps a long one
as an artifact). Its approval requests go to the parent's approver, naming the child; hooks and
permissions apply to it as to the root. Its usage and cost are its own events (and a
`child_finished` event of the parent); the parent's budgets count them, and a child gets no
more than what is left of them. Limits: `agents.max_children_per_run`,
`max_concurrent_children_per_session` (further children wait), `default_child_timeout_ms` (the
child is cancelled and the parent told) and `child_cancel_timeout_ms` (how long a cancel of the
parent waits for its children to end).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence

from soong_agent.application.children.handoff import ChildQueue, Handoff, queued_child
from soong_agent.application.children.pools import (
    ChildLimits,
    Tally,
    Worker,
    WorkerPool,
    WorkerPools,
    tokens_of,
)
from soong_agent.application.children.results import (
    ChildEnd,
    child_output,
    fork_context,
    result_of,
    timed_out_reason,
)
from soong_agent.application.hooks import RunHooks
from soong_agent.application.runs.assembler import RunAssembler, RunSpec
from soong_agent.application.runs.handle import RunResult
from soong_agent.application.runs.lineage import Lineage
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.runs.starter import RunStarter, wait_bounded
from soong_agent.application.tools.base import ToolOutput
from soong_agent.domain.permissions import SessionGrants
from soong_agent.domain.run_limits import RunLimits
from soong_agent.domain.usage import cost_usd
from soong_agent.ports.errors import UsageError
from soong_agent.ports.events import ChildFinished, ChildKind, ChildStarted
from soong_agent.ports.messages import Message
from soong_agent.ports.streaming import Usage

__all__ = [
    "ORCHESTRATOR_MARK",
    "ChildLimits",
    "ChildRuns",
    "ChildSetup",
    "ParentLink",
    "Worker",
    "WorkerPool",
]

ORCHESTRATOR_MARK = "orchestrator"
"""The session mark of a session that dispatched work to workers: it resumes as an
orchestrator (AGT-4)."""


ChildSetup = tuple[RunAssembler, RunSpec]
"""How a child of one definition is put together: the assembler for its model and
permissions, and its spec (tools, prompt section, loop settings)."""


class ChildRuns:
    """Starts the children of the runs of one runtime (one per runtime, shared by its runs).

    `setup(agent_id, allowed_tools)` gives how a child of that definition is put together (a
    UsageError listing the known ids for an unknown one); `pools` are the orchestrator's.
    """

    def __init__(
        self,
        setup: Callable[[str, tuple[str, ...] | None], ChildSetup],
        limits: ChildLimits,
        *,
        pools: Sequence[WorkerPool] = (),
        starter: RunStarter,
        queue: ChildQueue | None = None,
    ) -> None:
        self._setup = setup
        self.starter = starter
        self.queue = queue
        """Where pool workers are queued for any worker process (None: run in-process)."""
        self.limits = limits
        self.workers = WorkerPools(pools)
        self.pools: dict[str, WorkerPool] = self.workers.pools
        self._slots: dict[str, asyncio.Semaphore] = {}

    def setup(self, agent_id: str, allowed: tuple[str, ...] | None = None) -> ChildSetup:
        return self._setup(agent_id, allowed)

    def pools_text(self) -> str:
        """The pools and their workers, one clause each (for `dispatch_worker`'s description)."""
        return self.workers.text()

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
    ) -> ParentLink:
        """The launcher of one parent run (what its spawning tools call); `depth`: the
        parent's (0 for a root run)."""
        return ParentLink(
            self,
            assembler=assembler,
            spec=spec,
            recorder=recorder,
            grants=grants,
            hooks=hooks,
            memory=memory,
            task_session_id=task_session_id,
            depth=depth,
        )

    def slots(self, session_id: str) -> asyncio.Semaphore:
        """How many children of the session's runs may run at once (the others wait)."""
        slot = self._slots.get(session_id)
        if slot is None:
            slot = self._slots[session_id] = asyncio.Semaphore(
                self.limits.max_concurrent_per_session
            )
        return slot


class ParentLink:
    """The `ChildLauncher` of one parent run."""

    def __init__(
        self,
        children: ChildRuns,
        *,
        assembler: RunAssembler,
        spec: RunSpec,
        recorder: RunRecorder,
        grants: SessionGrants,
        hooks: RunHooks | None,
        memory: str,
        task_session_id: str | None,
        depth: int = 0,
    ) -> None:
        self._children = children
        self._depth = depth
        self._assembler = assembler
        self._spec = spec
        self._rec = recorder
        self._grants = grants
        self._hooks = hooks
        self._memory = memory
        self._task_session_id = task_session_id
        self._started = 0
        self._tally = Tally()
        self._parent_spent: Callable[[], tuple[Usage, float | None]] = lambda: (Usage(), None)
        self._clock = assembler.ports.clock
        self._began = self._clock.monotonic()

    # --- the parent's budgets ------------------------------------------------------------------
    def spent(self) -> tuple[Usage, float | None]:
        return self._tally.usage, self._tally.cost

    def watch_parent(self, spent: Callable[[], tuple[Usage, float | None]]) -> None:
        self._parent_spent = spent

    def _left(self) -> RunLimits | None:
        """What is left of the parent's budgets, its finished children's use included."""
        usage, cost = self._parent_spent()
        usage = usage + self._tally.usage
        if self._tally.cost is not None:
            cost = (cost or 0.0) + self._tally.cost
        elapsed = (self._clock.monotonic() - self._began) * 1000
        return self._spec.settings.limits.left(
            cost_usd=cost, tokens=tokens_of(usage), elapsed_ms=elapsed
        )

    # --- the tools ---------------------------------------------------------------------------
    def _lineage(self, kind: ChildKind, agent: str, call_id: str, label: str) -> Lineage:
        """A child of this run: one deeper, held to this run's mode, linked to its session."""
        return Lineage(
            kind=kind,
            agent=agent,
            depth=self._depth + 1,
            parent_session_id=self._rec.session.id,
            parent_run_id=self._rec.run_info.id,
            parent_call_id=call_id,
            parent_mode=self._assembler.policies.permissions.mode,
            label=label,
        )

    async def sub_agent(self, agent_id: str | None, task: str, call_id: str) -> ToolOutput:
        agent = agent_id or self._children.limits.default_sub_agent
        try:
            assembler, spec = self._children.setup(agent)
        except UsageError as exc:
            return ToolOutput(f"create_sub_agent: {exc}", is_error=True)
        lineage = self._lineage("sub_agent", agent, call_id, f"sub-agent {agent}")
        return await self._child(lambda left: self._run_child(lineage, assembler, spec, task, left))

    async def fork(self, task: str, call_id: str) -> ToolOutput:
        copies = fork_context(self._rec.history)
        agent = self._children.limits.default_fork_agent
        lineage = self._lineage("fork", agent, call_id, "fork")
        return await self._child(
            lambda left: self._run_child(
                lineage, self._assembler, self._spec, task, left, copies, self._memory
            )
        )

    async def worker(self, pool: str, task: str, worker: str | None, call_id: str) -> ToolOutput:
        children = self._children
        found = children.pools.get(pool)
        if found is None:
            known = ", ".join(children.pools) or "none (this run is not an orchestrator)"
            return ToolOutput(
                f"dispatch_worker: no worker pool {pool!r}; pools: {known}", is_error=True
            )
        session_id = self._task_session_id or self._rec.session.id
        store = self._assembler.ports.store
        await children.workers.load_tallies(session_id, store)
        taken = await children.workers.take_worker(session_id, found, worker)
        if isinstance(taken, str):
            return ToolOutput(f"dispatch_worker: {taken}", is_error=True)
        chosen, left = taken
        if await store.get_mark(session_id, ORCHESTRATOR_MARK) is None:
            await store.set_mark(session_id, ORCHESTRATOR_MARK, "1", previous=None)
        try:
            try:
                assembler, spec = children.setup(chosen.agent, chosen.allowed_tools)
            except UsageError as exc:
                message = f"dispatch_worker: worker {chosen.worker_id}: {exc}"
                return ToolOutput(message, is_error=True)
            lineage = dataclasses.replace(
                self._lineage("worker", chosen.agent, call_id, f"worker {pool}/{chosen.worker_id}"),
                pool=pool,
                worker=chosen.worker_id,
                task_session_id=session_id,
            )
            if children.queue is None:
                return await self._child(
                    lambda within: self._run_child(lineage, assembler, spec, task, within), left
                )
            root, tools = self._assembler.ports.fs.root, chosen.allowed_tools
            return await self._child(
                lambda within: self._queued(Handoff(lineage, task, within, tools, root), spec),
                left,
            )
        finally:
            children.workers.release_worker(session_id, chosen)

    # --- one child ---------------------------------------------------------------------------
    async def _child(
        self, start: Callable[[RunLimits], Awaitable[ToolOutput]], caps: RunLimits | None = None
    ) -> ToolOutput:
        """Start a child (`start`, given what is left of this run's budgets within `caps`)
        unless this run may start no more, and return its tool result."""
        limits = self._children.limits
        if self._started >= limits.max_children_per_run:
            return ToolOutput(
                f"not started: this run has started {self._started} child agents, the most "
                f"it may (agents.max_children_per_run = {limits.max_children_per_run}); do the "
                "rest yourself",
                is_error=True,
            )
        left = self._left()
        if left is None:
            return ToolOutput(
                "not started: this run's budget is used up (runtime.max_tokens, max_cost_usd "
                "or max_wall_ms)",
                is_error=True,
            )
        self._started += 1
        async with self._children.slots(self._task_session_id or self._rec.session.id):
            return await start(left if caps is None else left.within(caps))

    async def _queued(self, handoff: Handoff, spec: RunSpec) -> ToolOutput:
        """A pool worker run by whichever worker process claims it (see `handoff`)."""
        queue = self._children.queue
        assert queue is not None
        return await queued_child(
            queue,
            handoff,
            self._children.limits,
            model=spec.settings.model_label,
            started=lambda link: self._rec.event(ChildStarted, **link),
            ended=lambda end, result, reason: self._ended(end, result, reason, spec),
        )

    async def _run_child(
        self,
        lineage: Lineage,
        assembler: RunAssembler,
        spec: RunSpec,
        task: str,
        limits: RunLimits,
        copies: Sequence[Message] = (),
        memory: str = "",
    ) -> ToolOutput:
        starter = self._children.starter
        first_line = task.strip().splitlines()[0] if task.strip() else ""
        session = starter.new_session(
            project_dir=assembler.ports.fs.root,
            title=f"[{lineage.label}] {first_line}",
            agent=spec.agent or lineage.agent,
            parent_session_id=lineage.parent_session_id,
        )
        child_spec = dataclasses.replace(
            spec,
            settings=dataclasses.replace(spec.settings, limits=spec.settings.limits.within(limits)),
        )
        prepared = await starter.prepare(
            assembler,
            child_spec,
            lineage,
            session=session,
            message=task,
            history=[],
            resumed=False,
            grants=self._grants,
            memory=memory,
        )
        for message in copies:  # a fork's copy of the parent's context
            prepared.recorder.add_message(message)
        task_run = starter.launch(prepared, parent=self._rec)
        run_id = prepared.run_info.id
        timeout_s = self._children.limits.timeout_s
        cancel_s = self._children.limits.cancel_timeout_s
        end = ChildEnd(lineage, session.id, run_id)
        try:
            timed_out = not await wait_bounded(task_run, timeout_s, cancel_s)
        except asyncio.CancelledError:  # the parent was cancelled: so is every child
            await self._ended(end, result_of(task_run, session.id, run_id), None, spec)
            raise
        result = result_of(task_run, session.id, run_id)
        reason = timed_out_reason(timeout_s) if timed_out else result.reason
        await self._ended(end, result, reason, spec)
        return child_output(lineage.label, session.id, result, reason, timed_out)

    async def _ended(
        self, end: ChildEnd, result: RunResult, reason: str | None, spec: RunSpec
    ) -> None:
        """Count what the child spent (the parent's, its worker's and its pool's budgets),
        record `child_finished` in the parent's run and fire `subagent_stop`."""
        cost = result.cost_usd
        if cost is None:
            cost = cost_usd(result.usage, spec.settings.price)
        self._tally.add(result.usage, cost)
        reason = reason or result.reason
        if end.pool is not None and end.worker is not None:
            team = self._task_session_id or self._rec.session.id
            self._children.workers.count(team, end.pool, end.worker, result.usage, cost)
        self._rec.event(
            ChildFinished,
            kind=end.kind,
            agent=end.agent,
            child_session_id=end.session_id,
            child_run_id=end.run_id,
            parent_call_id=end.call_id,
            status=result.status,
            reason=reason,
            turns=result.turns,
            usage=result.usage,
            cost_usd=cost,
            pool=end.pool,
            worker=end.worker,
        )
        if self._hooks is not None:
            await self._hooks.subagent_stop(
                self._rec,
                agent_id=end.agent,
                reason=reason or result.status,
                session=end.session_id,
            )
