"""The task log port: the write-ahead logs of the task DAG (TASK-1).

One task is one append-only JSON-lines file, ``<wal_dir>/<session_id>/<name>.wal.jsonl``; each
line is one `TaskRecord`. The log is the source of truth: the DAG state is the fold of its
records (`soong_agent.domain.tasks.fold`). `TaskLog.append` checks the transition against the
folded state under an exclusive lock and writes nothing when it is illegal.

The record types live here, not in the domain, because they cross the port.
"""

from __future__ import annotations

import builtins
from typing import Annotated, Literal, NamedTuple, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from soong_agent.ports.errors import RunError, UsageError


class _Record(BaseModel):
    """What every record carries: its position in the log, when, and who wrote it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq: int = Field(ge=0, description="1, 2, … in log order; 0 before the log assigns it")
    at: float = Field(description="seconds since the epoch (the clock port)")
    actor: str = Field(min_length=1, description="the run or agent that wrote the record")


class TaskCreated(_Record):
    kind: Literal["task_created"] = "task_created"
    title: str
    description: str = ""


class StepAdded(_Record):
    kind: Literal["step_added"] = "step_added"
    step_id: str
    title: str
    depends_on: tuple[str, ...] = ()
    role: str | None = None
    """Only a teammate of this agent definition takes it up on its own (teams)."""
    tools: tuple[str, ...] = ()
    """Tools a teammate must have to claim it on its own."""
    labels: tuple[str, ...] = ()
    """Labels a teammate must carry to claim it on its own."""


class StepClaimed(_Record):
    kind: Literal["step_claimed"] = "step_claimed"
    step_id: str
    owner: str
    lease_expires_at: float


class StepHeartbeat(_Record):
    kind: Literal["step_heartbeat"] = "step_heartbeat"
    step_id: str
    lease_expires_at: float


class StepCompleted(_Record):
    kind: Literal["step_completed"] = "step_completed"
    step_id: str
    summary: str = ""


class StepFailed(_Record):
    kind: Literal["step_failed"] = "step_failed"
    step_id: str
    reason: str


class StepReleased(_Record):
    kind: Literal["step_released"] = "step_released"
    step_id: str


class StepCancelled(_Record):
    kind: Literal["step_cancelled"] = "step_cancelled"
    step_id: str
    reason: str = ""


TaskRecord = Annotated[
    TaskCreated
    | StepAdded
    | StepClaimed
    | StepHeartbeat
    | StepCompleted
    | StepFailed
    | StepReleased
    | StepCancelled,
    Field(discriminator="kind"),
]
"""One line of a task WAL."""

StepRecord = (
    StepAdded
    | StepClaimed
    | StepHeartbeat
    | StepCompleted
    | StepFailed
    | StepReleased
    | StepCancelled
)


class TaskRef(NamedTuple):
    """Where a task's log is: its session and its name."""

    session_id: str
    name: str

    def __str__(self) -> str:
        return f"{self.session_id}/{self.name}"


class WalRead(NamedTuple):
    """A log as read: the records that parse, in order, and one line per problem (a torn last
    line, ignored; a corrupt line, where reading stopped, with its line number)."""

    records: list[TaskRecord]
    problems: list[str]


class TaskNameRefused(UsageError):
    """A task name or session id that can never name a log (not a slug)."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"task name {name!r} refused: {reason}")


class TaskTransitionRefused(UsageError):
    """The record is not a legal next step of the log; nothing was written."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class TaskLogCorrupt(RunError):
    """The log has a corrupt line before its end: it cannot be folded, so nothing is appended."""

    def __init__(self, ref: str, problem: str) -> None:
        self.ref = ref
        self.problem = problem
        super().__init__(f"task log {ref} is corrupt: {problem}")


@runtime_checkable
class TaskLog(Protocol):
    """Every task WAL of a project. Calls are short, local and synchronous."""

    def read(self, session_id: str, name: str) -> WalRead:
        """The records of the log (none when it does not exist) and its problems."""
        ...

    def append(self, session_id: str, name: str, record: TaskRecord) -> TaskRecord:
        """Append `record` under an exclusive lock: re-read and fold the log, give the record
        the next sequence number, check the transition at `record.at`, write the whole line and
        fsync. Returns the record as written. TaskTransitionRefused (nothing written) for an
        illegal one, TaskLogCorrupt when the log cannot be folded, TaskNameRefused for a name
        that is not a slug. A torn last line is dropped before writing."""
        ...

    def list(self, session_id: str | None = None) -> builtins.list[TaskRef]:
        """Every log (of one session when given), sorted by session then name."""
        ...
