"""Permission decisions (PERM-1, PERM-2): rules, modes and session grants; strictest wins.

`decide` weighs, for one tool call:

1. deny rules (`permissions.deny`) — any match denies, whatever the mode;
2. the mode (`permissions.mode`): ``plan`` denies everything that is not read-only, ``bypass``
   allows everything, ``accept_edits`` allows ``write`` tools, ``default`` lets
   `permissions.readonly_default` decide read-only tools and asks for the rest;
3. allow rules (`permissions.allow`) and `allow_for_session` grants, which turn an "ask" into
   "allow" but never override a deny.

A shell command line is allowed by rules or grants only when EVERY simple command in it (after
`$(…)`, pipes, lists, `eval`, `sh -c`, `xargs`, `find -exec`, wrappers like `env` …) is covered;
one denied simple command denies the whole line; a line that could not be fully analysed, or
that redirects output into a file, asks (only a plain ``Tool`` allow rule still allows it —
unless a deny rule for the tool exists that the line could hide from: then it asks, in
``bypass`` mode too).

Session grants live in memory only, per tool + normalised scope: a path's directory (``src/``),
a command's first words (``npm test``), a URL's host (``example.com``).
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.domain.permission_rules import Rule, RuleSet, url_host
from soong_agent.ports.approval import Decision, PermissionClass
from soong_agent.ports.shell import ShellAnalysis, SimpleCommand

Outcome = Literal["allow", "ask", "deny"]
PermissionMode = Literal["default", "accept_edits", "plan", "bypass"]
TargetKind = Literal["path", "command", "url"]
DecidedBy = Literal["rule", "mode", "grant", "readonly_default", "policy"]

_SHELL_OPERATORS = frozenset({"&&", "||", ";", "|", "&", ";;", "|&", "(", ")", "\n"})


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


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the policy says before asking anyone, and why.

    `reason` names what decided: the rule (``deny rule "run_command(prefix:rm)" …``), the mode
    (``mode plan is read-only …``), the grant (``allowed for this session: …``) or
    ``permissions.readonly_default``. `decided_by` says which of those it was; `rule` is the
    deciding rule's text when one rule decided.
    """

    outcome: Outcome
    reason: str
    decided_by: DecidedBy = "policy"
    rule: str | None = None


@dataclass(slots=True)
class SessionGrants:
    """`allow_for_session` answers of one session, in memory only (never on disk).

    Each grant is a tool + a normalised scope (see `path_scope`, `command_scope`, `url_scope`)
    + the kind of target it was granted for (None: legacy scope strings, compared with
    `scope_covers`). The scope ``*`` covers every call of the tool.
    """

    _grants: dict[tuple[str, str], TargetKind | None] = field(default_factory=dict)

    def add(self, tool: str, scope: str, kind: TargetKind | None = None) -> None:
        """Remember a grant (a later grant of the same tool + scope replaces the kind)."""
        self._grants[(tool, scope)] = kind

    def grant(self, request: PermissionRequest) -> tuple[str, ...]:
        """Add what an `allow_for_session` answer to `request` covers; returns the scopes."""
        scopes = session_scopes(request)
        for scope in scopes:
            self.add(request.tool, scope, request.target_kind)
        return scopes

    def covering(self, tool: str, scope: str, kind: TargetKind | None = None) -> str | None:
        """The granted scope that covers `scope` for `tool`, if any.

        For ``kind="command"``, `scope` is a command's words (``shlex`` quoted) and a grant
        covers it when its words are a word-wise prefix.
        """
        for (granted_tool, granted), granted_kind in self._grants.items():
            if granted_tool != tool:
                continue
            if granted == "*":
                return granted
            if kind is not None and granted_kind is not None and kind != granted_kind:
                continue
            if "command" in (kind, granted_kind):
                if _words_prefix(_split_scope(granted), _split_scope(scope)):
                    return granted
            elif scope_covers(granted, scope):
                return granted
        return None

    def covers_everything(self, tool: str) -> bool:
        """Whether `tool` has a ``*`` grant (every call of it)."""
        return (tool, "*") in self._grants

    def covering_command(self, tool: str, words: Sequence[str | None]) -> str | None:
        """The command grant of `tool` whose words start `words` (literal words only)."""
        for (granted_tool, granted), granted_kind in self._grants.items():
            if granted_tool != tool:
                continue
            if granted == "*":
                return granted
            if granted_kind == "command" and _words_prefix(_split_scope(granted), words):
                return granted
        return None

    def __len__(self) -> int:
        return len(self._grants)


