"""The bubblewrap options enforcing a sandbox policy (SBX-3): mounts in an order where an
inner mount always comes after the one it sits in. Pure: tested without bubblewrap."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from soong_agent.adapters.ossandbox.paths import is_within
from soong_agent.ports.ossandbox import SandboxPolicy

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
    exception, a write root), by an empty tmpfs made read-only after the inner mounts; without
    a network grant an empty ``/run`` (the host's service sockets out of reach); a
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
    if not policy.network and is_dir("/run"):
        # without a network of its own a command has no business with the host's sockets in
        # /run (docker.sock, D-Bus, the user's runtime folder): an empty /run (mounted first,
        # so a write root under it is still bound in)
        args += ["--tmpfs", "/run"]
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
