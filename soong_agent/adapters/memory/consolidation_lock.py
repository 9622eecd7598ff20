"""The consolidation lock of a memory folder: ``<folder>/.consolidation.lock``.

An exclusive, non-blocking `flock` on the file, so that one consolidation pass runs at a time
across processes (a second one skips); the file's mtime is the start of the last pass (0 or no
file: never). The file is opened with ``O_NOFOLLOW``: a symbolic link in its place is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

from soong_agent.ports.errors import UsageError
from soong_agent.ports.memory import ConsolidationClaim

LOCK_FILE = ".consolidation.lock"
"""In the memory folder; its mtime is the start of the last pass (0: never)."""

_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_MODE = 0o600
_DIR_MODE = 0o700


class ConsolidationLockFile:
    """The lock file of the memory folder `folder`."""

    def __init__(self, folder: str) -> None:
        self.path = os.path.join(folder, LOCK_FILE)

    def last_pass(self) -> float | None:
        """The lock file's mtime; None when it is 0 or there is no file."""
        try:
            stamp = os.stat(self.path, follow_symlinks=False).st_mtime
        except FileNotFoundError:
            return None
        return stamp or None

    @contextlib.contextmanager
    def held(self) -> Iterator[ConsolidationClaim | None]:
        """A claim while the lock is held; None when another process (or task) holds it."""
        os.makedirs(os.path.dirname(self.path), mode=_DIR_MODE, exist_ok=True)
        try:
            fd = os.open(self.path, _FLAGS | os.O_EXCL, _MODE)
            created = True
        except FileExistsError:
            fd = os.open(self.path, _FLAGS, _MODE)
            created = False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield None
                return
            if created:
                os.utime(fd, (0, 0))  # never ran
            held = True

            def stamp(when: float) -> None:
                if not held:
                    raise UsageError("the consolidation lock is no longer held")
                os.utime(fd, (when, when))

            try:
                yield ConsolidationClaim(os.fstat(fd).st_mtime or None, stamp)
            finally:
                held = False
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
