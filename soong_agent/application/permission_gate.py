"""Decides whether one tool call may run (PERM-1…3, SBX-1 for command path arguments).

The order: the sandbox first (a command naming a sensitive or forbidden path is refused, whatever
the rules say), then the domain's policy (deny rules, mode, allow rules, session grants), then
the approver when the policy asks. The result is the approval port's `Decision`, reached once
here and acted on as it is by the tool pipeline; every decision is reported with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from pydantic import BaseModel

from soong_agent.application.recorder import RunRecorder
from soong_agent.application.tools.base import Tool, ToolContext
from soong_agent.domain import permissions
from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.domain.permissions.shell import (
    HARMLESS_WRITE_TARGETS,
    path_arguments,
    reaches_proc,
    recursive_folders,
)
from soong_agent.ports.approval import ApprovalRequest, Approver, Decision
from soong_agent.ports.errors import SandboxViolation
from soong_agent.ports.events import PermissionAsked, PermissionDecided
from soong_agent.ports.filesystem import FileSystem
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.ports.shell import ShellAnalysis, ShellAnalyzer


@dataclass(frozen=True, slots=True)
class Ruling:
    """The gate's answer for one call: the decision to act on, what the call does, and why."""

    decision: Decision
    summary: str
    reason: str


def target_of(
    args: BaseModel, fs: FileSystem, tool: Tool | None = None
) -> tuple[permissions.TargetKind | None, str | None]:
    """What a call acts on, for path / command / URL rules: the argument the tool declares
    (`Tool.target_field`), else one named `command`, `url` or `path`."""
    values = dict(args)
    if tool is not None and tool.target_field is not None and tool.target_kind is not None:
        declared = values.get(tool.target_field)
        if not isinstance(declared, str):
            return None, None
        shown = fs.display_path(declared) if tool.target_kind == "path" else declared
        return tool.target_kind, shown
    command, url, path = values.get("command"), values.get("url"), values.get("path")
    if isinstance(command, str):
        return "command", command
    if isinstance(url, str):
        return "url", url
    if isinstance(path, str):
        return "path", fs.display_path(path)
    return None, None


def _read_problem(fs: FileSystem, word: str) -> str | None:
    for candidate in fs.expand_shell_word(word):  # a glob: what the shell would name
        try:
            fs.check_read(candidate)
        except SandboxViolation as exc:
            return str(exc)
        except (OSError, ValueError):
            continue  # a path that does not exist is not a leak
    return None


def _write_problem(fs: FileSystem, target: str) -> str | None:
    if target in HARMLESS_WRITE_TARGETS:
        return None
    try:
        fs.check_write(target)
    except SandboxViolation as exc:
        return str(exc)
    return None


def _recursive_problem(fs: FileSystem, words: tuple[str | None, ...]) -> str | None:
    for folder in recursive_folders(words):
        found = fs.sensitive_below(folder)
        if found is not None:
            return (
                f"{words[0]} would read {folder} recursively, which holds the sensitive "
                f"{found}; search with the grep/glob tools, which skip sensitive files"
            )
    return None


def sandbox_problem(analysis: ShellAnalysis, fs: FileSystem, line: str = "") -> str | None:
    """Why a command line breaks the path policy: a literal path argument or input redirection
    that may not be read (globs expanded), a redirection into a file that may not be written, a
    recursive read of a folder holding sensitive files, or a reference to /proc (which exposes
    the agent's own environment). None when it does not."""
    if reaches_proc(line):
        return "commands may not reach /proc (it exposes the environment of running processes)"
    for command in analysis.commands:
        reads = [*path_arguments(command.words), *(s for s in command.reads_from if s != "?")]
        for path in reads:
            problem = _read_problem(fs, path)
            if problem is not None:
                return problem
        for target in command.writes_to:
            problem = _write_problem(fs, target)
            if problem is not None:
                return problem
        problem = _recursive_problem(fs, command.words)
        if problem is not None:
            return problem
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

    @property
    def read_only_unasked(self) -> bool:
        """Whether read-only calls run without asking (so a batch of them may run at once)."""
        return self._policy.readonly_default == "allow"

    async def check(
        self, call: ToolCallBlock, tool: Tool, args: BaseModel, ctx: ToolContext, rec: RunRecorder
    ) -> Ruling:
        """The decision for this call, the one-line summary of what it does, and the reason."""
        scope, summary = tool.describe(args, ctx)
        kind, target = target_of(args, ctx.fs, tool)
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
        return Ruling(decision, summary, reason)

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
            problem = sandbox_problem(request.shell, ctx.fs, request.target or "")
            if problem is not None:
                return "deny", f"sandbox: {problem}"
        verdict = permissions.decide(
            request,
            policy=self._policy,
            grants=self._grants,
            project_root=ctx.fs.root,
            home=ctx.fs.home,
        )
        outcome = verdict.outcome
        match outcome:
            case "allow":
                return "allow_once", verdict.reason
            case "deny":
                return "deny", verdict.reason
            case "ask":
                if self._approver is None:
                    return permissions.without_approver(self._policy)
                return await self._ask(self._approver, call, tool, request, summary, rec)
            case _:
                assert_never(outcome)

    async def _ask(
        self,
        approver: Approver,
        call: ToolCallBlock,
        tool: Tool,
        request: permissions.PermissionRequest,
        summary: str,
        rec: RunRecorder,
    ) -> tuple[Decision, str]:
        enabled = self._policy.allow_for_session_enabled
        scopes = permissions.session_scopes(request) if enabled else ()
        covers = (
            permissions.describe_scopes(tool.name, scopes, request.target_kind)
            if enabled
            else "nothing (allow for session is disabled in permissions)"
        )
        rec.event(
            PermissionAsked, call_id=call.id, tool=tool.name, summary=summary, session_scope=covers
        )
        answer = await approver.decide(
            ApprovalRequest(
                tool=tool.name,
                call_id=call.id,
                permission_class=tool.permission_class,
                summary=summary,
                session_scope=covers,
            )
        )
        match answer:
            case "allow_for_session":
                if not scopes:
                    return "allow_once", f"user allowed it; {covers}"
                self._grants.grant(request)
                return "allow_for_session", f"user allowed it for this session ({covers})"
            case "allow_once":
                return "allow_once", "user allowed it once"
            case "deny":
                return "deny", "user denied it"
            case _:
                assert_never(answer)
