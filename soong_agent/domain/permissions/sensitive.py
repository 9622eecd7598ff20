"""Sensitive paths (SBX-1): `tools.sensitive_paths` entries, never read, written or listed.

An entry without a slash is a name pattern for any path component (``.env.*``); one with a
slash, a leading ``~`` or an absolute one names a path and everything below it, stated as a
path `Rule` in the permission rules' glob syntax (``*`` inside one folder, ``**`` across). A
literal path also covers SQLite's sidecar files (``-wal``, ``-shm``, ``-journal``).

Both file sandboxes (the local disk and the in-memory fake) decide with `SensitivePaths`; the
local one also passes `resolve` (symlinks followed) so a literal entry matches its real path.

A path entry's regular expression is compiled when it is first needed (the first path checked
against it), not when the sandbox is built, and once per entry and globs in the process: the
default entries cost ~10–30 ms to compile, which start-up (and every further runtime of the
process) no longer pays. An entry whose glob holds a ``[`` class, the only kind whose pattern
can fail to compile, is still compiled at once, so its error comes when the sandbox is built.
"""

from __future__ import annotations

import fnmatch
import functools
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from soong_agent.domain.permissions.rules import Rule, path_rule
from soong_agent.domain.permissions.targets import (
    GLOB_CHARS,
    expand_home,
    is_within,
    normalise,
    relative_parts,
)

# Files SQLite keeps beside a database; a sensitive file path covers them too.
SIDECAR_SUFFIXES: tuple[str, ...] = ("-wal", "-shm", "-journal")


@dataclass(frozen=True, slots=True)
class SensitiveRule:
    """One compiled `sensitive_paths` entry.

    Attributes:
        pattern: the entry as written (named in refusals).
        name_glob: the fnmatch pattern of a name entry (``.env.*``), else None.
        prefixes: the literal absolute paths a path entry names (with their sidecars).
        below: the globs (absolute, no leading slash) of a path entry: its paths and
            everything below them; empty for a name entry.
        fold_case: names and paths are compared lower-case (macOS and Windows filesystems).
    """

    pattern: str
    name_glob: str | None = None
    prefixes: tuple[str, ...] = ()
    below: tuple[str, ...] = ()
    fold_case: bool = False
    _paths: Rule | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def paths(self) -> Rule | None:
        """The path rule (absolute anchor) covering `below`, None for a name entry; compiled at
        the first use."""
        rule = self._paths
        if rule is None and self.below:
            rule = _below_rule(self.pattern, self.below)
            object.__setattr__(self, "_paths", rule)
        return rule

    def matches_name(self, name: str) -> bool:
        """Whether the single component `name` matches a name pattern."""
        if self.name_glob is None:
            return False
        return fnmatch.fnmatchcase(name.lower() if self.fold_case else name, self.name_glob)

    def covers(self, path: str) -> bool:
        """Whether the absolute `path` is one of the named paths or lies below one."""
        rule = self._paths
        if rule is None:
            if not self.below:
                return False
            rule = self.paths
            assert rule is not None
        return rule.matches_path(path.lower() if self.fold_case else path)


@functools.lru_cache(maxsize=1024)
def _below_rule(entry: str, below: tuple[str, ...]) -> Rule:
    """The path rule of a path entry: one per entry and globs in the process (a frozen value,
    shared by every sandbox that names the same paths)."""
    return path_rule(entry, below, anchor="absolute")


def compile_sensitive(
    entry: str,
    *,
    project: str,
    home: str,
    resolve: Callable[[str], str] | None = None,
    fold_case: bool = False,
) -> SensitiveRule | None:
    """Compile one entry (relative ones against `project`, ``~`` as `home`); None if blank."""
    pattern = entry.strip()
    if not pattern:
        return None

    def fold(text: str) -> str:
        return text.lower() if fold_case else text

    if "/" not in pattern and pattern != "~":
        return SensitiveRule(pattern=entry, name_glob=fold(pattern), fold_case=fold_case)
    absolute = normalise(posixpath.join(project, expand_home(pattern, home)))
    if GLOB_CHARS & set(absolute):
        globs: tuple[str, ...] = (fold(absolute),)
        prefixes: tuple[str, ...] = ()
    else:
        forms = {fold(absolute)}
        if resolve is not None:
            forms.add(fold(resolve(absolute)))
        forms |= {form + suffix for form in forms for suffix in SIDECAR_SUFFIXES}
        prefixes = globs = tuple(sorted(forms))
    below = tuple(f"{glob.strip('/')}/**" if glob.strip("/") else "**" for glob in globs)
    rule = SensitiveRule(pattern=entry, prefixes=prefixes, below=below, fold_case=fold_case)
    if "[" in absolute:  # a character class may not compile: report it now, as ever
        rule.paths  # noqa: B018
    return rule


class SensitivePaths:
    """The sensitive entries of one sandbox and the roots its paths are judged under.

    Below a root (the project, a write root) only the components under that root are matched
    against name patterns, so a project that itself lies in a folder named like a secret is
    not wholly refused; outside every root, every component counts.
    """

    def __init__(
        self,
        entries: Sequence[str],
        *,
        project: str,
        home: str,
        roots: Sequence[str] = (),
        resolve: Callable[[str], str] | None = None,
        fold_case: bool = False,
    ) -> None:
        compiled = (
            compile_sensitive(e, project=project, home=home, resolve=resolve, fold_case=fold_case)
            for e in entries
        )
        self.rules: tuple[SensitiveRule, ...] = tuple(r for r in compiled if r is not None)
        self.roots: tuple[str, ...] = tuple(dict.fromkeys((project, *roots)))

    def __bool__(self) -> bool:
        return bool(self.rules)

    def root_of(self, path: str) -> str | None:
        """The first root holding the absolute `path`, if any."""
        for root in self.roots:
            if is_within(path, root):
                return root
        return None

    def rule_for(self, lexical: str, resolved: str | None = None) -> SensitiveRule | None:
        """The first rule a path falls under, judged in its lexical and resolved forms."""
        if not self.rules:
            return None
        checks: list[tuple[str, list[str]]] = []
        forms = [(lexical, True)] if resolved is None else [(resolved, True), (lexical, False)]
        for form, whole in forms:
            root = self.root_of(form)
            if root is not None:
                names = relative_parts(form, root)
            elif whole:  # outside every root: every component counts
                names = [part for part in form.split("/") if part]
            else:
                names = [posixpath.basename(form)]
            checks.append((form, names))
        for rule in self.rules:
            for form, names in checks:
                if rule.covers(form) or any(rule.matches_name(name) for name in names):
                    return rule
        return None

    def entry_is_sensitive(self, path: str, name: str) -> bool:
        """For walks whose parent folder was already checked: `name` at the absolute `path`."""
        return any(rule.matches_name(name) or rule.covers(path) for rule in self.rules)

    @property
    def literal_prefixes(self) -> tuple[str, ...]:
        """Every literal path the entries name (for finding other names of those files)."""
        return tuple(prefix for rule in self.rules for prefix in rule.prefixes)
