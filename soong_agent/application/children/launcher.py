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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from soong_agent.application.hooks import RunHooks
from soong_agent.application.runs.assembler import RunAssembler, RunSpec
from soong_agent.application.runs.handle import RunResult
from soong_agent.application.runs.lineage import Lineage
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.runs.starter import RunStarter, wait_bounded
from soong_agent.application.tools.base import ToolOutput
from soong_agent.domain.history import unanswered_calls
from soong_agent.domain.permissions import SessionGrants
from soong_agent.domain.run_limits import RunLimits
from soong_agent.domain.usage import cost_usd
from soong_agent.ports.errors import UsageError
from soong_agent.ports.events import ChildFinished, ChildKind
from soong_agent.ports.messages import Message, ToolResultBlock
from soong_agent.ports.storage import SessionStore
from soong_agent.ports.streaming import Usage

FORK_CALL_RESULT = (
    "This call started you: you are the fork. Do the sub-task below; your final answer goes "
    "back to the agent that forked you."
)
"""The result a fork's copy of the parent's context gets for the parent's pending calls."""
TASK_LINE_CHARS = 200
ORCHESTRATOR_MARK = "orchestrator"
"""The session mark of a session that dispatched work to workers: it resumes as an
orchestrator (AGT-4)."""


ChildSetup = tuple[RunAssembler, RunSpec]
"""How a child of one definition is put together: the assembler for its model and
permissions, and its spec (tools, prompt section, loop settings)."""


@dataclass(frozen=True, slots=True)
class ChildLimits:
    """`[agents]`: how many children, how many at once, how long."""

    max_children_per_run: int = 8
    max_concurrent_per_session: int = 4
    timeout_s: float = 600.0
    cancel_timeout_s: float = 30.0
    default_sub_agent: str = "default_sub_agent"
    default_fork_agent: str = "default_fork_agent"


@dataclass(frozen=True, slots=True)
class Worker:
    """One declared worker of a pool (AGT-4)."""

    pool: str
    worker_id: str
    agent: str
    allowed_tools: tuple[str, ...] | None = None
    limits: RunLimits = field(default_factory=RunLimits)
    """The worker's budgets over all the tasks it does for one orchestrator session."""


@dataclass(frozen=True, slots=True)
class WorkerPool:
    """A pool of workers, and its budgets over all of them (per orchestrator session)."""

    pool_id: str
    workers: tuple[Worker, ...]
    limits: RunLimits = field(default_factory=RunLimits)


@dataclass(slots=True)
class _Tally:
    usage: Usage = field(default_factory=Usage)
    cost: float | None = None
    runs: int = 0

    def add(self, usage: Usage, cost: float | None) -> None:
        self.usage = self.usage + usage
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost
        self.runs += 1