# --- scopes ------------------------------------------------------------------------------------


def scope_covers(granted: str, scope: str) -> bool:
    """Whether a grant for `granted` covers `scope` (a directory covers everything below it).

    ``./`` (the project's top folder) covers project-relative scopes only, never absolute,
    home (``~/``) or parent (``../``) ones.
    """
    if granted in ("*", scope):
        return True
    if not granted.endswith("/"):
        return False
    if granted == "./":
        return not scope.startswith(("/", "~", "../")) and scope != ".."
    return scope.startswith(granted)


def path_scope(display_path: str) -> str:
    """The session scope of a file path: its directory with a trailing slash (``./`` for top).

    The path is normalised first, so ``src/../../etc/x`` has the scope ``../etc/``.
    """
    text = display_path.strip()
    absolute = text.startswith("/")
    norm = posixpath.normpath(text) if text else "."
    if absolute:
        norm = "/" + norm.lstrip("/")
    parent = posixpath.dirname(norm.rstrip("/")) if norm != "/" else "/"
    if parent in ("", "."):
        return "./"
    return parent if parent.endswith("/") else f"{parent}/"


def directory_scope(display_path: str) -> str:
    """The session scope of a file path (the same as `path_scope`)."""
    return path_scope(display_path)


def command_scope(words: Sequence[str | None]) -> str:
    """The session scope of a simple command: its first two literal words (``npm test``).

    One word when it is the only literal one; ``""`` when the command name is not literal (such
    a command cannot be granted). Words are shell-quoted when needed (``'my tool' run``).
    """
    literal: list[str] = []
    for word in words[:2]:
        if word is None:
            break
        literal.append(word)
    return shlex.join(literal)


def url_scope(url: str) -> str:
    """The session scope of a URL: its host, lower-case (``""`` when it has none)."""
    return url_host(url) or ""


def session_scopes(request: PermissionRequest) -> tuple[str, ...]:
    """The scopes an `allow_for_session` answer to `request` would grant (empty: none possible).

    A command line gets one scope per distinct simple command; a line that could not be fully
    analysed, or whose command name is not literal, gets none (allow once only).
    """
    kind, target = request.target_kind, request.target
    if target is None or kind is None:
        return (request.scope,)
    if kind == "path":
        return (path_scope(target),)
    if kind == "url":
        scope = url_scope(target)
        return (scope,) if scope else ()
    analysis = request.shell or fallback_analysis(target)
    if not analysis.ok or not analysis.commands:
        return ()
    scopes: list[str] = []
    for command in analysis.commands:
        scope = command_scope(command.words)
        if not scope:
            return ()
        if scope not in scopes:
            scopes.append(scope)
    return tuple(scopes)


def describe_scope(tool: str, scope: str, kind: TargetKind | None = None) -> str:
    """The sentence the prompt shows for what an `allow_for_session` grant will cover."""
    return describe_scopes(tool, (scope,), kind)


