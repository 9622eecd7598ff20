"""Which process holds a session (STORE-2): one advisory lock file per claimed session.

A claim takes an exclusive `flock` on ``<database>.sessions/<session>.lock`` and writes who holds
it (pid and host) into the file; releasing it removes the file, then unlocks. The kernel lets the
lock go when the process dies, however it dies, so a claim never outlives its process.

`flock` locks belong to an open file, so a second store of the same process is refused too. A
lock taken on a file that its holder removed meanwhile is not a claim: the path is checked to
still name the locked file, else the claim is tried again on the new one. Where `fcntl` is
missing (Windows), claims always succeed: sessions are then not protected.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
from pathlib import Path

from soong_agent.ports.errors import UsageError
from soong_agent.ports.storage import SessionBusy

try:
    import fcntl
except ImportError:  # pragma: no cover - not on the platforms we test
    fcntl = None  # type: ignore[assignment]

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_ATTEMPTS = 5
"""Tries when the file found was removed by its releasing holder between open and lock."""


def holder_text() -> str:
    """How this process is named to another that finds its claim."""
    return f"pid {os.getpid()} on {socket.gethostname()}"


class SessionLocks:
    """The claims this store holds; used only on the store's worker thread."""

    def __init__(self, db_path: Path) -> None:
        self.folder = db_path.with_name(db_path.name + ".sessions")
        self._held: dict[str, int] = {}

    def _file(self, session_id: str) -> Path:
        digest = hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        return self.folder / f"{_UNSAFE.sub('_', session_id)[:80]}-{digest}.lock"

    def claim(self, session_id: str) -> None:
        """Hold the session, or raise `SessionBusy` naming its holder."""
        if session_id in self._held:
            raise SessionBusy(session_id, holder=f"this process ({holder_text()})")
        if fcntl is None:
            return
        path = self._file(session_id)
        for _ in range(_ATTEMPTS):
            try:
                self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise UsageError(f"cannot claim session {session_id!r} in {path}: {exc}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise SessionBusy(session_id, holder=holder) from None
            except BaseException:
                os.close(fd)
                raise
            if _names(path, fd):
                os.ftruncate(fd, 0)
                os.pwrite(fd, holder_text().encode(), 0)
                self._held[session_id] = fd
                return
            os.close(fd)  # its holder removed it as we opened it: try the new file
        raise SessionBusy(session_id, holder=None)

    def release(self, session_id: str) -> None:
        """Let the claim go (nothing when it is not held): the file is removed, then unlocked."""
        fd = self._held.pop(session_id, None)
        if fd is None:
            return
        with contextlib.suppress(OSError):  # already gone: nothing to tidy
            self._file(session_id).unlink()
        os.close(fd)

    def close(self) -> None:
        """Let every claim go."""
        for session_id in list(self._held):
            self.release(session_id)


def _names(path: Path, fd: int) -> bool:
    """Whether `path` still names the open file `fd`."""
    try:
        on_disk = path.stat()
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)


def _read_holder(fd: int) -> str | None:
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    except OSError:
        return None
    return text or None