def tokens_of(usage: Usage) -> int:
    """Input and output tokens, cache included: what `max_tokens` budgets count."""
    return (
        usage.input_tokens
        + usage.output_tokens
        + usage.cache_read_tokens
        + usage.cache_write_tokens
    )


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
    ) -> None:
        self._setup = setup
        self.starter = starter
        self.limits = limits
        self.pools: dict[str, WorkerPool] = {p.pool_id: p for p in pools}
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._busy: set[tuple[str, str, str]] = set()  # (session, pool, worker) at work
        self._free = asyncio.Event()
        self._worker_tally: dict[tuple[str, str, str], _Tally] = {}
        self._pool_tally: dict[tuple[str, str], _Tally] = {}
        self._loaded: set[str] = set()

    def setup(self, agent_id: str, allowed: tuple[str, ...] | None = None) -> ChildSetup:
        return self._setup(agent_id, allowed)

    def pools_text(self) -> str:
        """The pools and their workers, one clause each (for `dispatch_worker`'s description)."""
        return "; ".join(
            f"{p.pool_id} ({', '.join(f'{w.worker_id}: {w.agent}' for w in p.workers)})"
            for p in self.pools.values()
        )

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
        slot = self._slots.get(session_id)
        if slot is None:
            slot = self._slots[session_id] = asyncio.Semaphore(
                self.limits.max_concurrent_per_session
            )
        return slot

    def worker_tally(self, session_id: str, pool: str, worker: str) -> _Tally:
        return self._worker_tally.setdefault((session_id, pool, worker), _Tally())

    async def load_tallies(self, session_id: str, store: SessionStore) -> None:
        """What the workers and pools spent for the orchestrator session `session_id` before
        this process (its runs' `child_finished` events), read once per session: the budgets
        of `agents.worker_pools` cover the whole session, across restarts."""
        if session_id in self._loaded:
            return
        self._loaded.add(session_id)
        for run in await store.list_runs(session_id):
            for event in await store.run_events(run.id):
                if isinstance(event, ChildFinished) and event.pool and event.worker:
                    self.worker_tally(session_id, event.pool, event.worker).add(
                        event.usage, event.cost_usd
                    )
                    self.pool_tally(session_id, event.pool).add(event.usage, event.cost_usd)

    def pool_tally(self, session_id: str, pool: str) -> _Tally:
        return self._pool_tally.setdefault((session_id, pool), _Tally())

    async def take_worker(
        self, session_id: str, pool: WorkerPool, wanted: str | None
    ) -> tuple[Worker, RunLimits] | str:
        """A worker of `pool` free to work for `session_id` (waiting while all are busy) and
        the budgets it has left; or why none can work."""
        pool_left = self._left(pool.limits, self.pool_tally(session_id, pool.pool_id))
        if pool_left is None:
            return f"the budget of pool {pool.pool_id!r} is spent"
        candidates = [w for w in pool.workers if wanted is None or w.worker_id == wanted]
        if not candidates:
            known = ", ".join(w.worker_id for w in pool.workers)
            return f"pool {pool.pool_id!r} has no worker {wanted!r}; its workers: {known}"
        while True:
            usable: list[tuple[int, int, Worker, RunLimits]] = []
            for index, worker in enumerate(candidates):
                tally = self.worker_tally(session_id, worker.pool, worker.worker_id)
                left = self._left(worker.limits, tally)
                if left is not None:
                    usable.append((tally.runs, index, worker, left.within(pool_left)))
            if not usable:
                return (
                    f"every worker of pool {pool.pool_id!r} that could take it has spent its budget"
                )
            busy = self._busy
            idle = [u for u in usable if (session_id, pool.pool_id, u[2].worker_id) not in busy]
            if idle:
                _, _, worker, left = min(idle, key=lambda u: (u[0], u[1]))
                self._busy.add((session_id, pool.pool_id, worker.worker_id))
                return worker, left
            self._free.clear()
            await self._free.wait()

    def release_worker(self, session_id: str, worker: Worker) -> None:
        self._busy.discard((session_id, worker.pool, worker.worker_id))
        self._free.set()

    @staticmethod
    def _left(limits: RunLimits, tally: _Tally) -> RunLimits | None:
        return limits.left(cost_usd=tally.cost, tokens=tokens_of(tally.usage), elapsed_ms=0)


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
        self._tally = _Tally()
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
        return await self._child(lineage, assembler, spec, task)

    async def fork(self, task: str, call_id: str) -> ToolOutput:
        copies = _fork_context(self._rec.history)
        agent = self._children.limits.default_fork_agent
        lineage = self._lineage("fork", agent, call_id, "fork")
        return await self._child(
            lineage, self._assembler, self._spec, task, copies=copies, memory=self._memory
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
        await children.load_tallies(session_id, store)
        taken = await children.take_worker(session_id, found, worker)
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
            return await self._child(lineage, assembler, spec, task, caps=left)
        finally:
            children.release_worker(session_id, chosen)

    # --- one child ---------------------------------------------------------------------------
    async def _child(
        self,
        lineage: Lineage,
        assembler: RunAssembler,
        spec: RunSpec,
        task: str,
        *,
        copies: Sequence[Message] = (),
        memory: str = "",
        caps: RunLimits | None = None,
    ) -> ToolOutput:
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
        parent = self._rec.session
        async with self._children.slots(self._task_session_id or parent.id):
            return await self._run_child(
                lineage,
                assembler,
                spec,
                task,
                copies=copies,
                memory=memory,
                limits=left if caps is None else left.within(caps),
            )

    async def _run_child(
        self,
        lineage: Lineage,
        assembler: RunAssembler,
        spec: RunSpec,
        task: str,
        *,
        copies: Sequence[Message],
        memory: str,
        limits: RunLimits,
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
        end = _ChildEnd(lineage, session.id, run_id)
        try:
            timed_out = not await wait_bounded(task_run, timeout_s, cancel_s)
        except asyncio.CancelledError:  # the parent was cancelled: so is every child
            await self._ended(end, _result_of(task_run, session.id, run_id), None, spec)
            raise
        result = _result_of(task_run, session.id, run_id)
        reason = result.reason
        if timed_out:
            reason = (
                f"did not finish within {timeout_s:g} s (agents.default_child_timeout_ms) and "
                "was cancelled"
            )
        await self._ended(end, result, reason, spec)
        return _output(lineage.label, session.id, result, reason, timed_out)

    async def _ended(
        self, end: _ChildEnd, result: RunResult, reason: str | None, spec: RunSpec
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
            self._children.worker_tally(team, end.pool, end.worker).add(result.usage, cost)
            self._children.pool_tally(team, end.pool).add(result.usage, cost)
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


@dataclass(frozen=True, slots=True)
class _ChildEnd:
    """Which child ended: what its `child_finished` event names."""

    lineage: Lineage
    session_id: str
    run_id: str

    @property
    def kind(self) -> ChildKind:
        return self.lineage.child_kind()

    @property
    def agent(self) -> str:
        return self.lineage.agent or self.lineage.kind

    @property
    def call_id(self) -> str:
        return self.lineage.parent_call_id or ""

    @property
    def pool(self) -> str | None:
        return self.lineage.pool

    @property
    def worker(self) -> str | None:
        return self.lineage.worker


def _result_of(task: asyncio.Task[RunResult], session_id: str, run_id: str) -> RunResult:
    if task.done() and not task.cancelled():
        return task.result()
    return RunResult(
        session_id=session_id,
        run_id=run_id,
        status="cancelled",
        reason="the child did not end within agents.child_cancel_timeout_ms",
    )


def _output(
    label: str, session_id: str, result: RunResult, reason: str | None, timed_out: bool
) -> ToolOutput:
    head = f"[{label}, session {session_id}, {result.status}"
    head += f" after {result.turns} turn{'s' if result.turns != 1 else ''}]"
    if result.status == "completed" and not timed_out:
        return ToolOutput(f"{head}\n{result.final_text}" if result.final_text else head)
    why = reason or result.status
    text = f"{head}\nThe child did not complete: {why}."
    if result.final_text:
        text += f"\nIts last answer:\n{result.final_text}"
    return ToolOutput(text, is_error=True)


def _fork_context(history: Sequence[Message]) -> list[Message]:
    """A copy of the parent's active path for a fork: new ids (the store gives them), and the
    parent's calls still waiting for results (this fork's among them) answered by a note."""
    copies = [m.model_copy(update={"id": "", "parent_id": None}) for m in history]
    pending = unanswered_calls(copies)
    if pending:
        copies.append(
            Message(
                role="tool",
                content=[
                    ToolResultBlock(call_id=c.id, name=c.name, content=FORK_CALL_RESULT)
                    for c in pending
                ],
                kind="synthetic",
            )
        )
    return copies
