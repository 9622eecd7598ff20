"""One tool call as the permission policy sees it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from soong_agent.ports.approval import PermissionClass
from soong_agent.ports.shell import ShellAnalysis

TargetKind = Literal["path", "command", "url"]


@dataclass(frozen=True, slots=True)
class PermissionRequest:
    """One tool call as the permission policy sees it.

    Attributes:
        tool: the tool's name.
        permission_class: the kind of effect the tool has.
        scope: the normalised target an `allow_for_session` grant would cover when the request
            has no `target`: a directory for file writes (``src/``), the tool itself (``*``).
        target: what the call acts on as the user sees it: a path (project-relative posix,
            absolute, or ``~/…``), a command line, or a URL.
        target_kind: which of those `target` is.
        shell: the analysis of a command line (from a `ShellAnalyzer`); without it a command is
            never allowed by ``prefix:`` rules or grants.
    """

    tool: str
    permission_class: PermissionClass
    scope: str
    target: str | None = None
    target_kind: TargetKind | None = None
    shell: ShellAnalysis | None = None
