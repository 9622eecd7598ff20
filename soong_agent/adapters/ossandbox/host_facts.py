"""Why an OS sandbox mechanism fails on this host, and how to fix it (SBX-3).

`HostFacts` are the host settings that decide whether namespaces and Landlock are allowed (the
user-namespace sysctls, the AppArmor restriction of Ubuntu 23.10+, a container);
`explain_bwrap_failure` / `explain_landlock_failure` turn what the kernel and bwrap said, plus
those facts, into a cause and a fix.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HostFacts:
    """The host settings that decide whether namespaces and Landlock are allowed.

    Each sysctl is None when the file does not exist (the kernel has no such switch).
    """

    euid: int
    kernel: str
    apparmor_restrict_userns: int | None = None
    unprivileged_userns_clone: int | None = None
    max_user_namespaces: int | None = None
    container: str | None = None
    lsm: str | None = None


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _read_int(path: str) -> int | None:
    text = _read_text(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def host_facts() -> HostFacts:
    """Read the settings `HostFacts` names from /proc and /sys."""
    container = None
    if os.path.exists("/.dockerenv"):
        container = "docker"
    elif os.path.exists("/run/.containerenv"):
        container = "podman"
    elif os.environ.get("container"):  # noqa: SIM112 - systemd's name, lower-case
        container = os.environ["container"]  # noqa: SIM112
    return HostFacts(
        euid=os.geteuid(),
        kernel=os.uname().release,
        apparmor_restrict_userns=_read_int(
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"
        ),
        unprivileged_userns_clone=_read_int("/proc/sys/kernel/unprivileged_userns_clone"),
        max_user_namespaces=_read_int("/proc/sys/user/max_user_namespaces"),
        container=container,
        lsm=_read_text("/sys/kernel/security/lsm"),
    )


def explain_bwrap_failure(message: str, facts: HostFacts, *, binary: str) -> tuple[str, str]:
    """(cause, fix) for bwrap failing to set up, from its last error line and the host."""
    said = (message.strip().splitlines() or ["(no message)"])[-1]
    unprivileged = facts.euid != 0
    if unprivileged and facts.apparmor_restrict_userns == 1:
        return (
            "AppArmor restricts unprivileged user namespaces "
            "(kernel.apparmor_restrict_unprivileged_userns = 1, the Ubuntu 23.10+ default); "
            f"bwrap said: {said}",
            "allow bwrap a user namespace: put `abi <abi/4.0>, include <tunables/global> "
            f"profile soong-bwrap {binary} flags=(unconfined) {{ userns, }}` in "
            "/etc/apparmor.d/soong-bwrap and run `sudo apparmor_parser -r "
            "/etc/apparmor.d/soong-bwrap`; or, for every program, `sudo sysctl -w "
            "kernel.apparmor_restrict_unprivileged_userns=0`",
        )
    if unprivileged and facts.unprivileged_userns_clone == 0:
        return (
            "unprivileged user namespaces are switched off "
            f"(kernel.unprivileged_userns_clone = 0); bwrap said: {said}",
            "`sudo sysctl -w kernel.unprivileged_userns_clone=1` (and the same line in "
            "/etc/sysctl.d/ to keep it)",
        )
    if facts.max_user_namespaces == 0:
        return (
            "user namespaces are limited to none (user.max_user_namespaces = 0); "
            f"bwrap said: {said}",
            "`sudo sysctl -w user.max_user_namespaces=15000` (and in /etc/sysctl.d/ to keep it)",
        )
    if "RTM_NEWADDR" in said or "loopback" in said:
        return (
            f"the command's own network (a loopback interface) cannot be set up here: {said}",
            "typical in a container without CAP_NET_ADMIN: give it that capability, or rely "
            "on Landlock + seccomp (used automatically)",
        )
    if "proc" in said and ("mount" in said.lower() or "Can't" in said):
        return (
            f"a fresh /proc cannot be mounted here (a container masks parts of /proc): {said}",
            "run the container with `--security-opt systempaths=unconfined` (Docker) or rely "
            "on Landlock + seccomp (used automatically)",
        )
    if facts.container:
        return (
            f"this {facts.container} container refuses new namespaces: {said}",
            "start the container with `--security-opt seccomp=unconfined --security-opt "
            "apparmor=unconfined`, or rely on Landlock + seccomp (used automatically)",
        )
    if "namespace" in said or "Operation not permitted" in said or "uid map" in said:
        return (
            f"this host refuses new (user) namespaces: {said}",
            "check kernel.unprivileged_userns_clone, user.max_user_namespaces and the "
            "AppArmor/SELinux policy for bwrap",
        )
    return f"bwrap failed: {said}", ""


def explain_landlock_failure(code: int, facts: HostFacts) -> tuple[str, str]:
    """(cause, fix) for the Landlock ABI query failing with errno `code`."""
    if code == errno.EOPNOTSUPP:
        active = f" (active: {facts.lsm})" if facts.lsm else ""
        return (
            "Landlock is built into this kernel but not enabled at boot" + active,
            "add landlock to the kernel's lsm= boot parameter (e.g. "
            "lsm=landlock,lockdown,yama,integrity,apparmor,bpf) and reboot",
        )
    if code == errno.ENOSYS and facts.container:
        return (
            f"the Landlock system calls are refused inside this {facts.container} container "
            "(its seccomp profile predates them)",
            "update the container runtime, or start it with `--security-opt seccomp=unconfined`",
        )
    if code == errno.ENOSYS:
        return (
            f"this kernel ({facts.kernel}) has no Landlock (Linux 5.13+ built with "
            "CONFIG_SECURITY_LANDLOCK=y is needed)",
            "use a kernel with Landlock (most distributions' kernels since 2022 have it)",
        )
    return f"Landlock is unavailable: {os.strerror(code)}", ""
