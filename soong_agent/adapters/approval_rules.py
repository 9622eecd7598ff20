"""What every `ApprovalStore` adapter decides the same way (`ports.approval_store`): the arguments
it refuses, what an ask stores, what an answer and an expiry write, and an approval's row.

The in-memory fake, the SQLite and the PostgreSQL stores all call these, so they refuse the same
things with the same words.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from soong_agent.ports.approval import Decision
from soong_agent.ports.approval_store import (
    APPROVAL_STATUSES,
    DECISIONS,
    ApprovalClosed,
    ApprovalStatus,
    PendingApproval,
)
from soong_agent.ports.errors import UsageError

COLUMNS = (
    "id",
    "run_id",
    "session_id",
    "project_dir",
    "tool",
    "call_id",
    "summary",
    "arguments",
    "detail",
    "scope",
    "asked_at",
    "status",
    "decision",
    "answered_by",
    "answered_at",
)
"""The columns of an approval's row, in the order `pending_approval` reads them."""


# --- refusals ------------------------------------------------------------------------------------


def check_ask(approval: PendingApproval) -> None:
    """`UsageError` for an approval that names no id, run, session or tool, or whose texts are
    not text."""
    for name in ("id", "run_id", "session_id", "tool"):
        value = getattr(approval, name)
        if not isinstance(value, str) or not value.strip():
            raise UsageError(f"cannot ask for an approval without {name.replace('_', ' ')}")
    for name in ("project_dir", "arguments", "detail", "scope", "summary", "call_id"):
        if not isinstance(getattr(approval, name), str):
            raise UsageError(f"cannot ask for approval {approval.id}: its {name} is not text")


def duplicate(approval_id: str) -> UsageError:
    """The refusal of a second ask with an id that exists already."""
    return UsageError(f"an approval with id {approval_id!r} exists already")


def check_answer(approval_id: str, decision: str, by: str) -> None:
    """`UsageError` for a decision that is not one of `DECISIONS`, or an answer from nobody."""
    if decision not in DECISIONS:
        choices = ", ".join(DECISIONS)
        raise UsageError(
            f"cannot answer approval {approval_id} with {decision!r}; one of: {choices}"
        )
    if not isinstance(by, str) or not by.strip():
        raise UsageError(f"an answer to approval {approval_id} must say who gives it")


def check_list(status: str | None) -> None:
    """`UsageError` for a status filter that is no approval's status."""
    if status is not None and status not in APPROVAL_STATUSES:
        raise UsageError(f"no approval status {status!r}; one of: {', '.join(APPROVAL_STATUSES)}")


# --- what is written -----------------------------------------------------------------------------


def asked(approval: PendingApproval) -> PendingApproval:
    """`approval` as an ask stores it: pending, unanswered."""
    return dataclasses.replace(
        approval, status="pending", decision=None, answered_by=None, answered_at=None
    )


def answered(approval: PendingApproval, decision: Decision, by: str, now: float) -> PendingApproval:
    """`approval` answered with `decision` by `by` at `now`."""
    return dataclasses.replace(
        approval, status="answered", decision=decision, answered_by=by, answered_at=now
    )


def expired(approval: PendingApproval, now: float) -> PendingApproval:
    """`approval` expired at `now`: denied, by nobody."""
    return dataclasses.replace(
        approval, status="expired", decision="deny", answered_by=None, answered_at=now
    )


def answer_to(current: PendingApproval, decision: Decision, by: str, now: float) -> PendingApproval:
    """What an answer writes over `current` (read in the answer's transaction):
    `ApprovalClosed` unless it is still pending."""
    if not current.pending:
        raise ApprovalClosed(current)
    return answered(current, decision, by, now)


def expiry_of(current: PendingApproval, now: float) -> PendingApproval:
    """What an expiry leaves of `current`: expired when it was pending, else as it is."""
    return expired(current, now) if current.pending else current


# --- rows ----------------------------------------------------------------------------------------


def row(approval: PendingApproval) -> dict[str, Any]:
    """The approval's row, by column name."""
    return {name: getattr(approval, name) for name in COLUMNS}


def pending_approval(values: Sequence[Any]) -> PendingApproval:
    """An approval from its row (`COLUMNS` order)."""
    data = dict(zip(COLUMNS, values, strict=True))
    status: ApprovalStatus = data["status"]
    decision: Decision | None = data["decision"]
    answered_at = data["answered_at"]
    return PendingApproval(
        id=str(data["id"]),
        run_id=str(data["run_id"]),
        session_id=str(data["session_id"]),
        project_dir=str(data["project_dir"]),
        tool=str(data["tool"]),
        call_id=str(data["call_id"] or ""),
        summary=str(data["summary"] or ""),
        arguments=str(data["arguments"] or ""),
        detail=str(data["detail"] or ""),
        scope=str(data["scope"] or ""),
        asked_at=float(data["asked_at"]),
        status=status,
        decision=decision,
        answered_by=None if data["answered_by"] is None else str(data["answered_by"]),
        answered_at=None if answered_at is None else float(answered_at),
    )
