"""The task board: every task of a session, its steps with status and owner, and the recent
changes, as text cut to a token budget (TASK-2 rendering of the TASK-1 state).

Tokens are estimated as characters / 4. A board longer than the budget is cut at a line, and a
marker line says how much was left out; a budget of 0 gives no board at all.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from soong_agent.domain.tasks.state import TaskState
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

CHARS_PER_TOKEN = 4
TRUNCATION_MARKER = "… [task board truncated: {count} more lines; call task_board for all]"


@dataclass(frozen=True, slots=True)
class BoardTask:
    """One task to show: its name and folded state, and its log's problems."""

    name: str
    state: TaskState
    problems: tuple[str, ...] = ()


def clock_time(at: float) -> str:
    """`at` as an ISO UTC time to the second."""
    return dt.datetime.fromtimestamp(at, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def duration(seconds: float) -> str:
    """A short human duration: 45s, 4m05s, 2h03m."""
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def step_line(state: TaskState, step_id: str, now: float) -> str:
    """``- [claimed] impl: Implement it (owner run_2, lease ends in 4m05s) after design``."""
    step = state.steps[step_id]
    status = state.status(step_id, now)
    line = f"- [{status}] {step.id}: {step.title}"
    details: list[str] = []
    if status == "claimed" and step.lease_expires_at is not None:
        details.append(f"owner {step.owner}, lease ends in {duration(step.lease_expires_at - now)}")
    elif status in ("ready", "pending") and step.owner is not None:
        details.append(f"lease of {step.owner} expired")
    elif status == "done":
        details.append(f"by {step.owner}" + (f": {step.summary}" if step.summary else ""))
    elif status in ("failed", "cancelled") and step.reason:
        details.append(step.reason)
    if details:
        line += f" ({'; '.join(details)})"
    if step.depends_on and status == "pending":
        waiting = [d for d in step.depends_on if state.steps[d].outcome != "done"]
        line += f" waits for {', '.join(waiting)}"
    return line


def describe_record(record: TaskRecord) -> str:
    """What a record did, in a few words."""
    if isinstance(record, TaskCreated):
        return f"created the task: {record.title}"
    if isinstance(record, StepAdded):
        after = f" after {', '.join(record.depends_on)}" if record.depends_on else ""
        return f"added {record.step_id}{after}"
    if isinstance(record, StepClaimed):
        return f"claimed {record.step_id}"
    if isinstance(record, StepHeartbeat):
        return f"extended the lease of {record.step_id}"
    if isinstance(record, StepCompleted):
        return f"completed {record.step_id}" + (f": {record.summary}" if record.summary else "")
    if isinstance(record, StepFailed):
        return f"failed {record.step_id}: {record.reason}"
    if isinstance(record, StepReleased):
        return f"released {record.step_id}"
    assert isinstance(record, StepCancelled)
    return f"cancelled {record.step_id}" + (f": {record.reason}" if record.reason else "")


def recent_changes(
    tasks: Sequence[BoardTask], now: float, *, limit: int, window_minutes: int
) -> list[tuple[str, TaskRecord]]:
    """The last `limit` records of the last `window_minutes` across `tasks`, oldest first
    (heartbeats left out: they change nothing a reader needs)."""
    since = now - window_minutes * 60
    changes: list[tuple[str, TaskRecord]] = [
        (task.name, record)
        for task in tasks
        for record in task.state.history
        if record.at >= since and not isinstance(record, StepHeartbeat)
    ]
    changes.sort(key=lambda change: (change[1].at, change[0], change[1].seq))
    return changes[-limit:] if limit > 0 else []


def board_lines(
    tasks: Sequence[BoardTask], now: float, *, recent_limit: int, recent_window_minutes: int
) -> list[str]:
    """The whole board, line by line, before any cut."""
    if not tasks:
        return ["Task board: no tasks yet."]
    lines = ["Task board:"]
    for task in tasks:
        state = task.state
        counts = state.counts(now)
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        lines.append(f"## {task.name}: {state.title or '(not created)'} [{summary or 'no steps'}]")
        lines.extend(f"! {problem}" for problem in task.problems)
        lines.extend(step_line(state, step_id, now) for step_id in state.steps)
    changes = recent_changes(tasks, now, limit=recent_limit, window_minutes=recent_window_minutes)
    if changes:
        lines.append(f"Recent changes (last {recent_window_minutes} min):")
        lines.extend(
            f"- {clock_time(r.at)} {r.actor} {name}: {describe_record(r)}" for name, r in changes
        )
    return lines


def cut_to_budget(lines: Sequence[str], budget_tokens: int) -> str:
    """`lines` joined, cut at a line so that the text (marker included) fits the budget."""
    if budget_tokens <= 0:
        return ""
    limit = budget_tokens * CHARS_PER_TOKEN
    text = "\n".join(lines)
    if len(text) <= limit:
        return text
    kept: list[str] = []
    used = 0
    for index, line in enumerate(lines):
        marker = TRUNCATION_MARKER.format(count=len(lines) - index)
        cost = len(line) + 1
        if used + cost + len(marker) > limit:
            kept.append(marker)
            break
        kept.append(line)
        used += cost
    result = "\n".join(kept)
    return result if len(result) <= limit else result[: max(0, limit - 1)] + "…"


def render_board(
    tasks: Sequence[BoardTask],
    now: float,
    *,
    budget_tokens: int,
    recent_limit: int = 20,
    recent_window_minutes: int = 30,
) -> str:
    """The board of `tasks` at `now`, within `budget_tokens` (chars / 4)."""
    lines = board_lines(
        tasks, now, recent_limit=recent_limit, recent_window_minutes=recent_window_minutes
    )
    return cut_to_budget(lines, budget_tokens)
