"""The approval port: who answers when a tool call needs the user's permission."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

Decision = Literal["allow_once", "allow_for_session", "deny"]
"""The user's answer to an approval request, and the decision a tool call runs (or not) under."""

PermissionClass = Literal["read_only", "write", "exec", "network"]

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` safe to show on a terminal: every control character but newline and tab (escape
    sequences, carriage returns, backspaces) and every bidirectional override, which could
    hide or rewrite what is shown, becomes its visible escape, e.g. ``\\x1b``, ``\\u202e``."""
    return _CONTROL.sub(lambda m: _escaped(m.group()), text)


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A question to the user about one tool call.

    Attributes:
        tool: the tool's name.
        call_id: the id of the tool call.
        permission_class: what kind of effect the call has.
        summary: one line saying what the call will do.
        session_scope: what an `allow_for_session` answer would cover, shown before answering.
        detail: what the call would change, shown below the summary: a unified diff of a file
            write or edit (a new file as a diff from ``/dev/null``), the parts of a command line,
            a URL and its host; empty when there is nothing more to show. Plain text: no
            terminal codes, control characters made visible (see `printable`); a terminal
            colours a diff itself, by the first character of each line, and cuts a long one.
        agent: which child agent asks (AGT-2), e.g. ``sub-agent reviewer``, ``fork`` or
            ``worker pool-a/w1``; empty for the session's own agent. A terminal shows it in
            brackets before the summary.
    """

    tool: str
    call_id: str
    permission_class: PermissionClass
    summary: str
    session_scope: str
    detail: str = ""
    agent: str = ""


@dataclass(frozen=True, slots=True)
class PlanReview:
    """The user's answer to a plan (PLAN-2): approve it, or keep planning with a `note` for
    the model (what to change; empty: none given)."""

    approved: bool
    note: str = ""


@runtime_checkable
class Approver(Protocol):
    """Answers approval requests (a terminal prompt, an SDK callback, a test double) and
    reviews plans."""

    async def decide(self, request: ApprovalRequest) -> Decision:
        """Return the user's decision; anything unclear must be answered with ``deny``."""
        ...

    async def review_plan(self, request: ApprovalRequest) -> PlanReview:
        """The user's review of the plan the request shows: approve it, or keep planning
        with a note for the model; anything unclear keeps planning. An approver that takes no
        notes answers with its decision (`review_by_decision`)."""
        ...


async def review_by_decision(approver: Approver, request: ApprovalRequest) -> PlanReview:
    """A plan review answered by `decide`: any allow approves the plan, without a note."""
    return PlanReview(approved=await approver.decide(request) != "deny")
