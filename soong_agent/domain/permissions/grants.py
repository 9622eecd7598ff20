"""Session grants (PERM-1): what an `allow_for_session` answer covers, in memory only.

Each grant is a tool + a normalised scope: a path's directory (``src/``), a command's first
words (``npm test``; ``git status`` for ``git -C . status``; as many words as name the writing
or executing options of the call, ``find . -delete``), a URL's host (``example.com``), or ``*``
for every call of the tool. A command grant covers a later call the way a ``prefix:`` allow
rule does (`rules.prefix_covers`, PERM-4): ``find .`` does not cover ``find . -delete``.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from soong_agent.domain.permissions import programs
from soong_agent.domain.permissions.programs import UNCOVERABLE
from soong_agent.domain.permissions.request import PermissionRequest, TargetKind
from soong_agent.domain.permissions.rules import prefix_covers
from soong_agent.domain.permissions.shell import fallback_analysis
from soong_agent.domain.permissions.targets import url_host


@dataclass(slots=True)
class SessionGrants:
    """`allow_for_session` answers of one session, in memory only (never on disk).

    Each grant is a tool + a normalised scope (see `path_scope`, `command_scope`, `url_scope`)
    + the kind of target it was granted for (None: legacy scope strings, compared with
    `scope_covers`). The scope ``*`` covers every call of the tool.
    """

    _grants: dict[tuple[str, str], TargetKind | None] = field(default_factory=dict)
    _approvals: dict[str, int] = field(default_factory=dict)

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
        covers it the way a ``prefix:`` rule would (`rules.prefix_covers`).
        """
        for (granted_tool, granted), granted_kind in self._grants.items():
            if granted_tool != tool:
                continue
            if granted == "*":
                return granted
            if kind is not None and granted_kind is not None and kind != granted_kind:
                continue
            if "command" in (kind, granted_kind):
                if prefix_covers(_split_scope(granted), _split_scope(scope)):
                    return granted
            elif scope_covers(granted, scope):
                return granted
        return None

    def covers_everything(self, tool: str) -> bool:
        """Whether `tool` has a ``*`` grant (every call of it)."""
        return (tool, "*") in self._grants

    def covering_command(self, tool: str, words: Sequence[str | None]) -> str | None:
        """The command grant of `tool` that covers `words` as a ``prefix:`` rule would."""
        for (granted_tool, granted), granted_kind in self._grants.items():
            if granted_tool != tool:
                continue
            if granted == "*":
                return granted
            if granted_kind == "command" and prefix_covers(_split_scope(granted), words):
                return granted
        return None

    def __len__(self) -> int:
        return len(self._grants)

    def approved(self, rule: str) -> int:
        """Count one more "allow once" answer to a call `rule` would allow; the new count.

        The counts let the runtime suggest the rule once the user keeps approving its calls
        (permission learning); they are never written anywhere."""
        count = self._approvals.get(rule, 0) + 1
        self._approvals[rule] = count
        return count


SUGGEST_AFTER = 3
"""Approvals of calls one rule would allow before that rule is suggested (once per session)."""


def suggested_rule(tool: str, request: PermissionRequest) -> str | None:
    """The `permissions.allow` rule text that would allow calls like `request`, in the rule
    syntax (`rules.parse_rule`): ``run_command(prefix:npm test)``, ``write_file(/src/**)``,
    ``web_fetch(domain:example.com)``, or the bare tool. None when one rule cannot say it
    (several commands in one line, a path outside what a rule can name)."""
    scopes = session_scopes(request)
    if len(scopes) != 1:
        return None
    (scope,) = scopes
    if scope == "*":
        return tool
    kind = request.target_kind
    if kind == "command":
        return f"{tool}(prefix:{scope})"
    if kind == "url":
        return f"{tool}(domain:{scope})"
    if kind == "path":
        if ".." in scope.split("/"):
            return None
        if scope == "./":
            return f"{tool}(/**)"
        if scope.startswith("/"):
            return f"{tool}(/{scope}**)"
        if scope.startswith("~/"):
            return f"{tool}({scope}**)"
        return f"{tool}(/{scope}**)"
    return None


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

    Global options are left out (``git -C . status`` → ``git status``), and the scope reaches
    as far as the last writing or executing option of the call (``find . -delete``), so the
    grant covers the call it was given for and no more. One word when it is the only literal
    one; ``""`` when the command name is not literal (such a command cannot be granted). Words
    are shell-quoted when needed (``'my tool' run``).
    """
    found = programs.risks(words)
    normal = programs.normalised(words)
    form: Sequence[str | None] = words
    indices = [risk.index for risk in found]
    if normal.certain and len(normal.kept) < len(words):
        form = normal.words
        position = {raw: new for new, raw in enumerate(normal.kept)}
        indices = [position.get(index, UNCOVERABLE) for index in indices]
    literal: list[str] = []
    for word in form:
        if word is None:
            break
        literal.append(word)
    needed = max([2, *(index + 1 for index in indices if index < len(literal))])
    return shlex.join(literal[:needed])


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


def _split_scope(scope: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(scope))
    except ValueError:
        return (scope,)
