"""Adapts an SDK approval callback (sync or async) to the Approver port."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import get_args

from soong_agent.ports.approval import ApprovalRequest, Decision

ApprovalCallback = Callable[[ApprovalRequest], "Decision | Awaitable[Decision]"]
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
