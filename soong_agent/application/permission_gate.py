"""Decides whether one tool call may run (PERM-1…3, SBX-1 for command path arguments).

The order: the sandbox first (a command naming a sensitive or forbidden path is refused, whatever
the rules say), then the domain's policy (deny rules, mode, allow rules, session grants), then
the approver when the policy asks. Every decision is reported with its reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from soong_agent.application.recorder import RunRecorder
from soong_agent.application.tools.base import Tool, ToolContext
from soong_agent.domain import permissions
from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.ports.approval import ApprovalRequest, Approver, Decision
from soong_agent.ports.errors import SandboxViolation
from soong_agent.ports.events import PermissionAsked, PermissionDecided
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.ports.shell import ShellAnalysis, ShellAnalyzer

_GLOB_CHARS = frozenset("*?[")


def target_of(args: Any, ctx: ToolContext) -> tuple[permissions.TargetKind | None, str | None]:
    """What a call acts on, for path / command / URL rules: read from its arguments."""
    fields = getattr(type(args), "model_fields", None) or {}  # no getattr misses: they raise
    if "command" in fields and isinstance(args.command, str):
        return "command", args.command
    if "url" in fields and isinstance(args.url, str):
        return "url", args.url
    if "path" in fields and isinstance(args.path, str):
        return "path", ctx.fs.display_path(args.path)
    return None, None


def _path_like(word: str) -> str | None:
    if word.startswith("-"):
        _, eq, value = word.partition("=")
        return _path_like(value) if eq and value else None
    if "/" in word or word.startswith((".", "~")):
        return word
    return None


def sandbox_problem(analysis: ShellAnalysis, ctx: ToolContext) -> str | None:
    """Why a command line breaks the path policy: a literal path argument that may not be read,
    or a redirection into a file that may not be written. None when it does not."""
    check_read = getattr(ctx.fs, "check_read", None)
    home = str(Path.home())
    for command in analysis.commands:
        for word in command.words[1:]:
            path = _path_like(word) if word else None
            if path is None or check_read is None or _GLOB_CHARS & set(path):
                continue
            if path.startswith("~"):
                path = home + path[1:]
            try:
                check_read(path)
            except SandboxViolation as exc:
                return str(exc)
            except (OSError, ValueError):
                continue  # a path that does not exist is not a leak
        for target in command.writes_to:
            if target in ("?", "/dev/null", "/dev/stdout", "/dev/stderr"):
                continue
            try:
                ctx.fs.check_write(home + target[1:] if target.startswith("~") else target)
            except SandboxViolation as exc:
                return str(exc)
    return None


class PermissionGate:
    """The permission decision for each call of one session's runs."""

    def __init__(
        self,
        *,
        approver: Approver | None,
        policy: PermissionsConfig,
        grants: permissions.SessionGrants,
        analyzer: ShellAnalyzer | None = None,
    ) -> None:
        self._approver = approver
        self._policy = policy
        self._grants = grants
        self._analyzer = analyzer
        self._home = str(Path.home())

    async def check(
        self, call: ToolCallBlock, tool: Tool, args: Any, ctx: ToolContext, rec: RunRecorder
    ) -> tuple[Decision, str, str]:
        """The decision for this call, the one-line summary of what it does, and the reason."""
        scope, summary = tool.describe(args, ctx)
        kind, target = target_of(args, ctx)
        shell = None
        if kind == "command" and target is not None and self._analyzer is not None:
            shell = self._analyzer.analyze(target)
        request = permissions.PermissionRequest(
            tool.name, tool.permission_class, scope, target=target, target_kind=kind, shell=shell
        )
        decision, reason = await self._decide(call, tool, request, summary, ctx, rec)
        rec.event(
            PermissionDecided, call_id=call.id, tool=tool.name, decision=decision, reason=reason
        )
        return decision, summary, reason

    async def _decide(
        self,
        call: ToolCallBlock,
        tool: Tool,
        request: permissions.PermissionRequest,
        summary: str,
        ctx: ToolContext,
        rec: RunRecorder,
    ) -> tuple[Decision, str]:
        if request.shell is not None:
            problem = sandbox_problem(request.shell, ctx)
            if problem is not None:
                return "deny", f"sandbox: {problem}"
        verdict = permissions.decide(
            request,
            policy=self._policy,
            grants=self._grants,
            project_root=ctx.fs.root,
            home=self._home,
        )
        if verdict.outcome == "allow":
            return "allow_once", verdict.reason
        if verdict.outcome == "deny":
            return "deny", verdict.reason
        if self._approver is None:
            return permissions.without_approver(self._policy)
        return await self._ask(call, tool, request, summary, rec)

    async def _ask(
        self,
        call: ToolCallBlock,
        tool: Tool,
        request: permissions.PermissionRequest,
        summary: str,
        rec: RunRecorder,
    ) -> tuple[Decision, str]:
        assert self._approver is not None
        scopes = (
            permissions.session_scopes(request) if self._policy.allow_for_session_enabled else ()
        )
        covers = (
            permissions.describe_scopes(tool.name, scopes, request.target_kind)
            if self._policy.allow_for_session_enabled
            else "nothing (allow for session is disabled in permissions)"
        )
        rec.event(
            PermissionAsked, call_id=call.id, tool=tool.name, summary=summary, session_scope=covers
        )
        answer = await self._approver.decide(
            ApprovalRequest(
                tool=tool.name,
                call_id=call.id,
                permission_class=tool.permission_class,
                summary=summary,
                session_scope=covers,
            )
        )
        if answer == "allow_for_session":
            if not scopes:
                return "allow_once", f"user allowed it; {covers}"
            self._grants.grant(request)
            return answer, f"user allowed it for this session ({covers})"
        if answer == "allow_once":
            return answer, "user allowed it once"
        return "deny", "user denied it"
