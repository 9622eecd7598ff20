"""`run --approve MODE`: who answers the approval questions when no person does.

- ``ask`` (the default): the terminal asks on stderr and reads one answer per question from
  stdin (``1`` allow once, ``2`` allow for the session, ``3`` deny); a piped answer stream works
  the same way, and a closed or exhausted stdin denies.
- ``never``: every call that would be asked about is denied (the result tells the model).
- ``once-per-tool``: the first asked call of each tool is allowed once; its later asks are
  denied. For scripts that expect one write, one command, and no more.
- ``rules-only``: no one is asked: the mode and the allow/deny rules decide, and what they
  leave open follows `permissions.write_without_callback` (as in the SDK without a callback).

Nothing is ever guessed: an answer comes from a person, a piped stream, or one of these
explicit modes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Literal, get_args

from soong_agent.ports.approval import (
    ApprovalRequest,
    Approver,
    Decision,
    PlanReview,
    review_by_decision,
)
from soong_agent.ports.errors import UsageError

ApproveMode = Literal["ask", "never", "once-per-tool", "rules-only"]
MODES: tuple[str, ...] = get_args(ApproveMode)


class NeverApprover:
    """Denies every question (and keeps every plan in planning)."""

    async def decide(self, request: ApprovalRequest) -> Decision:
        return "deny"

    async def review_plan(self, request: ApprovalRequest) -> PlanReview:
        return PlanReview(approved=False)


class OncePerToolApprover:
    """Allows the first question about each tool once; denies that tool's later ones."""

    def __init__(self) -> None:
        self._asked: set[str] = set()

    async def decide(self, request: ApprovalRequest) -> Decision:
        if request.tool in self._asked:
            return "deny"
        self._asked.add(request.tool)
        return "allow_once"

    async def review_plan(self, request: ApprovalRequest) -> PlanReview:
        return await review_by_decision(self, request)


def approver_for(
    mode: str, *, write: Callable[[str], None], clean: Callable[[str], str] | None = None
) -> Approver | None:
    """The approver of `mode` (None for ``rules-only``); UsageError for an unknown mode.
    `clean` scrubs a question's text before the terminal colours it (colour codes would hide
    a secret from the scrubber)."""
    if mode not in MODES:
        raise UsageError(f"--approve: expected one of {', '.join(MODES)}, found {mode!r}")
    if mode == "never":
        return NeverApprover()
    if mode == "once-per-tool":
        return OncePerToolApprover()
    if mode == "rules-only":
        return None
    from soong_agent.adapters.approvals.terminal import TerminalApprover

    return TerminalApprover(stdin=sys.stdin, write=write, clean=clean)
