"""Permission rules (PERM-2): `Tool`, `Tool(prefix:…)`, `Tool(<path glob>)`, `Tool(domain:…)`.

Rules are data: `parse_rule` turns the text of one `permissions.allow` / `permissions.deny` entry
into a `Rule`, and the `Rule.matches_*` methods say whether it covers one target. Which rule wins
is decided in `policy.decide` (the strictest, see `decision.strictest`).

Forms (``Tool`` is a tool name; ``*`` in it matches any run of characters, ``*`` alone any tool):

- ``Tool`` — every call of the tool, whatever its target.
- ``Tool(prefix:npm test)`` — commands whose literal words start with these words, word by word
  (``npm test`` covers ``npm test --watch`` but not ``npm testing``). Words may be quoted.
  Rules mean what they say (PERM-4): an allow rule never covers a call that uses a writing or
  executing option its words do not name (``prefix:find`` does not cover ``find . -delete``,
  ``prefix:git`` does not cover ``git commit``; see `programs`), and program global options are
  normalised away before matching (``prefix:git status`` covers ``git -C . status``; a deny rule
  ``prefix:git commit`` stops ``git --no-pager -c k=v commit``). A deny rule that might match a
  command with words that are not literal (``git $SUB``) cannot be checked: the line asks.
- ``Tool(domain:example.com)`` — URLs whose host is ``example.com`` or one of its subdomains
  (``*.example.com``: subdomains only, never ``example.com`` itself); see
  `targets.DomainPattern`, which ``tools.network.allowed_domains`` uses too.
  ``evil-example.com`` is not covered.
- ``Tool(<glob>)`` — paths. ``/src/**`` and ``src/**/*.py`` are relative to the project root,
  ``//etc/**`` is absolute, ``~/…`` is under the home directory. ``*`` and ``?`` stay inside one
  folder, ``**`` crosses folders, ``[abc]`` is a character class, a trailing ``/`` means
  "everything below". ``..`` is not allowed in a pattern.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from soong_agent.domain.permissions import programs
from soong_agent.domain.permissions.programs import UNCOVERABLE, Risk
from soong_agent.domain.permissions.targets import (
    GLOB_CHARS,
    DomainPattern,
    PathAnchor,
    anchored_path,
    glob_regex,
    glob_source,
    url_host,
)

RuleKind = Literal["any", "prefix", "path", "domain"]
MatchLevel = Literal["no", "maybe", "yes"]
"""How surely a deny rule matches a command: ``maybe`` when words that are not literal (or
options that cannot be read) stand where the rule's words would be."""

_TOOL = re.compile(r"^[A-Za-z0-9_*][A-Za-z0-9_.*-]*$")
_SCHEME_LIKE = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*):")
_DOMAIN = re.compile(
    r"^(\*\.)?[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*$"
)


@dataclass(frozen=True, slots=True)
class Rule:
    """One parsed permission rule.

    Attributes:
        text: the rule as written (used in reasons: ``deny rule "run_command(prefix:rm)"``).
        tool: the tool name pattern (``*`` matches any characters).
        kind: ``any`` (no argument), ``prefix``, ``path`` or ``domain``.
        words: the command words of a ``prefix`` rule.
        pattern: the glob of a ``path`` rule, relative to its anchor (no leading slash).
        anchor: where a ``path`` rule's glob starts: project root, filesystem root, home.
        domain: the host of a ``domain`` rule, lower-case.
        subdomains_only: a ``domain:*.example.com`` rule (the bare domain is not covered).
    """

    text: str
    tool: str
    kind: RuleKind
    words: tuple[str, ...] = ()
    pattern: str = ""
    anchor: PathAnchor | None = None
    domain: str = ""
    subdomains_only: bool = False
    _tool_re: re.Pattern[str] | None = field(default=None, compare=False, repr=False)
    _path_re: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def applies_to(self, tool: str) -> bool:
        """Whether the rule is about `tool` at all."""
        if self._tool_re is None:
            return self.tool == tool
        return self._tool_re.fullmatch(tool) is not None

    def matches_command(self, words: Sequence[str | None], *, loose_name: bool = False) -> bool:
        """Whether a ``prefix`` rule covers one simple command's words.

        Only literal words match. With `loose_name` (used for deny rules) the command name also
        matches by its last path part, so ``prefix:rm`` denies ``/bin/rm`` too.
        """
        if self.kind != "prefix" or len(words) < len(self.words):
            return False
        return _compare(self.words, words, loose_name=loose_name) == "yes"

    def covers_command(self, words: Sequence[str | None]) -> bool:
        """Whether a ``prefix`` allow rule covers one simple command (PERM-4).

        Its words must start the command's literal words, as written or with the program's
        global options taken out (``git -C . status``), and every writing or executing option
        of the call (`programs.risks`) must lie inside the words the rule names.
        """
        return self.kind == "prefix" and prefix_covers(self.words, words)

    def deny_match(self, words: Sequence[str | None]) -> MatchLevel:
        """How surely a ``prefix`` deny rule matches one simple command.

        Both sides are read with global options taken out (deny ``prefix:git commit`` matches
        ``git -C . --no-pager commit``); the command name also matches by its last path part
        or a glob that could expand to it. ``maybe``: a word that is not literal stands where
        the rule's words would be (``git $SUB``), or global options could not be read.
        """
        if self.kind != "prefix":
            return "no"
        level = _compare(self.words, words, loose_name=True)
        ruled = tuple(word or "" for word in programs.normalised(self.words).words)
        command = programs.normalised(words)
        normal = _compare(ruled, command.words, loose_name=True)
        if not command.certain and _compare(ruled[:1], words[:1], loose_name=True) == "yes":
            normal = "maybe"  # global options that cannot be read: any sub-command may follow
        return max(level, normal, key=_LEVELS.index)

    def matches_path(
        self, path: str, *, project_root: str | None = None, home: str | None = None
    ) -> bool:
        """Whether a ``path`` rule covers `path` (project-relative posix, absolute, or ``~/…``).

        Relative and absolute forms are converted into each other only when `project_root` /
        `home` are known; a relative path that leaves the project (``../x``) is never covered by
        a project-relative rule.
        """
        if self.kind != "path" or self._path_re is None or self.anchor is None:
            return False
        rel = anchored_path(path, self.anchor, project_root=project_root, home=home)
        return rel is not None and self._path_re.fullmatch(rel) is not None

    def matches_url(self, url: str) -> bool:
        """Whether a ``domain`` rule covers the host of `url`."""
        if self.kind != "domain":
            return False
        host = url_host(url)
        if host is None:
            return False
        return DomainPattern(self.domain, subdomains_only=self.subdomains_only).matches(host)


