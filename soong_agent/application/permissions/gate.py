"""Decides whether one tool call may run (PERM-1…4, SBX-1 for command path arguments).

The order: the sandbox first (`command_review`: a command naming a sensitive or forbidden path
is refused, whatever the rules say), then the domain's policy (deny rules, mode, allow rules,
session grants), then the approver when the policy asks. A write to a protected path (the
write tools' target, a command's redirection or a writing command's argument, symlinks
followed) and a command line the sandbox could not fully place ask in every mode but bypass,
even when the mode or a rule would allow them; such an answer is never remembered for the
session, and with nobody to ask the call is denied whatever `write_without_callback` says.
The result is the approval port's `Decision`, reached once here and acted on as it is by the
tool pipeline; every decision is reported with its reason. A session in plan mode (PLAN-1,
`plan_mode.PlanModes`) is decided in mode ``plan``: read-only tools and the plan tools only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import assert_never

from pydantic import BaseModel

from soong_agent.application.hooks import RunHooks
from soong_agent.application.permissions.approval_detail import approval_detail
from soong_agent.application.permissions.command_review import (
    CommandReview,
    review_command,
    sandbox_problem,
)
from soong_agent.application.permissions.plan_mode import PLAN_TOOL_NAMES, PlanModes
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.tools.base import Tool, ToolContext
from soong_agent.domain import permissions
from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.domain.permissions.protected import ProtectedPaths, protected_reason
from soong_agent.ports.approval import ApprovalRequest, Approver, Decision
from soong_agent.ports.errors import SandboxViolation, ToolInputError
from soong_agent.ports.events import PermissionAsked, PermissionDecided, PermissionSuggestion
from soong_agent.ports.filesystem import FileSystem
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.ports.shell import ShellAnalyzer

__all__ = ["PermissionGate", "Ruling", "sandbox_problem", "target_of"]

WRITING_CLASSES = frozenset({"write", "exec"})


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
    values = args.__dict__  # the fields' values (read only here), then extras if any
    extra = args.__pydantic_extra__
    if extra:
        values = {**values, **extra}
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


def _runs_command(tool: Tool, args: BaseModel) -> bool:
    """Whether `target_of` would find a command line in the call (the sandbox reviews it)."""
    if tool.target_field is not None and tool.target_kind is not None:
        return tool.target_kind == "command"
    command = args.__dict__.get("command")
    if command is None and args.__pydantic_extra__:
        command = args.__pydantic_extra__.get("command")
    return isinstance(command, str)


_NO_REVIEW = CommandReview()
"""What a call that runs no command line gets (frozen: shared)."""


class PermissionGate:
    """The permission decision for each call of one session's runs."""

    def __init__(
        self,
        *,
        approver: Approver | None,
        policy: PermissionsConfig,
        grants: permissions.SessionGrants,
        analyzer: ShellAnalyzer | None = None,
        hooks: RunHooks | None = None,
        plan_mode: PlanModes | None = None,
    ) -> None:
        self._hooks = hooks
        self._plan_mode = plan_mode
        self._approver = approver
        self._policy = policy
        self._rules = permissions.rules_for(policy)  # parsed once per gate, not per call
        self._grants = grants
        self._analyzer = analyzer
        self._unseen: dict[str, str] = {}  # see `_unseen_reason` ("": ask the policy each time)

    @property
    def read_only_unasked(self) -> bool:
        """Whether read-only calls run without asking (so a batch of them may run at once)."""
        return self._policy.readonly_default == "allow"

    async def check(
        self, call: ToolCallBlock, tool: Tool, args: BaseModel, ctx: ToolContext, rec: RunRecorder
    ) -> Ruling:
        """The decision for this call, the one-line summary of what it does, and the reason."""
        ruling = self.allowed_unseen(call, tool, args, ctx, rec)
        if ruling is not None:
            return ruling
        scope, summary = tool.describe(args, ctx)
        kind, target = target_of(args, ctx.fs, tool)
        shell = None
        if kind == "command" and target is not None and self._analyzer is not None:
            shell = self._analyzer.analyze(target)
        request = permissions.PermissionRequest(
            tool.name, tool.permission_class, scope, target=target, target_kind=kind, shell=shell
        )
        decision, reason = await self._decide(call, tool, args, request, summary, ctx, rec)
        rec.event(
            PermissionDecided, call_id=call.id, tool=tool.name, decision=decision, reason=reason
        )
        if decision == "deny" and self._hooks is not None:
            await self._hooks.permission_denied(rec, tool=tool.name, call_id=call.id, reason=reason)
        return Ruling(decision, summary, reason)

    def allowed_unseen(
        self, call: ToolCallBlock, tool: Tool, args: BaseModel, ctx: ToolContext, rec: RunRecorder
    ) -> Ruling | None:
        """`check`'s ruling, reported, when every call of `tool` is allowed whatever its
        arguments (see `_unseen_reason`); None when the call must be looked at (`check`)."""
        reason = self._unseen_reason(tool, args, ctx)
        if reason is None:
            return None
        rec.event(
            PermissionDecided, call_id=call.id, tool=tool.name, decision="allow_once", reason=reason
        )
        return Ruling("allow_once", "", reason)

    def _unseen_reason(self, tool: Tool, args: BaseModel, ctx: ToolContext) -> str | None:
        """The policy's reason when every call of `tool` is allowed whatever its arguments (a
        read-only tool that runs no command line, ``readonly_default = "allow"``, no deny rule
        about the tool, outside plan mode and bypass), so that it need not be described or
        looked at: the verdict is the domain's, reached once per tool and kept. None otherwise.
        """
        if tool.permission_class != "read_only":
            return None
        reason = self._unseen.get(tool.name)
        if reason is None:
            policy = self._policy
            if (
                policy.readonly_default != "allow"
                or policy.mode in ("bypass", "plan")
                or any(rule.applies_to(tool.name) for rule in self._rules.deny)
            ):
                reason = ""
            else:
                verdict = permissions.decide(
                    permissions.PermissionRequest(tool.name, "read_only", "*"),
                    policy=self._policy,
                    rules=self._rules,
                    grants=self._grants,
                )
                reason = verdict.reason if verdict.outcome == "allow" else ""
            self._unseen[tool.name] = reason
        if not reason or _runs_command(tool, args):
            return None
        if self._plan_mode is not None and self._plan_mode.active(ctx.session_id):
            return None
        return reason

    async def _decide(
        self,
        call: ToolCallBlock,
        tool: Tool,
        args: BaseModel,
        request: permissions.PermissionRequest,
        summary: str,
        ctx: ToolContext,
        rec: RunRecorder,
    ) -> tuple[Decision, str]:
        review = _NO_REVIEW
        if request.shell is not None:
            review = review_command(
                request.shell,
                ctx.fs,
                request.target or "",
                protected=self._protected(ctx) if self._guards_protected else None,
            )
            if review.problem is not None:
                return "deny", f"sandbox: {review.problem}"
        planning = self._plan_mode is not None and self._plan_mode.active(ctx.session_id)
        verdict = permissions.decide(
            request,
            policy=self._policy,
            rules=self._rules,
            grants=self._grants,
            project_root=ctx.fs.root,
            home=ctx.fs.home,
            mode="plan" if planning else None,
            plan_tools=PLAN_TOOL_NAMES,
        )
        outcome = verdict.outcome
        if outcome == "deny":
            return "deny", verdict.reason
        forced = self._must_ask(tool, request, review, ctx)
        if forced or outcome == "ask":
            said = await self._hook_answer(call, tool, args, summary, rec)
            if said is not None:
                return said
        if forced:
            why = "; ".join(forced)
            if self._approver is None:  # whatever write_without_callback says: never silently
                return "deny", f"no approval callback, and this call must be asked about: {why}"
            return await self._ask(
                self._approver,
                call,
                tool,
                args,
                ctx,
                request,
                f"{summary} [{why}]",
                rec,
                forced=why,
            )
        match outcome:
            case "allow":
                return "allow_once", verdict.reason
            case "ask":
                if self._approver is None:
                    return permissions.without_approver(self._policy)
                return await self._ask(self._approver, call, tool, args, ctx, request, summary, rec)
            case _:
                assert_never(outcome)

    async def _hook_answer(
        self, call: ToolCallBlock, tool: Tool, args: BaseModel, summary: str, rec: RunRecorder
    ) -> tuple[Decision, str] | None:
        """A permission_request hook's answer to a call that would be asked about (None: no
        hook answered, the user is asked as usual)."""
        if self._hooks is None:
            return None
        said = await self._hooks.permission_request(
            rec,
            tool=tool.name,
            call_id=call.id,
            arguments=args.model_dump(mode="json"),
            message=summary,
        )
        if said is None:
            return None
        answer, why = said
        because = f": {why}" if why else ""
        if answer == "allow":
            return "allow_once", f"allowed by a permission_request hook{because}"
        return "deny", f"denied by a permission_request hook{because}"

    def _learn(self, tool: Tool, request: permissions.PermissionRequest, rec: RunRecorder) -> None:
        """Permission learning (seed 002): after `SUGGEST_AFTER` approvals of calls one rule
        would allow, suggest that rule once (an event; the CLI prints it as a hint)."""
        rule = permissions.suggested_rule(tool.name, request)
        if rule is None:
            return
        if self._grants.approved(rule) == permissions.SUGGEST_AFTER:
            rec.event(
                PermissionSuggestion, tool=tool.name, rule=rule, approvals=permissions.SUGGEST_AFTER
            )

    @property
    def _guards_protected(self) -> bool:
        return self._policy.mode != "bypass" and bool(self._policy.protected_paths)

    def _protected(self, ctx: ToolContext) -> ProtectedPaths:
        fs = ctx.fs

        def resolve(path: str) -> str:
            try:
                return fs.path_facts(path).resolved
            except (OSError, ValueError, ToolInputError):
                return path

        return ProtectedPaths(
            self._policy.protected_paths, project=fs.root, home=fs.home, resolve=resolve
        )

    def _must_ask(
        self,
        tool: Tool,
        request: permissions.PermissionRequest,
        review: CommandReview,
        ctx: ToolContext,
    ) -> list[str]:
        """Why this call asks whatever the mode, rules and grants say (nothing in bypass)."""
        if self._policy.mode == "bypass":
            return []
        reasons = [*review.protected, *review.doubts]
        target = request.target
        writes = tool.permission_class in WRITING_CLASSES
        if request.target_kind == "path" and target is not None and writes:
            reasons += self._protected_target(target, ctx)
        return list(dict.fromkeys(reasons)) if reasons else reasons

    def _protected_target(self, target: str, ctx: ToolContext) -> list[str]:
        """The reason a write tool's target is protected, if it is (and may be written)."""
        if not self._guards_protected:
            return []
        try:
            facts = ctx.fs.path_facts(target)
            ctx.fs.check_write(target)
        except (SandboxViolation, OSError, ValueError, ToolInputError):
            return []  # the sandbox refuses it when the tool runs: nothing to ask
        entry = self._protected(ctx).entry_for(facts.lexical, facts.resolved)
        if entry is None:
            return []
        return [protected_reason(ctx.fs.display_path(target), entry)]

    async def _ask(
        self,
        approver: Approver,
        call: ToolCallBlock,
        tool: Tool,
        args: BaseModel,
        ctx: ToolContext,
        request: permissions.PermissionRequest,
        summary: str,
        rec: RunRecorder,
        *,
        forced: str | None = None,
    ) -> tuple[Decision, str]:
        enabled = self._policy.allow_for_session_enabled and forced is None
        scopes = permissions.session_scopes(request) if enabled else ()
        if forced is not None:
            covers = "nothing (this call asks every time: it touches what always asks)"
        elif enabled:
            covers = permissions.describe_scopes(tool.name, scopes, request.target_kind)
        else:
            covers = "nothing (allow for session is disabled in permissions)"
        rec.event(
            PermissionAsked, call_id=call.id, tool=tool.name, summary=summary, session_scope=covers
        )
        if self._hooks is not None:
            await self._hooks.notification(
                rec, f"soong-agent asks to approve {tool.name}: {summary}"
            )
        command = request.target if request.target_kind == "command" else None
        detail = await approval_detail(
            tool, args, ctx, summary=summary, command=command, shell=request.shell
        )
        answer = await approver.decide(
            ApprovalRequest(
                tool=tool.name,
                call_id=call.id,
                permission_class=tool.permission_class,
                summary=summary,
                session_scope=covers,
                detail=detail,
            )
        )
        match answer:
            case "allow_for_session":
                if not scopes:
                    return "allow_once", f"user allowed it; {covers}"
                self._grants.grant(request)
                return "allow_for_session", f"user allowed it for this session ({covers})"
            case "allow_once":
                if forced is not None:
                    return "allow_once", f"user allowed it once ({forced})"
                self._learn(tool, request, rec)
                return "allow_once", "user allowed it once"
            case "deny":
                if forced is not None:
                    return "deny", f"user denied it ({forced})"
                return "deny", "user denied it"
            case _:
                assert_never(answer)
