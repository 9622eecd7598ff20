"""Permission rules (PERM-2): `Tool`, `Tool(prefix:…)`, `Tool(<path glob>)`, `Tool(domain:…)`.

Rules are data: `parse_rule` turns the text of one `permissions.allow` / `permissions.deny` entry
into a `Rule`, and the `Rule.matches_*` methods say whether it covers one target. Which rule wins
is decided in `soong_agent.domain.permissions`.

Forms (``Tool`` is a tool name; ``*`` in it matches any run of characters, ``*`` alone any tool):

- ``Tool`` — every call of the tool, whatever its target.
- ``Tool(prefix:npm test)`` — commands whose literal words start with these words, word by word
  (``npm test`` covers ``npm test --watch`` but not ``npm testing``). Words may be quoted.
- ``Tool(domain:example.com)`` — URLs whose host is ``example.com`` or one of its subdomains
  (``*.example.com``: subdomains only). ``evil-example.com`` is not covered.
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
from urllib.parse import urlsplit

RuleKind = Literal["any", "prefix", "path", "domain"]
PathAnchor = Literal["project", "absolute", "home"]

_TOOL = re.compile(r"^[A-Za-z0-9_*][A-Za-z0-9_.*-]*$")
_SCHEME_LIKE = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*):")
_DOMAIN = re.compile(
    r"^(\*\.)?[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*$"
)
_BAD_HOST_CHARS = re.compile(r"[\\\s\x00-\x1f\x7f]")


_GLOB_CHARS = frozenset("*?[")


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
        head = list(words[: len(self.words)])
        if loose_name and head[0] is not None:
            name = posixpath.basename(head[0])
            # bash expands a glob in the command name (`/usr/bin/tou?h`): for a deny rule, a
            # name pattern that could expand to the denied name counts as that name
            if name == self.words[0] or (
                _GLOB_CHARS & set(name) and fnmatch.fnmatchcase(self.words[0], name)
            ):
                head[0] = self.words[0]
        return tuple(head) == self.words

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
        if host == self.domain:
            return not self.subdomains_only
        return host.endswith("." + self.domain)


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


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a path glob: ``*``/``?`` within one folder, ``**`` across folders, ``[…]``."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**", i):
            at_start = i == 0 or pattern[i - 1] == "/"
            j = i + 2
            if at_start and j < n and pattern[j] == "/":
                out.append("(?:[^/]*/)*")  # `**/`: zero or more folders
                i = j + 1
                continue
            if at_start and j == n:
                if out and out[-1] == "/":
                    out[-1] = "(?:/.*)?"  # `dir/**`: the folder itself and everything below
                else:
                    out.append(".*")
                i = j
                continue
            out.append("[^/]*")  # `a**b` is just `*`
            i = j
            continue
        ch = pattern[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            close = pattern.find("]", i + 2)
            if close < 0:
                out.append(re.escape(ch))
            else:
                body = pattern[i + 1 : close]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = close
        elif ch == "/":
            out.append("/")
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def anchored_path(
    path: str, anchor: PathAnchor, *, project_root: str | None = None, home: str | None = None
) -> str | None:
    """`path` relative to `anchor` (no leading slash), or None when it cannot be placed there."""
    text = path.strip()
    if not text:
        return None
    absolute: str | None = None
    home_rel: str | None = None
    project_rel: str | None = None
    if text.startswith("/"):
        absolute = posixpath.normpath(text)
        if absolute.startswith("//"):
            absolute = "/" + absolute.lstrip("/")
    elif text == "~" or text.startswith("~/"):
        home_rel = _inside(posixpath.normpath(text[2:] or "."))
        if home is not None and home_rel is not None:
            absolute = posixpath.join(posixpath.normpath(home), home_rel)
    elif text.startswith("~"):
        return None  # `~user/…`: someone else's home
    else:
        project_rel = _inside(posixpath.normpath(text))
        if project_root is not None and project_rel is not None:
            absolute = posixpath.join(posixpath.normpath(project_root), project_rel)
    if anchor == "absolute":
        return absolute.lstrip("/") if absolute is not None else None
    if anchor == "project":
        if project_rel is not None:
            return project_rel
        return _relative_to(absolute, project_root)
    if home_rel is not None:
        return home_rel
    return _relative_to(absolute, home)


def _inside(rel: str) -> str | None:
    """A normalised relative path, or None when it climbs out (``..``)."""
    if rel == ".." or rel.startswith("../"):
        return None
    return "" if rel == "." else rel


def _relative_to(absolute: str | None, root: str | None) -> str | None:
    if absolute is None or root is None:
        return None
    base = posixpath.normpath(root)
    if absolute == base:
        return ""
    prefix = base.rstrip("/") + "/"
    return absolute[len(prefix) :] if absolute.startswith(prefix) else None


def url_host(url: str) -> str | None:
    """The lower-case host of `url` (``https://Api.Example.com:8443/x`` → ``api.example.com``).

    A URL without a scheme is read as ``//url``. Returns None when there is no host or the
    authority holds characters a lenient parser might read differently (backslashes, spaces).
    """
    text = url.strip()
    if not text:
        return None
    if "://" not in text:
        text = "//" + text
    try:
        parts = urlsplit(text)
    except ValueError:
        return None
    if _BAD_HOST_CHARS.search(parts.netloc):
        return None
    host = parts.hostname
    if not host:
        return None
    return host.lower().rstrip(".") or None
