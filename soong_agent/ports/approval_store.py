"""The approval store port (WORK-3): approval questions that outlive the process that asked.

In a detached run nobody sits at the worker's terminal, so a tool call that needs the user's
permission becomes a pending approval in the database the sessions live in. Anyone who can
reach that database answers it (`approvals answer`, the SDK, a `permission_request` hook), from
any process or host; the run that asked waits for the answer (`wait_answered`) without holding
a worker busy, and goes on with the decision. An approval nobody answered in time is expired
(denied).

An approval is answered once: the first answer wins (a compare-and-set on its status in one
transaction), a second one, or an answer to an expired approval, is refused (`ApprovalClosed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from soong_agent.ports.approval import Decision
from soong_agent.ports.errors import UsageError

ApprovalStatus = Literal["pending", "answered", "expired"]
"""Where an approval stands: waiting for an answer, answered by someone, or denied because no
answer came in time."""

APPROVAL_STATUSES: tuple[ApprovalStatus, ...] = ("pending", "answered", "expired")
DECISIONS: tuple[Decision, ...] = ("allow_once", "allow_for_session", "deny")


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """One approval question about a tool call of a run, and its answer once it has one.

    Attributes:
        id: the approval's id, ``apr_…``.
        run_id: the run that asked (and waits).
        session_id: the run's session.
        project_dir: the session's project folder.
        tool: the tool's name.
        arguments: a preview of the call's arguments, already redacted (no secret in it).
        detail: what the call would change: a diff of a file write or edit, or the analysed
            command; empty when there is nothing more to show.
        scope: what an ``allow_for_session`` answer would cover.
        asked_at: when it was asked (Unix seconds).
        status: ``pending``, ``answered`` or ``expired``.
        decision: the answer (``deny`` for an expired approval); None while pending.
        answered_by: who answered (None while pending and when it expired).
        answered_at: when it was answered or expired; None while pending.
        summary: one line saying what the call will do (as an `ApprovalRequest` says it).
        call_id: the id of the tool call.
    """

    id: str
    run_id: str
    session_id: str
    project_dir: str
    tool: str
    arguments: str = ""
    detail: str = ""
    scope: str = ""
    asked_at: float = 0.0
    status: ApprovalStatus = "pending"
    decision: Decision | None = None
    answered_by: str | None = None
    answered_at: float | None = None
    summary: str = ""
    call_id: str = ""

    @property
    def pending(self) -> bool:
        return self.status == "pending"


class ApprovalNotFound(UsageError):
    """No approval has this id."""

    def __init__(self, approval_id: str) -> None:
        self.approval_id = approval_id
        super().__init__(
            f"no approval {approval_id!r} (approvals list shows the approvals there are)"
        )


class ApprovalClosed(UsageError):
    """The approval was answered already, or expired: it takes no (other) answer."""

    def __init__(self, approval: PendingApproval) -> None:
        self.approval = approval
        self.approval_id = approval.id
        if approval.status == "expired":
            said = "expired: no answer came in time, so it was denied"
        else:
            by = f" by {approval.answered_by}" if approval.answered_by else ""
            said = f"was answered already ({approval.decision}{by})"
        super().__init__(f"approval {approval.id} {said}; it takes no other answer")


@runtime_checkable
class ApprovalStore(Protocol):
    """Pending approvals, in the session store's database (SQLite on one host, PostgreSQL across
    hosts). Every method may be called from any task of one event loop."""

    async def ask(self, approval: PendingApproval) -> PendingApproval:
        """Store `approval` as pending (its status and answer are reset) and wake whoever
        watches the approvals. UsageError when an approval with its id exists, or when it
        names no id, run, session or tool."""
        ...

    async def answer(
        self, approval_id: str, decision: Decision, *, by: str, now: float
    ) -> PendingApproval:
        """Answer a pending approval with `decision`, given by `by` at `now`, and wake the run
        waiting for it. Of two answers given at once exactly one wins. ApprovalClosed (naming
        the approval) when it was answered already or expired; ApprovalNotFound for an
        unknown id; UsageError for a decision that is not one of `DECISIONS` or no `by`."""
        ...

    async def expire(self, approval_id: str, *, now: float) -> PendingApproval:
        """A pending approval becomes `expired` with the decision ``deny``; one answered or
        expired already is returned as it is. ApprovalNotFound for an unknown id."""
        ...

    async def get(self, approval_id: str) -> PendingApproval | None:
        """The approval, or None."""
        ...

    async def list(
        self,
        *,
        status: ApprovalStatus | None = None,
        run_id: str | None = None,
        limit: int = 100,
    ) -> Sequence[PendingApproval]:
        """Approvals, newest asked first (only those with `status`, of `run_id`, when given)."""
        ...

    async def wait_answered(
        self, approval_id: str, timeout_s: float | None
    ) -> PendingApproval | None:
        """The approval once it is no longer pending (answered or expired, by any process),
        at once if it is not pending already; None when `timeout_s` passed first (None: no
        limit) or the store was closed meanwhile. ApprovalNotFound for an unknown id."""
        ...

    async def close(self) -> None:
        """Release connections; later calls raise UsageError."""
        ...
