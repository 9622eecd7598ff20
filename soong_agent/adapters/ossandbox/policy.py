"""Which paths a sandboxed command may touch, and what each mechanism does about them (SBX-3).

Pure decisions, kept apart from spawning so they can be tested without a kernel feature:

- `build_policy`: the `SandboxPolicy` of a project from the configuration's values: the write
  roots, the run's tmp folder, the paths no command may read (the agent home, ``~/.ssh``
  except ``known_hosts``, ``~/.aws``, ``~/.gnupg`` and every `tools.sensitive_paths` entry that
  names something that exists), and whether the network is allowed.
- `bwrap_arguments`: the bubblewrap options enforcing a policy (mounts in an order where an
  inner mount always comes after the one it sits in).
- `landlock_rules`: the Landlock rules enforcing a policy. Landlock only grants, so "everything
  but ~/.ssh" is the complement: read on every sibling of each folder on the way down to a
  denied path, never on the denied path itself.

Paths given to these functions are absolute; `build_policy` resolves symlinks, the two others
take the policy as resolved.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from soong_agent.ports.ossandbox import SandboxPolicy

PathKind = Literal["dir", "file", "symlink", "other"]

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
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
"""Device files every command may write (``> /dev/null``)."""

_GLOB_CHARS = frozenset("*?[")


def path_kind(path: str) -> PathKind | None:
    """What is at `path` without following a final symlink; None when nothing is."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def is_within(path: str, root: str) -> bool:
    """Whether the absolute `path` is `root` or lies below it."""
    return path == root or path.startswith(root.rstrip("/") + "/")


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
    network: bool = False,
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
    `agent_home` is denied whole. Paths that do not exist are left out: there is nothing to
    hide, and a mechanism cannot mount over nothing. Nor are paths inside a write root whose
    content git tracks (`tracked`, `git_tracked`): their content is in ``.git`` anyway, and a
    file hidden under git's feet shows as modified in ``git status`` and breaks ``git
    stash``/``checkout`` (the command-text check still refuses reading them).
    """
    home = os.path.abspath(home or os.path.expanduser("~"))
    project = os.path.realpath(project)
    roots: dict[str, None] = {}
    for root in write_roots or [project]:
        resolved = os.path.realpath(_expand(root, project=project, home=home))
        if os.path.isdir(resolved):
            roots[resolved] = None
    if allow_tmp_write:
        import tempfile

        tmp = os.path.realpath(system_tmp or tempfile.gettempdir())
        if os.path.isdir(tmp):
            roots[tmp] = None

    denied: list[_Denied] = []

    def deny_path(text: str, reason: str) -> None:
        absolute = _expand(text, project=project, home=home)
        if _GLOB_CHARS & set(absolute):
            for match in sorted(glob.glob(absolute, recursive=True)):
                denied.append(_Denied(os.path.realpath(match), reason))
            return
        for candidate in (absolute, *(absolute + s for s in SIDECAR_SUFFIXES)):
            if os.path.lexists(candidate):
                denied.append(_Denied(os.path.realpath(candidate), reason))

    if agent_home:
        deny_path(agent_home, "SOONG_AGENT_HOME, the agent's home")
    for entry in BUILTIN_DENIED:
        deny_path(entry, entry)
    names: list[tuple[str, str]] = []
    for entry in sensitive:
        pattern = entry.strip()
        if not pattern:
            continue
        if "/" not in pattern and pattern != "~":
            names.append((pattern, f"tools.sensitive_paths: {pattern}"))
        else:
            deny_path(pattern, f"tools.sensitive_paths: {pattern}")
    for path, reason in also_deny:
        deny_path(path, reason)
    if names:
        denied.extend(_named_matches([project, *roots], names, name_search_limit))

    # the project and the write roots themselves are never denied whole: a root that is a
    # denied path would leave nothing to work in; what is inside them still can be
    kept: dict[str, str] = {}
    for item in denied:
        if item.path in roots or item.path in (project, "/"):
            continue
        kept.setdefault(item.path, item.reason)
    for root in roots:
        inside = [p for p in kept if is_within(p, root) and p != root]
        for path in tracked(root, inside) if inside else ():
            kept.pop(path, None)
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
        network=network,
        deny_reasons=tuple(kept.values()),
    )


# --- bubblewrap ------------------------------------------------------------------------------

MountKind = Literal["rw", "deny", "read"]


@dataclass(frozen=True, slots=True)
class _Mount:
    path: str
    kind: MountKind  # rw: a write root; deny: hidden; read: an exception inside a hidden folder


def _depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


def _effective_mounts(policy: SandboxPolicy) -> list[_Mount]:
    """The policy's mounts, parents before children, without the ones that change nothing (a
    denied path inside another denied path, an exception not inside a denied folder)."""
    mounts = [_Mount(p, "rw") for p in policy.writable()]
    mounts += [_Mount(p, "deny") for p in policy.deny_paths]
    mounts += [_Mount(p, "read") for p in policy.read_exceptions]
    order = {"rw": 0, "deny": 1, "read": 2}
    mounts.sort(key=lambda m: (_depth(m.path), m.path, order[m.kind]))
    kept: list[_Mount] = []
    for mount in mounts:
        enclosing = next(
            (m for m in reversed(kept) if is_within(mount.path, m.path) and m.path != mount.path),
            None,
        )
        enclosing_kind = enclosing.kind if enclosing is not None else "ro"
        if mount.kind == "deny" and enclosing_kind == "deny":
            continue
        if mount.kind == "read" and enclosing_kind != "deny":
            continue
        if any(m.path == mount.path for m in kept):
            continue  # a path both written and denied: the first (the write root) wins
        kept.append(mount)
    return kept


def bwrap_arguments(
    policy: SandboxPolicy,
    *,
    stub_dir: str | None,
    stub_file: str | None,
    is_dir: Callable[[str], bool] = os.path.isdir,
) -> list[str]:
    """The bubblewrap options (before ``--``) enforcing `policy`.

    The whole file system read-only; a fresh ``/dev`` and ``/proc`` (the agent's own
    ``/proc/<pid>/environ`` does not exist inside); the write roots and the tmp folder
    read-write; a denied folder replaced by `stub_dir` (an empty folder nobody may list, so a
    read fails with EACCES and says so), or, when something inside it stays visible (an
    exception, a write root), by an empty tmpfs made read-only after the inner mounts; a
    denied file replaced by `stub_file` (or ``/dev/null``). Every capability is dropped, so a
    command started as root cannot undo a mount; a fresh pid, IPC and (without a network
    grant) network namespace; the command dies with the agent and cannot reach its terminal.
    """
    args = [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ]
    mounts = _effective_mounts(policy)
    remount_last: list[str] = []
    for index, mount in enumerate(mounts):
        if mount.kind == "rw":
            args += ["--bind", mount.path, mount.path]
        elif mount.kind == "read":
            args += ["--ro-bind", mount.path, mount.path]
        elif is_dir(mount.path):
            inner = any(
                is_within(m.path, mount.path) and m.path != mount.path for m in mounts[index + 1 :]
            )
            if inner or stub_dir is None:
                args += ["--tmpfs", mount.path]
                remount_last += ["--remount-ro", mount.path]
            else:
                args += ["--ro-bind", stub_dir, mount.path]
        else:
            args += ["--ro-bind", stub_file or "/dev/null", mount.path]
    args += remount_last
    args += ["--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc"]
    if not policy.network:
        args.append("--unshare-net")
    args += ["--die-with-parent", "--new-session"]
    return args


# --- Landlock --------------------------------------------------------------------------------

Right = Literal[
    "execute",
    "read_file",
    "read_dir",
    "write_file",
    "truncate",
    "remove_dir",
    "remove_file",
    "make_char",
    "make_dir",
    "make_reg",
    "make_sock",
    "make_fifo",
    "make_block",
    "make_sym",
    "refer",
]

READ_RIGHTS: frozenset[Right] = frozenset({"execute", "read_file", "read_dir"})
WRITE_RIGHTS: frozenset[Right] = frozenset(get_args(Right))
"""Every right: a writable folder may also be read and run from."""
FILE_RIGHTS: frozenset[Right] = frozenset({"execute", "read_file", "write_file", "truncate"})
"""The rights that mean something on a file (the kernel refuses the others on one)."""
FOLDER_ONLY_RIGHTS: frozenset[Right] = WRITE_RIGHTS - FILE_RIGHTS
"""The rights a folder on the way to a denied path keeps: list it, create and remove in it;
never read or write a file (a rule on a folder covers everything below it)."""
DEVICE_RIGHTS: frozenset[Right] = frozenset({"read_file", "write_file", "truncate"})


def landlock_unenforced(policy: SandboxPolicy) -> tuple[str, ...]:
    """The denied paths Landlock leaves readable: the ones inside a writable folder."""
    writable = policy.writable()
    return tuple(
        d for d in policy.deny_paths if any(is_within(d, root) and d != root for root in writable)
    )


@dataclass(frozen=True, slots=True)
class LandlockRule:
    """Grant `rights` on `path` and everything below it."""

    path: str
    rights: frozenset[Right]


def landlock_rules(
    policy: SandboxPolicy,
    *,
    list_dir: Callable[[str], Iterable[str]] = os.listdir,
    kind: Callable[[str], PathKind | None] = path_kind,
) -> list[LandlockRule]:
    """The Landlock rules enforcing `policy`'s files part.

    Grants: read (and execute) from ``/``; read and write on each write root and the tmp
    folder; read and write on the usual device files; read on the exceptions. The read grant
    is split around each denied path: the folders on the way down keep only the right to be
    listed (so ``ls ~`` works; a rule on a folder covers everything below it), their other
    entries get the full grant, the denied path gets nothing. Symlinks get no rule of their
    own (a rule follows them to their target, which is covered where it lives).

    A denied path inside a writable folder is not split out (`landlock_unenforced`): a
    folder on the way to it would lose the right to read and write the files created in it
    later, so ``echo > new.txt`` beside a ``.env`` would fail. Bubblewrap hides those.
    """
    denied = tuple(d for d in policy.deny_paths if d not in landlock_unenforced(policy))
    rules: list[LandlockRule] = []

    def add(path: str, rights: frozenset[Right], path_kind_: PathKind | None) -> None:
        granted = rights if path_kind_ == "dir" else rights & FILE_RIGHTS
        if granted:
            rules.append(LandlockRule(path, granted))

    def grant(path: str, rights: frozenset[Right]) -> None:
        here = kind(path)
        if here is None or here == "symlink":
            return
        inner = [d for d in denied if is_within(d, path)]
        if not inner:
            add(path, rights, here)
            return
        if path in inner or here != "dir":
            return
        add(path, rights & FOLDER_ONLY_RIGHTS, here)
        try:
            names = sorted(list_dir(path))
        except OSError:
            return
        for name in names:
            grant(path.rstrip("/") + "/" + name, rights)

    grant("/", READ_RIGHTS)
    for root in policy.writable():
        grant(root, WRITE_RIGHTS)
    for device in DEVICE_FILES:
        if kind(device) is not None:
            rules.append(LandlockRule(device, DEVICE_RIGHTS))
    for exception in policy.read_exceptions:
        if kind(exception) == "file":
            rules.append(LandlockRule(exception, frozenset({"read_file"})))
    return rules
