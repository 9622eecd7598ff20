"""Which paths a sandboxed command may touch, and what each mechanism does about them (SBX-3).

Pure decisions, kept apart from spawning so they can be tested without a kernel feature:

- `build_policy`: the `SandboxPolicy` of a project from the configuration's values: the write
  roots, the run's tmp folder, the paths no command may read (the agent home, ``~/.ssh``
  except ``known_hosts``, ``~/.aws``, ``~/.gnupg`` and every `tools.sensitive_paths` entry that
  names something that exists), and whether the network is allowed.
- `bwrap_arguments` (`bwrap_args`): the bubblewrap options enforcing a policy.
- `landlock_rules` (`landlock_rules`): the Landlock rules enforcing a policy.

(The last two, and the path helpers of `paths`, are imported from here too.)

Paths given to these functions are absolute; `build_policy` resolves symlinks, the two others
take the policy as resolved.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from soong_agent.adapters.ossandbox.bwrap_args import MountKind, bwrap_arguments
from soong_agent.adapters.ossandbox.landlock_rules import (
    DEVICE_RIGHTS,
    FILE_RIGHTS,
    FOLDER_ONLY_RIGHTS,
    READ_RIGHTS,
    WRITE_RIGHTS,
    LandlockRule,
    Right,
    landlock_rules,
    landlock_unenforced,
)
from soong_agent.adapters.ossandbox.paths import DEVICE_FILES, PathKind, is_within, path_kind
from soong_agent.ports.ossandbox import SandboxPolicy

BUILTIN_DENIED = ("~/.ssh", "~/.aws", "~/.gnupg")
"""Denied whatever the configuration says: keys and cloud credentials."""
READABLE_INSIDE_DENIED = ("~/.ssh/known_hosts",)
"""Files inside a denied folder that commands may still read (git over ssh needs it)."""
SIDECAR_SUFFIXES = ("-wal", "-shm", "-journal")
"""Files SQLite keeps beside a database: a denied file path covers them too."""
SKIPPED_FOLDERS = frozenset(
    {".git", "node_modules", ".venv", "venv", "__pycache__", ".tox", ".mypy_cache", ".cache"}
)
"""Folders not searched for name-pattern entries (``.env``): large or generated; the
command-text check still covers what is in them."""
NAME_SEARCH_LIMIT = 5000
"""At most this many folder entries are looked at per policy for name-pattern entries."""
_GLOB_CHARS = frozenset("*?[")


def _expand(entry: str, *, project: str, home: str) -> str:
    if entry == "~":
        entry = home
    elif entry.startswith("~/"):
        entry = home + entry[1:]
    return os.path.normpath(os.path.join(project, entry))


@dataclass(frozen=True, slots=True)
class _Denied:
    path: str
    reason: str


def _named_matches(
    roots: Sequence[str], patterns: Sequence[tuple[str, str]], limit: int
) -> list[_Denied]:
    """Existing paths below `roots` whose name matches a name pattern (breadth first, at most
    `limit` entries looked at; symlinks and `SKIPPED_FOLDERS` are not entered)."""
    found: list[_Denied] = []
    queue = list(dict.fromkeys(roots))
    seen = 0
    while queue and seen < limit:
        folder = queue.pop(0)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > limit:
                break
            matched = next((p for p, _ in patterns if fnmatch.fnmatchcase(entry.name, p)), None)
            if matched is not None:
                reason = next(r for p, r in patterns if p == matched)
                found.append(_Denied(entry.path, reason))
                continue
            if entry.name in SKIPPED_FOLDERS:
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    queue.append(entry.path)
            except OSError:
                continue
    return found


def git_tracked(root: str, paths: Sequence[str]) -> set[str]:
    """Those of `paths` (below the folder `root`) whose content git tracks: a file in the
    index, or a folder holding one. Empty when `root` is not in a git work tree, git is not
    installed, or it fails."""
    import shutil
    import subprocess

    folders = [p for p in os.environ.get("PATH", "").split(":") if p.startswith("/")]
    git = shutil.which("git", path=":".join(folders) or "/usr/bin:/bin")
    relative = [os.path.relpath(p, root) for p in paths if is_within(p, root) and p != root]
    if git is None or not relative:
        return set()
    try:
        done = subprocess.run(
            [git, "-C", root, "ls-files", "-z", "--", *relative],
            capture_output=True,
            timeout=10,
            check=False,
            stdin=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin", "LANG": "C", "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.SubprocessError):
        return set()
    if done.returncode != 0:
        return set()
    listed = [os.path.join(root, name) for name in os.fsdecode(done.stdout).split("\0") if name]
    return {p for p in paths if any(is_within(f, p) for f in listed)}


def build_policy(
    *,
    project: str,
    write_roots: Sequence[str] = (),
    sensitive: Sequence[str] = (),
    agent_home: str | None = None,
    home: str | None = None,
    tmp_dir: str | None = None,
    allow_tmp_write: bool = False,
    system_tmp: str | None = None,
    network: bool | Literal["allowlist"] = False,
    also_deny: Sequence[tuple[str, str]] = (),
    name_search_limit: int = NAME_SEARCH_LIMIT,
    tracked: Callable[[str, Sequence[str]], set[str]] = git_tracked,
) -> SandboxPolicy:
    """The policy for commands run in `project`.

    `write_roots` are `tools.allowed_write_roots` (relative ones against the project, ``~``
    as `home`; empty means the project alone); `allow_tmp_write` adds `system_tmp` (default:
    the system temp folder). `sensitive` are `tools.sensitive_paths` entries (placeholders
    already expanded): a path (absolute, ``~/…`` or relative to the project) or a glob of
    paths denies what exists there now; a name pattern (``.env``, ``.env.*``) denies the
    matching files and folders found below the project and the write roots. `also_deny` adds
    (path, reason) pairs, e.g. a session database configured outside the agent home.
    `network`: any (True), none (False), or ``"allowlist"``: only through the filtering proxy.
    `agent_home` is denied whole. Paths that do not exist are left out: there is nothing to
    hide, and a mechanism cannot mount over nothing. Nor are paths inside a write root whose
    content git tracks (`tracked`, `git_tracked`): their content is in ``.git`` anyway, and a
    file hidden under git's feet shows as modified in ``git status`` and breaks ``git
    stash``/``checkout`` (the command-text check still refuses reading them).
    """
    home = os.path.abspath(home or os.path.expanduser("~"))
    project = os.path.realpath(project)
    roots = _write_roots(write_roots or [project], project, home, allow_tmp_write, system_tmp)
    denied = _DenyList(project, home)
    if agent_home:
        denied.path(agent_home, "SOONG_AGENT_HOME, the agent's home")
    for entry in BUILTIN_DENIED:
        denied.path(entry, entry)
    names: list[tuple[str, str]] = []
    for entry in sensitive:
        pattern = entry.strip()
        if not pattern:
            continue
        if "/" not in pattern and pattern != "~":
            names.append((pattern, f"tools.sensitive_paths: {pattern}"))
        else:
            denied.path(pattern, f"tools.sensitive_paths: {pattern}")
    for path, reason in also_deny:
        denied.path(path, reason)
    if names:
        denied.found.extend(_named_matches([project, *roots], names, name_search_limit))
    kept = _kept(denied.found, roots, project, tracked)
    exceptions = tuple(
        os.path.realpath(_expand(e, project=project, home=home))
        for e in READABLE_INSIDE_DENIED
        if os.path.isfile(_expand(e, project=project, home=home))
    )
    return SandboxPolicy(
        project=project,
        write_roots=tuple(roots),
        deny_paths=tuple(kept),
        read_exceptions=tuple(
            e for e in exceptions if any(is_within(e, d) and e != d for d in kept)
        ),
        tmp_dir=os.path.realpath(tmp_dir) if tmp_dir else None,
        network=network is True,
        deny_reasons=tuple(kept.values()),
        proxy=network == "allowlist",
    )


def _write_roots(
    entries: Sequence[str], project: str, home: str, allow_tmp_write: bool, system_tmp: str | None
) -> dict[str, None]:
    """The existing folders of `entries` (resolved) and, with `allow_tmp_write`, the system
    temp folder, in order without repeats."""
    roots: dict[str, None] = {}
    for root in entries:
        resolved = os.path.realpath(_expand(root, project=project, home=home))
        if os.path.isdir(resolved):
            roots[resolved] = None
    if allow_tmp_write:
        import tempfile

        tmp = os.path.realpath(system_tmp or tempfile.gettempdir())
        if os.path.isdir(tmp):
            roots[tmp] = None
    return roots


class _DenyList:
    """The denied paths found so far (`found`), each with its reason."""

    def __init__(self, project: str, home: str) -> None:
        self._project = project
        self._home = home
        self.found: list[_Denied] = []

    def path(self, text: str, reason: str) -> None:
        """Deny what exists at `text` (a path or a glob of paths; a file with its SQLite
        sidecars)."""
        absolute = _expand(text, project=self._project, home=self._home)
        if _GLOB_CHARS & set(absolute):
            for match in sorted(glob.glob(absolute, recursive=True)):
                self.found.append(_Denied(os.path.realpath(match), reason))
            return
        for candidate in (absolute, *(absolute + s for s in SIDECAR_SUFFIXES)):
            if os.path.lexists(candidate):
                self.found.append(_Denied(os.path.realpath(candidate), reason))


def _kept(
    denied: Sequence[_Denied],
    roots: dict[str, None],
    project: str,
    tracked: Callable[[str, Sequence[str]], set[str]],
) -> dict[str, str]:
    """The denied paths that stay denied, with their first reason: the project and the write
    roots themselves are never denied whole (a root that is a denied path would leave nothing
    to work in; what is inside them still can be), nor what git tracks inside a write root."""
    kept: dict[str, str] = {}
    for item in denied:
        if item.path in roots or item.path in (project, "/"):
            continue
        kept.setdefault(item.path, item.reason)
    for root in roots:
        inside = [p for p in kept if is_within(p, root) and p != root]
        for path in tracked(root, inside) if inside else ():
            kept.pop(path, None)
    return kept


__all__ = [
    "BUILTIN_DENIED",
    "DEVICE_FILES",
    "DEVICE_RIGHTS",
    "FILE_RIGHTS",
    "FOLDER_ONLY_RIGHTS",
    "NAME_SEARCH_LIMIT",
    "READABLE_INSIDE_DENIED",
    "READ_RIGHTS",
    "SIDECAR_SUFFIXES",
    "SKIPPED_FOLDERS",
    "WRITE_RIGHTS",
    "LandlockRule",
    "MountKind",
    "PathKind",
    "Right",
    "build_policy",
    "bwrap_arguments",
    "git_tracked",
    "is_within",
    "landlock_rules",
    "landlock_unenforced",
    "path_kind",
]
