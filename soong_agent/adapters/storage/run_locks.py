"""Which `running` runs a live process still executes: one advisory lock file per run.

The store that writes a run's first row takes an exclusive `flock` on
``<database>.runs/<run id>.lock`` before the row is written, and lets it go (removing the file)
once it has written the run's end. The kernel lets the lock go when the process dies, however it
dies. So a run whose row says `running` but whose lock nobody holds was left by a process that
stopped before it could save the run's end (killed, or its last write refused): the store
reports it, and writes it, as `interrupted`.

`flock` locks belong to an open file, not to a process, so two stores of one process see each
other's runs as held too (a `fcntl`/POSIX lock would not). Where `fcntl` is missing (Windows),
every run is taken as held: a run is then never reported interrupted.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms we test
    fcntl = None  # type: ignore[assignment]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


class RunLocks:
    """The locks of the runs this store writes, and the test of another process's runs.

    Used only on the store's worker thread."""

    def __init__(self, db_path: Path) -> None:
        self.folder = db_path.with_name(db_path.name + ".runs")
        self._held: dict[str, int] = {}

    def _file(self, run_id: str) -> Path:
        return self.folder / (_UNSAFE.sub("_", run_id) + ".lock")

    def hold(self, run_id: str) -> None:
        """Take the run's lock (once, before its first row is written). When no lock file can
        be made (a folder that cannot be written, where the database cannot be either), the
        run goes on without one."""
        if fcntl is None or run_id in self._held:
            return
        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self._file(run_id), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return  # (a read-only folder: the database write that follows reports the problem)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return
        self._held[run_id] = fd

    def release(self, run_id: str) -> None:
        """Let the run's lock go (its end is written): the file is removed, then unlocked."""
        fd = self._held.pop(run_id, None)
        if fd is None:
            return
        with contextlib.suppress(OSError):  # already gone: nothing to tidy
            self._file(run_id).unlink()
        os.close(fd)

    def held_elsewhere_or_here(self, run_id: str) -> bool:
        """Whether a live process (this one included) still executes the run."""
        if fcntl is None or run_id in self._held:
            return True
        try:
            fd = os.open(self._file(run_id), os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return False  # never taken, or let go: nobody runs it
        except OSError:
            return True  # cannot tell: do not call a live run interrupted
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return True
        else:  # its owner is gone: tidy the file away
            with contextlib.suppress(OSError):
                self._file(run_id).unlink()
            return False
        finally:
            os.close(fd)

    def close(self) -> None:
        """Let every lock go (the store closes: its runs have ended or will never be saved)."""
        for run_id in list(self._held):
            self.release(run_id)
