"""Decides whether one tool call may run (PERM-1…3, SBX-1 for command path arguments).

The order: the sandbox first (a command naming a sensitive or forbidden path is refused, whatever
the rules say), then the domain's policy (deny rules, mode, allow rules, session grants), then
the approver when the policy asks. Every decision is reported with its reason.
"""

from __future__ import annotations

import glob as globlib
import itertools
import os
import posixpath
import re
from collections.abc import Sequence
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


_PROC = re.compile(r"(?:^|[\s=:(<>|;&`$])/+proc(?:/|\s|$)")
_ALWAYS_RECURSIVE = frozenset({"rg", "ag", "ack", "tar", "zip", "7z", "bsdtar"})
_RECURSIVE_WITH_FLAG = {
    "grep": ("-r", "-R", "--recursive", "--dereference-recursive", "--directories=recurse"),
    "egrep": ("-r", "-R", "--recursive"),
    "fgrep": ("-r", "-R", "--recursive"),
    "cp": ("-r", "-R", "-a", "--recursive", "--archive"),
    "rsync": ("-r", "-a", "--recursive", "--archive"),
    "scp": ("-r",),
    "find": ("-exec", "-execdir", "-ok", "-okdir", "-fprint", "-fprintf"),
}


def _reads_recursively(words: Sequence[str | None]) -> bool:
    name = posixpath.basename(words[0] or "")
    if name in _ALWAYS_RECURSIVE:
        return True
    flags = _RECURSIVE_WITH_FLAG.get(name)
    if flags is None:
        return False
    if name == "find" and any(w == "-maxdepth" and n == "0" for w, n in itertools.pairwise(words)):
        return False  # only the start points themselves, which are checked as arguments
    for word in words[1:]:
        if word is None:
            continue
        if word in flags:
            return True
        short = word.startswith("-") and not word.startswith("--") and name != "find"
        if short and any(f"-{letter}" in flags for letter in word[1:]):
            return True
    return False


class _Checker:
    """The path policy applied to one command line's words, redirections and globs."""

    def __init__(self, ctx: ToolContext) -> None:
        self._ctx = ctx
        self._read = getattr(ctx.fs, "check_read", None)
        self._below = getattr(ctx.fs, "sensitive_below", None)
        self._home = str(Path.home())

    def _expand(self, path: str) -> str:
        return self._home + path[1:] if path.startswith("~") else path

    def read(self, path: str) -> str | None:
        if self._read is None:
            return None
        path = self._expand(path)
        candidates = [path]
        if _GLOB_CHARS & set(path):  # the shell expands it: check what it would name
            base = path if path.startswith("/") else posixpath.join(self._ctx.fs.root, path)
            candidates = globlib.glob(base, include_hidden=True)[:1000]
        for candidate in candidates:
            try:
                self._read(candidate)
            except SandboxViolation as exc:
                return str(exc)
            except (OSError, ValueError):
                continue  # a path that does not exist is not a leak
        return None

    def write(self, target: str) -> str | None:
        if target in ("?", "/dev/null", "/dev/stdout", "/dev/stderr"):
            return None
        try:
            self._ctx.fs.check_write(self._expand(target))
        except SandboxViolation as exc:
            return str(exc)
        return None

    def recursive(self, words: Sequence[str | None]) -> str | None:
        if self._below is None or not _reads_recursively(words):
            return None
        folders = [w for w in words[1:] if w and not w.startswith("-")]
        for folder in folders or ["."]:
            path = self._expand(folder)
            base = path if path.startswith("/") else posixpath.join(self._ctx.fs.root, path)
            if not os.path.isdir(base):
                continue
            found = self._below(base)
            if found is not None:
                return (
                    f"{words[0]} would read {folder} recursively, which holds the sensitive "
                    f"{found}; search with the grep/glob tools, which skip sensitive files"
                )
        return None


def sandbox_problem(analysis: ShellAnalysis, ctx: ToolContext, line: str = "") -> str | None:
    """Why a command line breaks the path policy: a literal path argument or input redirection
    that may not be read (globs expanded), a redirection into a file that may not be written, a
    recursive read of a folder holding sensitive files, or a reference to /proc (which exposes
    the agent's own environment). None when it does not."""
    if _PROC.search(line.replace('"', "").replace("'", "").replace("\\", "")):
        return "commands may not reach /proc (it exposes the environment of running processes)"
    check = _Checker(ctx)
    for command in analysis.commands:
        for word in command.words[1:]:
            path = _path_like(word) if word else None
            problem = check.read(path) if path is not None else None
            if problem is not None:
                return problem
        for source in command.reads_from:
            problem = check.read(source) if source != "?" else None
            if problem is not None:
                return problem
        for target in command.writes_to:
            problem = check.write(target)
            if problem is not None:
                return problem
        problem = check.recursive(command.words)
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
            problem = sandbox_problem(request.shell, ctx, request.target or "")
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
