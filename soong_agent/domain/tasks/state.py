"""The task DAG as the fold of its WAL, and the rules of its transitions (TASK-1).

`fold(records)` replays a log into a `TaskState`; every record is checked first with
`check(state, record, record.at)`, so a log edited by hand into an illegal one stops folding at
the first illegal record, with its line number. `check` is also what a writer asks before
appending: an illegal transition is refused with its reason and nothing is appended.

A step is `pending` until every dependency is done, then `ready`; `claimed` while a lease is
live (now < lease_expires_at); `done`, `failed` or `cancelled` for good. An expired lease makes
the step claimable again, so the work of a crashed holder is picked up by another actor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from soong_agent.domain.tasks.names import name_problem
from soong_agent.ports.tasks import (
    StepAdded,
    StepCancelled,
    StepClaimed,
    StepCompleted,
    StepFailed,
    StepHeartbeat,
    StepReleased,
    TaskCreated,
    TaskRecord,
)

StepStatus = Literal["pending", "ready", "claimed", "done", "failed", "cancelled"]
FINAL: frozenset[StepStatus] = frozenset({"done", "failed", "cancelled"})
MAX_TITLE_LENGTH = 500


@dataclass(frozen=True, slots=True)
class StepState:
    """One step as the log left it. `outcome` is None while the step is open; `owner` and
    `lease_expires_at` are the last claim's (kept after a lease expires: the board shows who
    held it)."""

    id: str
    title: str
    depends_on: tuple[str, ...]
    added_at: float
    added_by: str
    outcome: Literal["done", "failed", "cancelled"] | None = None
    owner: str | None = None
    lease_expires_at: float | None = None
    claims: int = 0
    summary: str = ""
    reason: str = ""
    updated_at: float = 0.0
    role: str | None = None
    tools: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()


@dataclass(slots=True)
class TaskState:
    """One task: what `task_created` said, its steps in the order they were added, the last
    sequence number, and every record folded (`history`)."""

    title: str = ""
    description: str = ""
    created: bool = False
    created_at: float = 0.0
    created_by: str = ""
    steps: dict[str, StepState] = field(default_factory=dict)
    last_seq: int = 0
    history: list[TaskRecord] = field(default_factory=list)

    def status(self, step_id: str, now: float) -> StepStatus:
        """The step's status at `now` (KeyError for an unknown step)."""
        step = self.steps[step_id]
        if step.outcome is not None:
            return step.outcome
        if (
            step.owner is not None
            and step.lease_expires_at is not None
            and now < step.lease_expires_at
        ):
            return "claimed"
        if all(self.steps[d].outcome == "done" for d in step.depends_on):
            return "ready"
        return "pending"

    def ready(self, now: float) -> list[str]:
        """The steps anyone may claim at `now`, in the order they were added."""
        return [s for s in self.steps if self.status(s, now) == "ready"]

    def holder(self, step_id: str, now: float) -> str | None:
        """Who holds a live lease on the step at `now`."""
        step = self.steps[step_id]
        return step.owner if self.status(step_id, now) == "claimed" else None

    def counts(self, now: float) -> dict[StepStatus, int]:
        result: dict[StepStatus, int] = {}
        for step_id in self.steps:
            status = self.status(step_id, now)
            result[status] = result.get(status, 0) + 1
        return result

    def copy(self) -> TaskState:
        return dataclasses.replace(self, steps=dict(self.steps), history=list(self.history))


@dataclass(frozen=True, slots=True)
class FoldResult:
    """The state folded up to the first illegal record (if any), and why it stopped."""

    state: TaskState
    problems: tuple[str, ...] = ()


def _cycle(state: TaskState, new_id: str, depends_on: Iterable[str]) -> list[str] | None:
    """A dependency path from one of `depends_on` back to `new_id`, if adding it closes one."""
    stack: list[tuple[str, list[str]]] = [(d, [new_id, d]) for d in depends_on]
    seen: set[str] = set()
    while stack:
        node, path = stack.pop()
        if node == new_id:
            return path
        if node in seen or node not in state.steps:
            continue
        seen.add(node)
        stack.extend((d, [*path, d]) for d in state.steps[node].depends_on)
    return None