_LEVELS: tuple[MatchLevel, ...] = ("no", "maybe", "yes")


def _compare(prefix: Sequence[str], words: Sequence[str | None], *, loose_name: bool) -> MatchLevel:
    """Whether `words` start with `prefix`, word by word; ``maybe`` at a word that is not
    literal. With `loose_name` the command name also matches by its last path part, or as a
    glob bash could expand to the name (``/usr/bin/tou?h``)."""
    if not prefix:
        return "no"
    for k, expected in enumerate(prefix):
        if k >= len(words):
            return "no"
        word = words[k]
        if word is None:
            return "maybe"
        if word == expected:
            continue
        if k == 0 and loose_name:
            name = posixpath.basename(word)
            if name == expected or (GLOB_CHARS & set(name) and fnmatch.fnmatchcase(expected, name)):
                continue
        return "no"
    return "yes"


def prefix_covers(prefix: Sequence[str | None], words: Sequence[str | None]) -> bool:
    """Whether a command starting with `prefix` (an allow rule's words, a session grant's) covers
    the simple command `words`: literal word-wise prefix, as written or with the program's
    global options taken out, and every risk of the call (`programs.risks`) inside `prefix`."""
    if not prefix or any(word is None for word in prefix):
        return False
    literal = [word or "" for word in prefix]
    found = programs.risks(words)
    if _compare(literal, words, loose_name=False) == "yes" and _inside(found, len(literal)):
        return True
    normal = programs.normalised(words)
    if not normal.certain or len(normal.kept) == len(words):
        return False
    if _compare(literal, normal.words, loose_name=False) != "yes":
        return False
    position = {raw: new for new, raw in enumerate(normal.kept)}
    moved = [Risk(position.get(r.index, UNCOVERABLE), r.effect, r.reason, r.opaque) for r in found]
    return _inside(moved, len(literal))


def uncovered_risk(prefix: Sequence[str], words: Sequence[str | None]) -> Risk | None:
    """The first risk of `words` a rule with these words matches but does not cover (for the
    reason of an ask), or None."""
    if _compare(prefix, words, loose_name=False) != "yes" and (
        _compare(prefix, programs.normalised(words).words, loose_name=False) != "yes"
    ):
        return None
    if prefix_covers(prefix, words):
        return None
    return next(iter(programs.risks(words)), None)


def _inside(found: Sequence[Risk], length: int) -> bool:
    return all(risk.index < length for risk in found)


@dataclass(frozen=True, slots=True)
class RuleSet:
    """The parsed `permissions.allow` and `permissions.deny` lists."""

    allow: tuple[Rule, ...] = ()
    deny: tuple[Rule, ...] = ()

    @classmethod
    def parse(cls, allow: Sequence[str] = (), deny: Sequence[str] = ()) -> RuleSet:
        """Parse both lists; a bad rule raises `ValueError` naming its list and index."""
        return cls(
            allow=parse_rules(allow, where="permissions.allow"),
            deny=parse_rules(deny, where="permissions.deny"),
        )


def parse_rules(texts: Sequence[str], *, where: str = "rules") -> tuple[Rule, ...]:
    """Parse a list of rules; the error of a bad one names ``<where>[<index>]``."""
    rules: list[Rule] = []
    for index, text in enumerate(texts):
        try:
            rules.append(parse_rule(text))
        except ValueError as exc:
            raise ValueError(f"{where}[{index}]: {exc}") from None
    return tuple(rules)


