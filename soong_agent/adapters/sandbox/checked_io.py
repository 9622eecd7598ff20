"""Opening paths the policy has checked: beneath the project, errors naming the path as the user
knows it, hard links to sensitive files recognised."""

from __future__ import annotations

import os
import stat

from soong_agent.adapters.sandbox import safe_io
from soong_agent.adapters.sandbox.paths import PathPolicy
from soong_agent.domain.permissions.targets import relative_parts
from soong_agent.ports.errors import SandboxViolation


def with_display(exc: OSError, display: str) -> OSError:
    """The same kind of OSError, naming the path as the user knows it."""
    if exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror or os.strerror(exc.errno), display)


def os_error(kind: type[OSError], code: int, display: str) -> OSError:
    """An OSError of `kind` for `code`, naming `display`."""
    return kind(code, os.strerror(code), display)


def open_in_project(policy: PathPolicy, resolved: str, flags: int, display: str) -> int:
    """A descriptor for the checked path `resolved` inside the project, no symlink followed."""
    project = policy.project
    parts = relative_parts(resolved, project)
    try:
        if not parts:
            return safe_io.open_root(project)
        return safe_io.open_beneath(project, parts, flags, display=display)
    except OSError as exc:
        raise with_display(exc, display) from None


def hard_link_violation(display: str, action: str = "write to") -> SandboxViolation:
    """The refusal of a write to (or a guarded read of) a file with several names."""
    return SandboxViolation(
        f"{action} {display!r} refused: the file has more than one hard "
        "link, and another name for it may lie outside the sandbox"
    )


def sensitive_link_violation(display: str, action: str) -> SandboxViolation:
    """The refusal of a file that is another name of a sensitive file."""
    return SandboxViolation(
        f"{action} {display!r} refused: it is a hard link to a sensitive "
        "file, which is never read, written or listed"
    )


class LinkGuard:
    """Recognises hard links to sensitive files; the sensitive inodes are read at most once."""

    def __init__(self, policy: PathPolicy) -> None:
        self._policy = policy
        self._inodes: frozenset[tuple[int, int]] | None = None

    def is_sensitive_link(self, st: os.stat_result) -> bool:
        """Whether the regular file `st` has another name under a literal sensitive path."""
        if not stat.S_ISREG(st.st_mode) or st.st_nlink <= 1:
            return False
        if self._inodes is None:
            self._inodes = self._policy.sensitive_inodes()
        return (st.st_dev, st.st_ino) in self._inodes
