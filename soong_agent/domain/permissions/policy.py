"""Permission decisions (PERM-1, PERM-2): rules, modes and session grants; strictest wins.

`decide` weighs, for one tool call:

1. deny rules (`permissions.deny`) — any match denies, whatever the mode;
2. the mode (`permissions.mode`, or the run-time plan mode, PLAN-1): ``plan`` denies everything
   that is not read-only except the plan tools the caller names (`plan_tools`), ``bypass``
   allows everything, ``accept_edits`` allows ``write`` tools, ``default`` lets
   `permissions.readonly_default` decide read-only tools and asks for the rest;
3. allow rules (`permissions.allow`) and `allow_for_session` grants, which turn an "ask" into
   "allow" but never override a deny.

A shell command line is allowed by rules or grants only when EVERY simple command in it (after
`$(…)`, pipes, lists, `eval`, `sh -c`, `xargs`, `find -exec`, wrappers like `env` …) is covered:
each simple command gets its own verdict and the strictest one decides the line (one denied
simple command denies it, one uncovered one asks). A line that could not be fully analysed, or
that redirects output into a file, asks (only a plain ``Tool`` allow rule still allows it —
unless a deny rule for the tool exists that the line could hide from: then it asks, in
``bypass`` mode too).

Rules mean what they say (PERM-4): a ``prefix:`` allow rule or grant covers a simple command
only when every writing or executing option of it lies inside the rule's words
(`programs.risks`: ``prefix:find`` never covers ``find . -delete``); deny rules match after the
program's global options are taken out (``git -C . commit``). A line hides from ``prefix:``
deny rules, and asks, when a deny rule might match a command with words that are not literal
(``git $SUB``), or when a command runs program text no analyser reads (``python -c``, awk's
``system()``, ``git -c alias.x=…``).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from soong_agent.domain.permissions import programs
from soong_agent.domain.permissions.decision import PermissionMode, Verdict, strictest
from soong_agent.domain.permissions.grants import (
    SessionGrants,
    describe_scope,
    path_scope,
    url_scope,
)
from soong_agent.domain.permissions.request import PermissionRequest
from soong_agent.domain.permissions.rules import Rule, RuleSet, uncovered_risk
from soong_agent.domain.permissions.shell import fallback_analysis, show_command
from soong_agent.domain.permissions.targets import url_host
from soong_agent.ports.approval import Decision
from soong_agent.ports.shell import ShellAnalysis, SimpleCommand

if TYPE_CHECKING:  # the config schema imports this package: no import cycle at run time
    from soong_agent.domain.config.schema import PermissionsConfig


@lru_cache(maxsize=64)
def _parsed(allow: tuple[str, ...], deny: tuple[str, ...]) -> RuleSet:
    return RuleSet.parse(allow, deny)


def rules_for(policy: PermissionsConfig) -> RuleSet:
    """The parsed allow/deny rules of `policy` (cached; config validation rejects bad ones)."""
    return _parsed(tuple(policy.allow), tuple(policy.deny))


def decide(
    request: PermissionRequest,
    *,
    policy: PermissionsConfig,
    grants: SessionGrants,
    mode: PermissionMode | None = None,
    rules: RuleSet | None = None,
    project_root: str | None = None,
    home: str | None = None,
    plan_tools: Collection[str] = (),
) -> Verdict:
    """The policy's verdict for one request, before anyone is asked (strictest wins).

    Args:
        request: the tool call.
        policy: `permissions` config (mode, rules, defaults).
        grants: this session's `allow_for_session` grants.
        mode: overrides `policy.mode` (an SDK caller's choice).
        rules: overrides the rules parsed from `policy.allow` / `policy.deny`.
        project_root: absolute project root, to compare absolute paths with project rules.
        home: the home directory, to compare paths with ``~/`` rules.
        plan_tools: the tools mode ``plan`` allows although they are not read-only (PLAN-1).
    """
    active: PermissionMode = mode if mode is not None else policy.mode
    ruleset = rules if rules is not None else rules_for(policy)
    places = _Places(project_root, home)
    deny = [rule for rule in ruleset.deny if rule.applies_to(request.tool)]
    allow = [rule for rule in ruleset.allow if rule.applies_to(request.tool)]
    analysis: ShellAnalysis | None = None
    if request.target_kind == "command" and request.target is not None:
        analysis = request.shell or fallback_analysis(request.target)

    denied = strictest(_deny_hits(request, deny, analysis, places))
    if denied is not None:
        return denied
    blind = _deny_blind_spot(deny, analysis) if analysis is not None else None

    cls = request.permission_class
    if active == "bypass":
        if blind is not None:
            return Verdict("ask", f"mode bypass, but {blind}", "mode")
        return Verdict("allow", "mode bypass allows every call no deny rule forbids", "mode")
    if active == "plan" and request.tool in plan_tools:
        return Verdict("allow", f"mode plan allows the plan tool {request.tool}", "mode")
    if active == "plan" and cls != "read_only":
        return Verdict(
            "deny", f"mode plan is read-only: {cls} tool {request.tool} is not allowed", "mode"
        )
    if cls == "read_only":
        default = policy.readonly_default
        reason = f"read-only tool; permissions.readonly_default = {default!r}"
        if default != "ask":
            return Verdict(default, reason, "readonly_default")
        base = reason
    elif active == "accept_edits" and cls == "write":
        return Verdict("allow", "mode accept_edits allows file edits", "mode")
    else:
        base = f"{cls} tool needs approval"

    if analysis is not None:
        return _command_allowed(request, allow, grants, analysis, blind, base, places)
    return _target_allowed(request, allow, grants, base, places)


class _Places:
    """Where relative and ``~/`` paths start, for matching path rules."""

    __slots__ = ("home", "project_root")

    def __init__(self, project_root: str | None, home: str | None) -> None:
        self.project_root = project_root
        self.home = home

    def matches(self, rule: Rule, path: str) -> bool:
        return rule.matches_path(path, project_root=self.project_root, home=self.home)


def _deny_hits(
    request: PermissionRequest,
    deny: Sequence[Rule],
    analysis: ShellAnalysis | None,
    places: _Places,
) -> list[Verdict]:
    """A deny verdict for every deny rule that matches the request."""
    hits: list[Verdict] = []
    for rule in deny:
        detail = _rule_hit(request, rule, analysis, places, loose=True)
        if detail is not None:
            hits.append(Verdict("deny", f'deny rule "{rule.text}"{detail}', "rule", rule.text))
    return hits


def _deny_blind_spot(deny: Sequence[Rule], analysis: ShellAnalysis) -> str | None:
    """Why the deny rules cannot be checked on a command line (None: they can).

    A line that was not fully understood may hide a command a ``prefix:`` deny rule names, and
    so may a command whose words that are not literal stand where the rule's words would be
    (``git $SUB`` for ``prefix:git commit``) or that runs program text no analyser reads
    (``python3 -c …``); a redirection to a target that is not literal (``> $F``) may hit a path
    a deny rule names.
    """
    prefix = next((rule for rule in deny if rule.kind == "prefix"), None)
    if prefix is not None and not analysis.ok:
        problems = "; ".join(analysis.problems) or "it could not be parsed"
        return f'deny rule "{prefix.text}" cannot be checked ({problems})'
    if prefix is not None:
        for command in analysis.commands:
            shown = show_command(command)
            maybe = next(
                (r for r in deny if r.kind == "prefix" and r.deny_match(command.words) == "maybe"),
                None,
            )
            if maybe is not None:
                return (
                    f'deny rule "{maybe.text}" cannot be checked ("{shown}" has words that are '
                    "not literal where the rule's words would be)"
                )
            opaque = next((risk for risk in programs.risks(command.words) if risk.opaque), None)
            if opaque is not None:
                return (
                    f'deny rule "{prefix.text}" cannot be checked ("{shown}": {opaque.reason}, '
                    "which the analyser does not read)"
                )
    paths = next((rule for rule in deny if rule.kind == "path"), None)
    if paths is not None and any("?" in command.writes_to for command in analysis.commands):
        return f'deny rule "{paths.text}" cannot be checked (a redirection target is not literal)'
    return None


def _rule_hit(
    request: PermissionRequest,
    rule: Rule,
    analysis: ShellAnalysis | None,
    places: _Places,
    *,
    loose: bool,
) -> str | None:
    """Whether `rule` matches the request: None if not, else a detail for the reason."""
    if rule.kind == "any":
        return ""
    target, kind = request.target, request.target_kind
    if target is None:
        return None
    if kind == "path" and places.matches(rule, target):
        return f" matches {target}"
    if kind == "url" and rule.matches_url(target):
        return f" matches {url_host(target)}"
    if kind == "command" and analysis is not None:
        for command in analysis.commands:
            hit = (
                rule.deny_match(command.words) == "yes"
                if loose
                else rule.covers_command(command.words)
            )
            if hit:
                return f' matches "{show_command(command)}"'
            for written in command.writes_to:
                if places.matches(rule, written):
                    return f" matches the redirection to {written}"
    return None


def _target_allowed(
    request: PermissionRequest,
    allow: Sequence[Rule],
    grants: SessionGrants,
    base: str,
    places: _Places,
) -> Verdict:
    for rule in allow:
        detail = _rule_hit(request, rule, None, places, loose=False)
        if detail is not None:
            return Verdict("allow", f'allow rule "{rule.text}"{detail}', "rule", rule.text)
    kind, target = request.target_kind, request.target
    if kind is not None and target is not None:
        scope = path_scope(target) if kind == "path" else url_scope(target)
        granted = grants.covering(request.tool, scope, kind) if scope else None
    else:
        kind, granted = None, grants.covering(request.tool, request.scope)
    if granted is not None:
        sentence = describe_scope(request.tool, granted, kind)
        return Verdict("allow", f"allowed for this session: {sentence}", "grant")
    return Verdict("ask", base, "policy")


def _command_allowed(
    request: PermissionRequest,
    allow: Sequence[Rule],
    grants: SessionGrants,
    analysis: ShellAnalysis,
    blind: str | None,
    base: str,
    places: _Places,
) -> Verdict:
    tool = request.tool
    plain = next((rule for rule in allow if rule.kind == "any"), None)
    if plain is not None:
        if blind is not None:
            return Verdict("ask", f'{base}: allow rule "{plain.text}", but {blind}')
        return Verdict("allow", f'allow rule "{plain.text}"', "rule", plain.text)
    if grants.covers_everything(tool):
        if blind is not None:
            return Verdict("ask", f"{base}: allowed for this session, but {blind}")
        return Verdict("allow", f"allowed for this session: {describe_scope(tool, '*')}", "grant")
    if not analysis.ok:
        problems = "; ".join(analysis.problems) or "it could not be parsed"
        return Verdict("ask", f"{base}: the command line is not fully understood ({problems})")
    if not analysis.commands:
        return Verdict("ask", f"{base}: no command found in the line")
    verdicts = [
        _simple_command_verdict(tool, command, allow, grants, base, places)
        for command in analysis.commands
    ]
    worst = strictest(verdicts)
    if worst is not None and worst.outcome != "allow":
        return worst
    labels = list(dict.fromkeys(verdict.reason for verdict in verdicts))
    by_grant = any(verdict.decided_by == "grant" for verdict in verdicts)
    rule_texts = {verdict.rule for verdict in verdicts if verdict.rule is not None}
    only_rule = next(iter(rule_texts)) if len(rule_texts) == 1 and not by_grant else None
    return Verdict(
        "allow",
        "every command is allowed: " + "; ".join(labels),
        "grant" if by_grant else "rule",
        only_rule,
    )


def _simple_command_verdict(
    tool: str,
    command: SimpleCommand,
    allow: Sequence[Rule],
    grants: SessionGrants,
    base: str,
    places: _Places,
) -> Verdict:
    """One simple command's verdict: allowed by a ``prefix:`` rule or a grant, else ask."""
    shown = show_command(command)
    path_rules = [rule for rule in allow if rule.kind == "path"]
    for written in command.writes_to:
        if not any(places.matches(rule, written) for rule in path_rules):
            return Verdict("ask", f'{base}: "{shown}" writes to {written}')
    prefixes = [rule for rule in allow if rule.kind == "prefix"]
    hit = next((rule for rule in prefixes if rule.covers_command(command.words)), None)
    if hit is not None:
        return Verdict("allow", f'allow rule "{hit.text}"', "rule", hit.text)
    granted = grants.covering_command(tool, command.words)
    if granted is None:
        for rule in prefixes:
            risk = uncovered_risk(rule.words, command.words)
            if risk is not None:
                return Verdict(
                    "ask",
                    f'{base}: "{shown}" is not covered: {risk.reason}, which allow rule '
                    f'"{rule.text}" does not name',
                )
        uncovered = "is not covered by an allow rule or a session grant"
        return Verdict("ask", f'{base}: "{shown}" {uncovered}')
    label = f"allowed for this session: {describe_scope(tool, granted, 'command')}"
    return Verdict("allow", label, "grant")


def without_approver(policy: PermissionsConfig) -> tuple[Decision, str]:
    """The decision when a call needs approval and nobody can be asked."""
    if policy.write_without_callback == "allow":
        return "allow_once", "no approval callback; permissions.write_without_callback = 'allow'"
    return "deny", "no approval callback; permissions.write_without_callback = 'deny'"
