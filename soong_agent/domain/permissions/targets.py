"""What rules and sensitive paths match against: path globs, anchored paths and URL hosts.

Paths here are posix strings; nothing touches a disk. `glob_regex` is the one path-glob syntax
of the package: ``*`` and ``?`` stay inside one folder, ``**`` crosses folders, ``[abc]`` is a
character class. Permission rules (`rules.Rule.matches_path`) and the sensitive-path patterns
of the file sandboxes (`sensitive.SensitivePaths`) both match through it.

`DomainPattern` is the one domain syntax (SBX-2, PERM-2): ``example.com`` is that host and its
subdomains, ``*.example.com`` its subdomains only, never ``example.com`` itself. ``domain:``
permission rules and ``tools.network.allowed_domains`` (the web fetcher) both match through it.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

PathAnchor = Literal["project", "absolute", "home"]

GLOB_CHARS = frozenset("*?[")
_BAD_HOST_CHARS = re.compile(r"[\\\s\x00-\x1f\x7f]")


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a path glob: ``*``/``?`` within one folder, ``**`` across folders, ``[…]``."""
    return re.compile(glob_source(pattern), re.DOTALL)


def glob_source(pattern: str) -> str:
    """The regular expression source `glob_regex` compiles (to join several globs into one)."""
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
    return "".join(out)


def normalise(path: str) -> str:
    """`posixpath.normpath`, with a leading ``//`` read as ``/`` (as Linux and macOS do)."""
    normalised = posixpath.normpath(path)
    if normalised.startswith("//"):
        normalised = "/" + normalised.lstrip("/")
    return normalised


def is_within(path: str, root: str) -> bool:
    """Whether the absolute `path` is `root` or lies below it."""
    if path == root:
        return True
    return path.startswith(root if root.endswith("/") else root + "/")


def relative_parts(path: str, root: str) -> list[str]:
    """The components of `path` below `root` (`path` must be within `root`)."""
    if path == root:
        return []
    rest = path[len(root) :].lstrip("/")
    return rest.split("/") if rest else []


def expand_home(path: str, home: str) -> str:
    """`path` with a leading ``~`` (alone or before ``/``) replaced by `home`."""
    if path == "~":
        return home
    if path.startswith("~/"):
        return home + path[1:]
    return path


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
        absolute = normalise(text)
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


@dataclass(frozen=True, slots=True)
class DomainPattern:
    """One domain pattern: ``example.com`` (the host and its subdomains) or ``*.example.com``
    (subdomains only: ``api.example.com``, never ``example.com``).

    `domain` is compared as given (lower-case, no trailing dot): callers that compare IDNA
    (punycode) host names build the pattern from the converted domain.
    """

    domain: str
    subdomains_only: bool = False

    @classmethod
    def parse(cls, text: str) -> DomainPattern:
        """Read ``example.com``, ``*.example.com`` (or ``.example.com``, the same as
        ``example.com``); raises `ValueError` for anything else with a ``*`` or no name."""
        host = text.strip().lower().rstrip(".")
        subdomains_only = host.startswith("*.")
        if subdomains_only:
            host = host[2:]
        elif host.startswith(".") and not host.startswith(".."):
            host = host[1:]
        if not host or "*" in host or _BAD_HOST_CHARS.search(host) or "/" in host:
            raise ValueError(
                f"{text!r} is not a domain (write example.com for the domain and its "
                "subdomains, *.example.com for its subdomains only)"
            )
        return cls(host, subdomains_only=subdomains_only)

    def matches(self, host: str) -> bool:
        """Whether the host name `host` (any case, trailing dot allowed) is covered."""
        name = host.lower().rstrip(".")
        if name == self.domain:
            return not self.subdomains_only
        return name.endswith("." + self.domain)

    def __str__(self) -> str:
        return f"*.{self.domain}" if self.subdomains_only else self.domain


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