def parse_rule(text: str) -> Rule:
    """Parse one rule; raises `ValueError` with a message saying what is wrong."""
    raw = text.strip()
    if not raw:
        raise ValueError("empty permission rule")
    if "\n" in raw or "\r" in raw:
        raise ValueError(f"bad permission rule {text!r}: it must be on one line")
    open_at = raw.find("(")
    if open_at < 0:
        if ")" in raw:
            raise ValueError(f"bad permission rule {text!r}: ')' without '('")
        return Rule(text=raw, tool=_check_tool(raw, text), kind="any", _tool_re=_tool_re(raw))
    tool = _check_tool(raw[:open_at].strip(), text)
    if not raw.endswith(")"):
        raise ValueError(f"bad permission rule {text!r}: expected ')' at the end")
    spec = raw[open_at + 1 : -1].strip()
    if not spec:
        raise ValueError(
            f"bad permission rule {text!r}: empty parentheses; write {tool!r} for every call"
        )
    base = Rule(text=raw, tool=tool, kind="any", _tool_re=_tool_re(tool))
    scheme = _SCHEME_LIKE.match(spec)
    if scheme is not None:
        key = scheme.group(1)
        value = spec[scheme.end() :].strip()
        if key == "prefix":
            return _prefix_rule(base, value, text)
        if key == "domain":
            return _domain_rule(base, value, text)
        raise ValueError(
            f"bad permission rule {text!r}: unknown {key + ':'!r}; "
            "use prefix:<words>, domain:<host> or a path glob"
        )
    return _path_rule(base, spec, text)


def path_rule(text: str, globs: Sequence[str], *, anchor: PathAnchor = "absolute") -> Rule:
    """A ``path`` rule for any tool covering any of `globs` (relative to `anchor`, no leading
    slash): how the sandboxes state their sensitive paths in the rules' own glob syntax."""
    if not globs:
        raise ValueError(f"path rule {text!r}: no glob")
    source = "|".join(f"(?:{glob_source(glob)})" for glob in globs)
    return Rule(
        text=text,
        tool="*",
        kind="path",
        pattern=globs[0],
        anchor=anchor,
        _tool_re=_tool_re("*"),
        _path_re=re.compile(source, re.DOTALL),
    )


def _check_tool(tool: str, text: str) -> str:
    if not tool:
        raise ValueError(f"bad permission rule {text!r}: missing tool name")
    if not _TOOL.match(tool):
        raise ValueError(
            f"bad permission rule {text!r}: {tool!r} is not a tool name "
            "(letters, digits, '_', '-', '.', '*')"
        )
    return tool


def _tool_re(tool: str) -> re.Pattern[str] | None:
    if "*" not in tool:
        return None
    return re.compile(".*".join(re.escape(part) for part in tool.split("*")))


def _prefix_rule(base: Rule, value: str, text: str) -> Rule:
    try:
        words = tuple(shlex.split(value))
    except ValueError as exc:
        raise ValueError(f"bad permission rule {text!r}: prefix words: {exc}") from None
    if not words:
        raise ValueError(f"bad permission rule {text!r}: prefix: needs at least one word")
    return Rule(text=base.text, tool=base.tool, kind="prefix", words=words, _tool_re=base._tool_re)


def _domain_rule(base: Rule, value: str, text: str) -> Rule:
    host = value.lower().rstrip(".")
    if "://" in host or "/" in host or ":" in host:
        raise ValueError(
            f"bad permission rule {text!r}: domain: takes a host name only "
            "(no scheme, port or path), e.g. domain:example.com"
        )
    if not _DOMAIN.match(host):
        raise ValueError(f"bad permission rule {text!r}: {value!r} is not a host name")
    subdomains_only = host.startswith("*.")
    return Rule(
        text=base.text,
        tool=base.tool,
        kind="domain",
        domain=host[2:] if subdomains_only else host,
        subdomains_only=subdomains_only,
        _tool_re=base._tool_re,
    )


def _path_rule(base: Rule, spec: str, text: str) -> Rule:
    anchor: PathAnchor
    if spec.startswith("//"):
        anchor, rest = "absolute", spec.lstrip("/")
    elif spec.startswith("/"):
        anchor, rest = "project", spec[1:]
    elif spec == "~" or spec.startswith("~/"):
        anchor, rest = "home", spec[2:]
    elif spec.startswith("~"):
        raise ValueError(f"bad permission rule {text!r}: only '~/' (your home) is supported")
    else:
        anchor, rest = "project", spec
    while rest.startswith("./"):
        rest = rest[2:]
    if ".." in rest.split("/"):
        raise ValueError(f"bad permission rule {text!r}: '..' is not allowed in a path rule")
    if rest in ("", "."):
        rest = "**"
    elif rest.endswith("/"):
        rest += "**"
    rest = re.sub(r"/{2,}", "/", rest)
    return Rule(
        text=base.text,
        tool=base.tool,
        kind="path",
        pattern=rest,
        anchor=anchor,
        _tool_re=base._tool_re,
        _path_re=glob_regex(rest),
    )
