"""Adapts an SDK approval callback (sync or async) to the Approver port."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import get_args

from soong_agent.ports.approval import ApprovalRequest, Decision, PlanReview

ApprovalCallback = Callable[
    [ApprovalRequest],
    "Decision | tuple[Decision, str] | Awaitable[Decision | tuple[Decision, str]]",
]
"""Answers a request with a decision; for a plan (`review_plan`) also `("deny", "note")`."""
_DECISIONS: dict[str, Decision] = {decision: decision for decision in get_args(Decision)}


def as_decision(answer: object) -> Decision:
    """The decision a callback's answer stands for: `True` is allow once, a decision string
    itself, anything else deny."""
    if answer is True:  # a yes/no callback: yes means this call only
        return "allow_once"
    if isinstance(answer, str):
        return _DECISIONS.get(answer, "deny")
    return "deny"


class CallbackApprover:
    """Calls the user's function; `True` means allow once, anything not a decision means deny.

    An exception raised by the callback propagates; the tool pipeline then does not run the
    call and reports the failure to the model and as an error event.
    """

    def __init__(self, callback: ApprovalCallback) -> None:
        self._callback = callback

    async def decide(self, request: ApprovalRequest) -> Decision:
        answer: object = self._callback(request)
        if inspect.isawaitable(answer):
            answer = await answer
        return as_decision(answer)

    async def review_plan(self, request: ApprovalRequest) -> PlanReview:
        """The callback reviews a plan like a call: an allow approves it; a deny, or a
        ``("deny", "note")`` pair, keeps planning (with the note for the model)."""
        answer: object = self._callback(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], str):
            decision, note = as_decision(answer[0]), answer[1].strip()
            return PlanReview(approved=decision != "deny", note="" if decision != "deny" else note)
        return PlanReview(approved=as_decision(answer) != "deny")
