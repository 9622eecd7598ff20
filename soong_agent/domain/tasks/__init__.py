"""The task DAG (TASK-1): WAL records (defined in `soong_agent.ports.tasks`), their pure fold
into the DAG state with the transition rules, name checks, and the board (TASK-2)."""

from soong_agent.domain.tasks.board import BoardTask, render_board
from soong_agent.domain.tasks.names import NAME_RULE, name_problem, session_problem
from soong_agent.domain.tasks.state import (
    FoldResult,
    StepState,
    StepStatus,
    TaskState,
    apply,
    check,
    fold,
    fold_into,
)
from soong_agent.domain.tasks.wal import ParsedWal, encode, parse
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

__all__ = [
    "NAME_RULE",
    "BoardTask",
    "FoldResult",
    "ParsedWal",
    "StepAdded",
    "StepCancelled",
    "StepClaimed",
    "StepCompleted",
    "StepFailed",
    "StepHeartbeat",
    "StepReleased",
    "StepState",
    "StepStatus",
    "TaskCreated",
    "TaskRecord",
    "TaskState",
    "apply",
    "check",
    "encode",
    "fold",
    "fold_into",
    "name_problem",
    "parse",
    "render_board",
    "session_problem",
]