def check(state: TaskState, record: TaskRecord, now: float) -> str | None:
    """Why `record` cannot follow `state` at time `now`, or None when it may."""
    if record.seq != state.last_seq + 1:
        return f"record seq {record.seq} does not follow {state.last_seq}"
    if isinstance(record, TaskCreated):
        if state.created:
            return "the task already exists"
        if not record.title.strip():
            return "a task needs a title"
        return None
    if not state.created:
        return "the task does not exist (task_created must come first)"
    if isinstance(record, StepAdded):
        return _check_add(state, record)
    step = state.steps.get(record.step_id)
    if step is None:
        known = ", ".join(state.steps) or "none"
        return f"unknown step {record.step_id!r} (steps: {known})"
    status = state.status(record.step_id, now)
    if isinstance(record, StepClaimed):
        return _check_claim(state, record, status, now)
    if isinstance(record, StepCancelled):
        if status in FINAL:
            return f"step {record.step_id!r} is already {status}"
        return None
    # heartbeat, complete, fail, release: only by the holder
    if status in FINAL:
        return f"step {record.step_id!r} is already {status}"
    if step.owner is None:
        return f"step {record.step_id!r} is not claimed by anyone; claim it first"
    if step.owner != record.actor:
        return f"step {record.step_id!r} is held by {step.owner!r}, not by {record.actor!r}"
    if isinstance(record, StepHeartbeat) and record.lease_expires_at <= now:
        return "a heartbeat must extend the lease past now"
    if isinstance(record, StepFailed) and not record.reason.strip():
        return "a failed step needs a reason"
    return None


def _check_add(state: TaskState, record: StepAdded) -> str | None:
    problem = name_problem(record.step_id)
    if problem is not None:
        return f"step id {record.step_id!r} refused: {problem}"
    if record.step_id in state.steps:
        return f"step {record.step_id!r} already exists"
    if not record.title.strip() or len(record.title) > MAX_TITLE_LENGTH:
        return f"a step needs a title of 1 to {MAX_TITLE_LENGTH} characters"
    if len(set(record.depends_on)) != len(record.depends_on):
        return "depends_on names a step twice"
    path = _cycle(state, record.step_id, record.depends_on)
    if path is not None:
        return "dependency cycle: " + " -> ".join(path)
    unknown = [d for d in record.depends_on if d not in state.steps]
    if unknown:
        return f"unknown dependency {unknown[0]!r} (add it first)"
    return None


def _check_claim(
    state: TaskState, record: StepClaimed, status: StepStatus, now: float
) -> str | None:
    step = state.steps[record.step_id]
    if record.owner != record.actor:
        return "a step is claimed by its owner only"
    if record.lease_expires_at <= now:
        return "a lease must end after now"
    if status == "claimed":
        who = "you" if step.owner == record.actor else repr(step.owner)
        left = (step.lease_expires_at or now) - now
        return f"step {record.step_id!r} is held by {who} (lease ends in {left:.0f}s)"
    if status == "pending":
        waiting = [d for d in step.depends_on if state.steps[d].outcome != "done"]
        return f"step {record.step_id!r} waits for {', '.join(waiting)} to be done"
    if status in FINAL:
        return f"step {record.step_id!r} is already {status}"
    return None


def apply(state: TaskState, record: TaskRecord) -> TaskState:
    """The state after `record` (assumed checked); `state` is left unchanged."""
    result = state.copy()
    _apply_in_place(result, record)
    return result


def _apply_in_place(state: TaskState, record: TaskRecord) -> None:
    state.last_seq = record.seq
    state.history.append(record)
    if isinstance(record, TaskCreated):
        state.title, state.description = record.title, record.description
        state.created, state.created_at, state.created_by = True, record.at, record.actor
        return
    if isinstance(record, StepAdded):
        state.steps[record.step_id] = StepState(
            id=record.step_id,
            title=record.title,
            depends_on=record.depends_on,
            added_at=record.at,
            added_by=record.actor,
            updated_at=record.at,
            role=record.role,
            tools=record.tools,
            labels=record.labels,
        )
        return
    step = state.steps[record.step_id]
    replace = dataclasses.replace
    if isinstance(record, StepClaimed):
        step = replace(
            step,
            owner=record.owner,
            lease_expires_at=record.lease_expires_at,
            claims=step.claims + 1,
        )
    elif isinstance(record, StepHeartbeat):
        step = replace(step, lease_expires_at=record.lease_expires_at)
    elif isinstance(record, StepCompleted):
        step = replace(step, outcome="done", summary=record.summary, lease_expires_at=None)
    elif isinstance(record, StepFailed):
        step = replace(step, outcome="failed", reason=record.reason, lease_expires_at=None)
    elif isinstance(record, StepReleased):
        step = replace(step, owner=None, lease_expires_at=None)
    elif isinstance(record, StepCancelled):
        step = replace(step, outcome="cancelled", reason=record.reason, lease_expires_at=None)
    state.steps[record.step_id] = replace(step, updated_at=record.at)


def fold_into(
    state: TaskState, records: Iterable[TaskRecord], *, first_line: int = 1
) -> str | None:
    """Fold `records` onto `state` in place (the log's lines `first_line`, …); the problem of
    the first illegal record, where folding stopped, or None."""
    for number, record in enumerate(records, start=first_line):
        reason = check(state, record, record.at)
        if reason is not None:
            return f"line {number}: illegal record, folding stopped: {reason}"
        _apply_in_place(state, record)
    return None


def fold(records: Iterable[TaskRecord]) -> FoldResult:
    """Replay `records` from an empty task; stops at the first illegal record (line N)."""
    state = TaskState()
    problem = fold_into(state, records)
    return FoldResult(state, () if problem is None else (problem,))
