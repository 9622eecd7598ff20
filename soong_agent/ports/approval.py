"""The approval port: who answers when a tool call needs the user's permission."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

Decision = Literal["allow_once", "allow_for_session", "deny"]
"""The user's answer to an approval request, and the decision a tool call runs (or not) under."""

PermissionClass = Literal["read_only", "write", "exec", "network"]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A question to the user about one tool call.

    Attributes:
        tool: the tool's name.
        call_id: the id of the tool call.
        permission_class: what kind of effect the call has.
        summary: one line saying what the call will do.
        session_scope: what an `allow_for_session` answer would cover, shown before answering.
    """

    tool: str
    call_id: str
    permission_class: PermissionClass
    summary: str
    session_scope: str


@runtime_checkable
class Approver(Protocol):
    """Answers approval requests (a terminal prompt, an SDK callback, a test double)."""

    async def decide(self, request: ApprovalRequest) -> Decision:
        """Return the user's decision; anything unclear must be answered with ``deny``."""
        ...
