"""The Landlock rules enforcing a sandbox policy (SBX-3). Landlock only grants, so "everything
but ~/.ssh" is the complement: read on every sibling of each folder on the way down to a denied
path, never on the denied path itself. Pure: tested without a kernel feature."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, get_args

from soong_agent.adapters.ossandbox.paths import DEVICE_FILES, PathKind, is_within, path_kind
from soong_agent.ports.ossandbox import SandboxPolicy

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
