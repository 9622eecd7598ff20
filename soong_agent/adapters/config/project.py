"""Which folder is `<project>` (CFG-4)."""

from __future__ import annotations

from pathlib import Path

from soong_agent.ports.errors import UsageError


def resolve_project(path: str | None, *, cwd: Path) -> Path:
    """The project folder: `path` (relative to `cwd`), or `cwd` when None.

    A file means its parent folder. The result has its symlinks resolved, once; every later
    boundary check should use it. A path that does not exist raises UsageError naming it.
    """
    given = cwd if path is None else Path(path)
    candidate = given if given.is_absolute() else cwd / given
    try:
        exists = candidate.exists()
        is_dir = candidate.is_dir()
    except OSError as exc:
        raise UsageError(f"project path {str(given)!r} cannot be read: {exc.strerror}") from None
    if not exists:
        hint = " (~ is not expanded; give the full path)" if str(given).startswith("~") else ""
        raise UsageError(f"project path {str(given)!r} does not exist{hint}")
    folder = candidate if is_dir else candidate.parent
    try:
        return folder.resolve(strict=True)
    except OSError as exc:
        raise UsageError(f"project path {str(given)!r} cannot be resolved: {exc}") from None
