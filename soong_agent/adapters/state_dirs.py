"""The folders the core keeps its own state in inside the project (task logs, team mailboxes,
member worktrees), opened one component at a time without following a symbolic link.

A repository may ship ``.soong-agent/tasks`` (or ``.soong-agent`` itself) as a link to a folder
elsewhere; followed, the core would write its logs, or check out worktrees, wherever the link
points (AGT-1, TEAM-4, SBX-1). So every component from the *anchor* down to the state folder
must be a real folder: missing ones are made with ``mkdir`` in the folder opened just before
(never through a link), and a link is refused with `SandboxViolation` naming it. Files are then
opened relative to the folder's descriptor with ``O_NOFOLLOW``, so no link swapped in between
the check and the use redirects anything.

The anchor is the project when the state folder lies inside it. Without a project, it is the
folder holding the last ``.soong-agent`` component of the state folder's path (the layout of
every default, ``<project>/.soong-agent/...``). A folder outside the project that the user
named in their own config has no anchor: it is taken as it is (links followed), and only the
folders the core makes inside it are checked. Not an adapter family: any may import it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from soong_agent.ports.errors import SandboxViolation

STATE_FOLDER = ".soong-agent"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def link_refused(path: str | os.PathLike[str], what: str) -> SandboxViolation:
    """The error for a state folder (or a component above it) that is a symbolic link."""
    return SandboxViolation(
        f"{os.fspath(path)} is a symbolic link; soong-agent keeps {what} only in a real folder "
        "inside the project: remove the link"
    )


def anchor_of(folder: Path, project: Path | None) -> Path | None:
    """The folder from which every component down to `folder` (absolute, normalised) must be
    a real folder; None for a folder of the user's own choosing outside the project."""
    if project is not None:
        root = Path(os.path.abspath(project))
        return root if folder == root or root in folder.parents else None
    parts = folder.parts
    for i in range(len(parts) - 1, 0, -1):
        if parts[i] == STATE_FOLDER:
            return Path(*parts[:i])
    return None


class StateDir:
    """One state folder (`path`) and how it is opened: below its anchor, link by link.

    `what` names what the folder holds in the refusal (``its task logs``).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, what: str, project: str | os.PathLike[str] | None
    ) -> None:
        self.path = Path(os.path.abspath(path))
        self.what = what
        self.anchor = anchor_of(self.path, None if project is None else Path(project))

    def open(self, *sub: str, create: bool) -> int | None:
        """A descriptor of the folder ``path/sub…`` (the caller closes it), or None when it does
        not exist and `create` is false. Missing folders are made when `create` (each new entry
        made durable in its parent); SandboxViolation when a component at or below the anchor
        (the `sub` folders always) is a symbolic link."""
        if self.anchor is not None:
            start = self.anchor
            parts = [*self.path.relative_to(self.anchor).parts, *sub]
        else:
            start, parts = self.path, list(sub)
        try:
            fd = os.open(start, _DIR_FLAGS)
        except FileNotFoundError:
            if not create:
                return None
            os.makedirs(start, exist_ok=True)
            fd = os.open(start, _DIR_FLAGS)
        where = start
        try:
            for name in parts:
                where = where / name
                child = _open_child(fd, name, where, create=create, what=self.what)
                os.close(fd)
                fd = child
                if fd < 0:
                    return None
        except BaseException:
            if fd >= 0:
                os.close(fd)
            raise
        return fd


def open_listed(parent: int, name: str) -> int | None:
    """The folder `name` found in a listing of the folder `parent`, opened without following a
    link (the caller closes it); None when it is gone, a link or not a folder."""
    try:
        return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return None
        raise


def _open_child(parent: int, name: str, where: Path, *, create: bool, what: str) -> int:
    """The folder `name` in the folder `parent`, opened without following a link (made first
    when missing and `create`); -1 when it is missing and not `create`."""
    try:
        return _open_real_folder(parent, name, where, what)
    except FileNotFoundError:
        if not create:
            return -1
    try:
        os.mkdir(name, 0o755, dir_fd=parent)
    except FileExistsError:
        pass  # made by another process since the look: opened (and checked) below
    else:
        os.fsync(parent)
    return _open_real_folder(parent, name, where, what)


def _open_real_folder(parent: int, name: str, where: Path, what: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        raise link_refused(where, what)
    raise NotADirectoryError(
        errno.ENOTDIR, f"not a folder, where soong-agent keeps {what}", str(where)
    )
