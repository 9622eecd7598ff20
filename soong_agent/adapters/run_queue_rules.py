"""What every `RunQueue` adapter decides the same way (`ports.run_queue`): the arguments it
refuses, what a claim does with the run it finds, the reasons it writes, and a run's row.

The in-memory fake, the SQLite and the PostgreSQL queues all call these, so they refuse the
same things with the same words and end the same runs the same way.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, Literal

from soong_agent.ports.errors import UsageError
from soong_agent.ports.run_queue import (
    ENDED,
    Dispatched,
    QueuedRun,
    QueueStatus,
    RunOptions,
    attempt_fence,
    session_end,
)

CANCELLED_QUEUED = "cancelled before a worker took it"
CANCELLED_RUNNING = "cancelled while it ran"
CANCELLED_ABANDONED = "cancelled; the worker that held it stopped before it ended"

COLUMNS = (
    "id",
    "session_id",
    "project_dir",
    "message",
    "options",
    "status",
    "submitted_at",
    "worker",
    "attempts",
    "fence",
    "lease_expires_at",
    "cancel_requested",
    "reason",
    "finished_at",
)
"""The columns of a run's row, in the order `queued_run` reads them."""

ClaimStep = Literal["take", "fail", "cancel"]

_OPTION_FIELDS = frozenset(f.name for f in dataclasses.fields(RunOptions))
_DISPATCHED_FIELDS = frozenset(f.name for f in dataclasses.fields(Dispatched))


# --- refusals ------------------------------------------------------------------------------------


def check_submit(run: QueuedRun) -> None:
    """`UsageError` for a run that names no id, session or project folder."""
    for name in ("id", "session_id", "project_dir"):
        value = getattr(run, name)
        if not isinstance(value, str) or not value.strip():
            raise UsageError(f"cannot queue a run without {name.replace('_', ' ')}")
    if not isinstance(run.message, str):
        raise UsageError(f"cannot queue run {run.id!r}: its message is not text")


def duplicate(run_id: str) -> UsageError:
    """The refusal of a second submit with an id that is queued already."""
    return UsageError(f"a run with id {run_id!r} is queued already")


def check_claim(worker: str, lease_s: float, max_attempts: int) -> None:
    """`UsageError` for a claim without a worker name, a lease that is not positive, or
    `max_attempts` below 1."""
    if not worker or not worker.strip():
        raise UsageError("a claim needs the worker's name")
    check_lease(lease_s)
    if max_attempts < 1:
        raise UsageError(f"max_attempts must be at least 1, not {max_attempts}")


def check_lease(lease_s: float) -> None:
    """`UsageError` for a lease that is not a positive number of seconds."""
    if not lease_s > 0:
        raise UsageError(f"a lease must last a positive number of seconds, not {lease_s}")


def check_end(status: str) -> None:
    """`UsageError` unless `status` is one a run ends with."""
    if status not in ENDED:
        raise UsageError(f"a run cannot finish as {status!r}; one of: {', '.join(sorted(ENDED))}")


def served(projects: Sequence[str]) -> list[str]:
    """The project folders a claim looks at (each once, in the order given)."""
    if isinstance(projects, str):
        raise UsageError("a claim takes a sequence of project folders, not one string")
    return list(dict.fromkeys(projects))


# --- what a claim does ---------------------------------------------------------------------------


def claim_step(status: str, attempts: int, cancel_requested: bool, max_attempts: int) -> ClaimStep:
    """What a claim does with the oldest run it may take (queued, or running under a lease
    that ran out): end it `cancelled` when its cancellation was asked for (its holder stopped
    before honouring it), end it `failed` when it was claimed `max_attempts` times already,
    otherwise take it."""
    if status == "running" and cancel_requested:
        return "cancel"
    if attempts >= max_attempts:
        return "fail"
    return "take"


def recorded_end(
    run: QueuedRun, session_runs: Sequence[tuple[str, str, str | None]]
) -> tuple[QueueStatus, str] | None:
    """The end the run's last attempt wrote in its session (`session_runs`: the id, status and
    reason of each run of its session) that its worker never told the queue (`session_end`)."""
    mine = [(f, r) for r in session_runs if (f := attempt_fence(run.id, r[0])) is not None]
    if not mine:
        return None
    _fence, (_id, status, reason) = max(mine, key=lambda found: found[0])
    return session_end(status, reason, cancel_requested=run.cancel_requested)


def exhausted_reason(attempts: int, max_attempts: int) -> str:
    """Why a run was ended `failed` instead of claimed again."""
    return (
        f"claimed {attempts} times (max_attempts {max_attempts}) and never finished: each"
        " worker that held it stopped or lost its lease before the run ended"
    )


# --- rows ----------------------------------------------------------------------------------------


def submitted(run: QueuedRun) -> QueuedRun:
    """`run` as a submit stores it: queued, never claimed, no lease, no end."""
    return dataclasses.replace(
        run,
        status="queued",
        worker=None,
        attempts=0,
        fence=0,
        lease_expires_at=None,
        cancel_requested=False,
        reason="",
        finished_at=None,
    )


def options_json(options: RunOptions) -> str:
    """The options as stored: a JSON object of every field."""
    return json.dumps(dataclasses.asdict(options), separators=(",", ":"))


def options_from_json(text: str) -> RunOptions:
    """The stored options (a field this version does not know is left out)."""
    data = json.loads(text) if text else {}
    if not isinstance(data, dict):
        return RunOptions()
    known = {k: v for k, v in data.items() if k in _OPTION_FIELDS}
    if not isinstance(known.get("trace_parent"), str):  # (telemetry ignores a malformed one)
        known.pop("trace_parent", None)
    dispatched = known.pop("dispatched", None)
    return RunOptions(**known, dispatched=_dispatched(dispatched))


def _dispatched(data: object) -> Dispatched | None:
    """A dispatched worker's origin as stored (None when absent or not an object)."""
    if not isinstance(data, dict):
        return None
    fields = {k: v for k, v in data.items() if k in _DISPATCHED_FIELDS}
    tools = fields.get("allowed_tools")
    fields["allowed_tools"] = None if tools is None else tuple(str(t) for t in tools)
    return Dispatched(**fields)


def queued_run(row: Sequence[Any]) -> QueuedRun:
    """A run from its row (`COLUMNS` order)."""
    (
        run_id,
        session_id,
        project_dir,
        message,
        options,
        status,
        submitted_at,
        worker,
        attempts,
        fence,
        lease_expires_at,
        cancel_requested,
        reason,
        finished_at,
    ) = row
    state: QueueStatus = status
    return QueuedRun(
        id=str(run_id),
        session_id=str(session_id),
        project_dir=str(project_dir),
        message=str(message),
        options=options_from_json(str(options)),
        status=state,
        submitted_at=float(submitted_at),
        worker=None if worker is None else str(worker),
        attempts=int(attempts),
        fence=int(fence),
        lease_expires_at=None if lease_expires_at is None else float(lease_expires_at),
        cancel_requested=bool(cancel_requested),
        reason=str(reason or ""),
        finished_at=None if finished_at is None else float(finished_at),
    )