def describe_scopes(tool: str, scopes: Sequence[str], kind: TargetKind | None = None) -> str:
    """`describe_scope` for several scopes (one per simple command of a command line)."""
    tail = ", for the rest of this session"
    if not scopes:
        return f"nothing: {tool} cannot be allowed for the session here (allow once instead)"
    if "*" in scopes:
        return f"every {tool} call for the rest of this session"
    if kind == "command":
        quoted = " or ".join(f'"{scope}"' for scope in scopes)
        return f"{tool} for commands starting with {quoted}{tail}"
    if kind == "path" or all(scope.endswith("/") for scope in scopes):
        places = " and ".join(
            "the project's top folder" if scope == "./" else scope for scope in scopes
        )
        return f"{tool} on any file in {places} and below{tail}"
    return f"{tool} on {' and '.join(scopes)}{tail}"


# --- rules -------------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _parsed(allow: tuple[str, ...], deny: tuple[str, ...]) -> RuleSet:
    return RuleSet.parse(allow, deny)


def rules_for(policy: PermissionsConfig) -> RuleSet:
    """The parsed allow/deny rules of `policy` (cached; config validation rejects bad ones)."""
    return _parsed(tuple(policy.allow), tuple(policy.deny))


def fallback_analysis(command_line: str) -> ShellAnalysis:
    """A rough split of a command line when no `ShellAnalyzer` looked at it.

    It only serves deny rules (``rm`` after ``&&`` is still seen); it is never `ok`, so
    ``prefix:`` allow rules and grants do not allow the line.
    """
    problem = "the command line was not analysed by a shell parser"
    try:
        lexer = shlex.shlex(command_line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
    except ValueError as exc:
        return ShellAnalysis((), ok=False, problems=(problem, str(exc)))
    commands: list[SimpleCommand] = []
    current: list[str | None] = []
    for token in tokens:
        if token in _SHELL_OPERATORS or set(token) <= set("&|;()<>"):
            if current:
                commands.append(SimpleCommand(tuple(current)))
            current = []
            continue
        current.append(token)
    if current:
        commands.append(SimpleCommand(tuple(current)))
    return ShellAnalysis(tuple(commands), ok=False, problems=(problem,))


def show_command(command: SimpleCommand) -> str:
    """A simple command as text for reasons (non-literal words shown as ``…``)."""
    return " ".join("…" if word is None else shlex.quote(word) for word in command.words)


# --- decide ------------------------------------------------------------------------------------


def decide(
    request: PermissionRequest,
    *,
    policy: PermissionsConfig,
    grants: SessionGrants,
    mode: PermissionMode | None = None,
    rules: RuleSet | None = None,
    project_root: str | None = None,
    home: str | None = None,
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
    """
    active: PermissionMode = mode if mode is not None else policy.mode
    ruleset = rules if rules is not None else rules_for(policy)
    deny = [rule for rule in ruleset.deny if rule.applies_to(request.tool)]
    allow = [rule for rule in ruleset.allow if rule.applies_to(request.tool)]
    analysis: ShellAnalysis | None = None
    if request.target_kind == "command" and request.target is not None:
        analysis = request.shell or fallback_analysis(request.target)

    denied = _denied(request, deny, analysis, project_root, home)
    if denied is not None:
        return denied
    blind = _deny_blind_spot(deny, analysis) if analysis is not None else None

    cls = request.permission_class
    if active == "bypass":
        if blind is not None:
            return Verdict("ask", f"mode bypass, but {blind}", "mode")
        return Verdict("allow", "mode bypass allows every call no deny rule forbids", "mode")
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
        return _command_allowed(request, allow, grants, analysis, blind, base, project_root, home)
    return _target_allowed(request, allow, grants, base, project_root, home)


def _denied(
    request: PermissionRequest,
    deny: Sequence[Rule],
    analysis: ShellAnalysis | None,
    project_root: str | None,
    home: str | None,
) -> Verdict | None:
    for rule in deny:
        detail = _rule_hit(request, rule, analysis, project_root, home, loose=True)
        if detail is not None:
            return Verdict("deny", f'deny rule "{rule.text}"{detail}', "rule", rule.text)
    return None


def _deny_blind_spot(deny: Sequence[Rule], analysis: ShellAnalysis) -> str | None:
    """Why the deny rules cannot be checked on a command line (None: they can).

    A line that was not fully understood may hide a command a ``prefix:`` deny rule names; a
    redirection to a target that is not literal (``> $F``) may hit a path a deny rule names.
    """
    prefix = next((rule for rule in deny if rule.kind == "prefix"), None)
    if prefix is not None and not analysis.ok:
        problems = "; ".join(analysis.problems) or "it could not be parsed"
        return f'deny rule "{prefix.text}" cannot be checked ({problems})'
    paths = next((rule for rule in deny if rule.kind == "path"), None)
    if paths is not None and any("?" in command.writes_to for command in analysis.commands):
        return f'deny rule "{paths.text}" cannot be checked (a redirection target is not literal)'
    return None


def _rule_hit(
    request: PermissionRequest,
    rule: Rule,
    analysis: ShellAnalysis | None,
    project_root: str | None,
    home: str | None,
    *,
    loose: bool,
) -> str | None:
    """Whether `rule` matches the request: None if not, else a detail for the reason."""
    if rule.kind == "any":
        return ""
    target, kind = request.target, request.target_kind
    if target is None:
        return None
    if kind == "path" and rule.matches_path(target, project_root=project_root, home=home):
        return f" matches {target}"
    if kind == "url" and rule.matches_url(target):
        return f" matches {url_host(target)}"
    if kind == "command" and analysis is not None:
        for command in analysis.commands:
            if rule.matches_command(command.words, loose_name=loose):
                return f' matches "{show_command(command)}"'
            for written in command.writes_to:
                if rule.matches_path(written, project_root=project_root, home=home):
                    return f" matches the redirection to {written}"
    return None


def _target_allowed(
    request: PermissionRequest,
    allow: Sequence[Rule],
    grants: SessionGrants,
    base: str,
    project_root: str | None,
    home: str | None,
) -> Verdict:
    for rule in allow:
        detail = _rule_hit(request, rule, None, project_root, home, loose=False)
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
    project_root: str | None,
    home: str | None,
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
    path_rules = [rule for rule in allow if rule.kind == "path"]
    labels: list[str] = []
    rule_texts: set[str] = set()
    by_grant = False
    for command in analysis.commands:
        shown = show_command(command)
        for written in command.writes_to:
            if not any(
                rule.matches_path(written, project_root=project_root, home=home)
                for rule in path_rules
            ):
                return Verdict("ask", f'{base}: "{shown}" writes to {written}')
        hit = next(
            (r for r in allow if r.kind == "prefix" and r.matches_command(command.words)), None
        )
        if hit is not None:
            label = f'allow rule "{hit.text}"'
            rule_texts.add(hit.text)
        else:
            granted = grants.covering_command(tool, command.words)
            if granted is None:
                return Verdict(
                    "ask", f'{base}: "{shown}" is not covered by an allow rule or a session grant'
                )
            label = f"allowed for this session: {describe_scope(tool, granted, 'command')}"
            by_grant = True
        if label not in labels:
            labels.append(label)
    only_rule = next(iter(rule_texts)) if len(rule_texts) == 1 and not by_grant else None
    return Verdict(
        "allow",
        "every command is allowed: " + "; ".join(labels),
        "grant" if by_grant else "rule",
        only_rule,
    )


def _split_scope(scope: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(scope))
    except ValueError:
        return (scope,)


def _words_prefix(prefix: Sequence[str | None], words: Sequence[str | None]) -> bool:
    if not prefix or len(words) < len(prefix):
        return False
    return all(p is not None and p == w for p, w in zip(prefix, words, strict=False))


def without_approver(policy: PermissionsConfig) -> tuple[Decision, str]:
    """The decision when a call needs approval and nobody can be asked."""
    if policy.write_without_callback == "allow":
        return "allow_once", "no approval callback; permissions.write_without_callback = 'allow'"
    return "deny", "no approval callback; permissions.write_without_callback = 'deny'"
