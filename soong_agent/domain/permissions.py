"""Permission decisions (PERM-1): read-only allowed, effects asked, session grants remembered."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Literal

from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.ports.approval import Decision, PermissionClass

Outcome = Literal["allow", "ask", "deny"]


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """One tool call as the permission policy sees it.

    `scope` is the normalised target an `allow_for_session` grant would cover: a directory for
    file writes (``src/``), the tool itself (``*``) when the tool has no narrower target.
    """

    tool: str
    permission_class: PermissionClass
    scope: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the policy says before asking anyone, and why."""

    outcome: Outcome
    reason: str


@dataclass(slots=True)
class SessionGrants:
    """`allow_for_session` answers of one session, in memory only (never on disk)."""

    _grants: set[tuple[str, str]] = field(default_factory=set)

    def add(self, tool: str, scope: str) -> None:
        self._grants.add((tool, scope))

    def covering(self, tool: str, scope: str) -> str | None:
        """The granted scope that covers `scope` for `tool`, if any."""
        for granted_tool, granted in self._grants:
            if granted_tool == tool and scope_covers(granted, scope):
                return granted
        return None

    def __len__(self) -> int:
        return len(self._grants)


def scope_covers(granted: str, scope: str) -> bool:
    """Whether a grant for `granted` covers `scope` (a directory covers everything below it)."""
    if granted in ("*", scope):
        return True
    if granted.endswith("/"):
        return scope.startswith(granted) or granted == "./"
    return False


def directory_scope(display_path: str) -> str:
    """The session scope of a file path: its directory, with a trailing slash (``./`` for top)."""
    parent = posixpath.dirname(display_path.rstrip("/"))
    return f"{parent}/" if parent else "./"


def describe_scope(tool: str, scope: str) -> str:
    """How the prompt tells the user what an `allow_for_session` grant covers."""
    if scope == "*":
        return f"every {tool} call for the rest of this session"
    if scope.endswith("/"):
        where = "the project's top folder and below" if scope == "./" else f"{scope} and below"
        return f"{tool} on any file in {where}, for the rest of this session"
    return f"{tool} on {scope}, for the rest of this session"


def decide(
    request: PermissionRequest, *, policy: PermissionsConfig, grants: SessionGrants
) -> Verdict:
    """The policy's verdict for one request, before anyone is asked."""
    if request.permission_class == "read_only":
        default = policy.readonly_default
        return Verdict(default, f"read-only tool; permissions.readonly_default = {default!r}")
    granted = grants.covering(request.tool, request.scope)
    if granted is not None:
        return Verdict(
            "allow", f"allowed for this session ({describe_scope(request.tool, granted)})"
        )
    return Verdict("ask", f"{request.permission_class} tool needs approval")


def without_approver(policy: PermissionsConfig) -> tuple[Decision, str]:
    """The decision when a call needs approval and nobody can be asked."""
    if policy.write_without_callback == "allow":
        return "allow_once", "no approval callback; permissions.write_without_callback = 'allow'"
    return "deny", "no approval callback; permissions.write_without_callback = 'deny'"
