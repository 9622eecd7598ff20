"""`FileMailbox`: team inboxes as append-only JSON-lines files (``<team>/<member>.inbox.jsonl``).

A send or a read mark takes an exclusive `fcntl.flock` on the inbox file (held by the open file
description, so it excludes other processes and other threads alike), reads what other writers
appended since this process last looked, cuts off a torn last line, writes its own line with
one `write` loop, fsyncs and unlocks by closing. Read marks are lines of the same file, so an
unread mail stays unread across a kill until a mark past it is on disk.

Readers take no lock: a line being written shows up as a torn last line and is ignored until
it is whole. A file gives no notice of a new line: `wait_for_mail` looks at the inbox every
`poll_s`. What a process has read is cached by file identity and length, so a call costs
the new lines only; the cache trusts that nobody rewrites an inbox in place (a hand edit is a
new file: a new inode).

The folders are opened without following a symbolic link (`StateDir`): a project that ships
``.soong-agent/teams`` as a link to a folder elsewhere gets `SandboxViolation` naming it, and
no mail is read or written there; an inbox file that is a link is never opened either.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from soong_agent.adapters.durable_files import write_all
from soong_agent.adapters.state_dirs import StateDir
from soong_agent.ports.mailbox import (
    INBOX_SUFFIX,
    Mail,
    MailRefused,
    ParsedInbox,
    ReadMark,
    check_mail,
    check_names,
    encode_line,
    member_problem,
    next_mark,
    numbered,
    parse_inbox,
    team_problem,
)


@dataclass(slots=True)
class _Cached:
    """What this process has read of one inbox file (one inode)."""

    device: int
    inode: int
    inbox: ParsedInbox


class _View(NamedTuple):
    mails: list[Mail]
    read_upto: int
    problems: list[str]


class FileMailbox:
    """Every team inbox under `root` (created on the first send).

    `project`: the project folder; when `root` lies inside it, every folder from the project
    down is opened without following a link. Without it, the same holds from the folder that
    holds the path's ``.soong-agent`` folder (see `StateDir`). `poll_s`: how often
    `wait_for_mail` looks at the inbox.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        project: str | os.PathLike[str] | None = None,
        poll_s: float = 0.25,
    ) -> None:
        if poll_s <= 0:
            raise ValueError(f"poll_s must be positive, not {poll_s}")
        self._poll_s = poll_s
        self._root = Path(root)
        self._dir = StateDir(root, what="its team mailboxes", project=project)
        self._cache: dict[Path, _Cached] = {}
        self._locks: dict[Path, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    @property
    def root(self) -> Path:
        return self._root

    def path(self, team: str, member: str) -> Path:
        """Where the inbox of `member` in `team` is; MailRefused for a name that cannot be."""
        check_names(team, member)
        return self._root / team / f"{member}{INBOX_SUFFIX}"

    def send(self, team: str, mail: Mail) -> Mail:
        check_mail(team, mail)
        path = self.path(team, mail.to)
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        with self._lock(path):
            folder = self._dir.open(team, create=True)
            assert folder is not None  # made when missing
            try:
                fd = os.open(path.name, flags, 0o644, dir_fd=folder)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    inbox = self._refresh(fd, path, cut_torn=True)
                    stored = numbered(mail, inbox)
                    line = encode_line(stored)
                    write_all(fd, line)
                    os.fsync(fd)
                    inbox.add(stored)
                    inbox.valid_bytes += len(line)
                    inbox.lines += 1
                finally:
                    os.close(fd)  # releases the lock
                if inbox.lines == 1:  # a new file: its entry made durable
                    os.fsync(folder)
            finally:
                os.close(folder)
        return stored

    def unread(self, team: str, member: str) -> list[Mail]:
        view = self._read(team, member)
        return [m for m in view.mails if m.seq > view.read_upto]

    def mark_read(self, team: str, member: str, upto: int) -> None:
        path = self.path(team, member)
        flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        with self._lock(path):
            fd = self._open_inbox(team, path.name, flags)
            if fd is None:
                return  # no inbox, no mail to mark
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                inbox = self._refresh(fd, path, cut_torn=True)
                mark = next_mark(inbox, upto)
                if mark is None:
                    return
                line = encode_line(ReadMark(upto=mark))
                write_all(fd, line)
                os.fsync(fd)
                inbox.read_upto = mark
                inbox.valid_bytes += len(line)
                inbox.lines += 1
            finally:
                os.close(fd)

    def inbox(self, team: str, member: str) -> list[Mail]:
        return self._read(team, member).mails

    def members(self, team: str) -> list[str]:
        problem = team_problem(team)
        if problem is not None:
            raise MailRefused(problem)
        folder = self._dir.open(team, create=False)
        if folder is None:
            return []
        try:
            with os.scandir(folder) as entries:
                files = [e.name for e in entries if e.is_file(follow_symlinks=False)]
        finally:
            os.close(folder)
        names = []
        for file in files:
            name = file[: -len(INBOX_SUFFIX)]
            if file.endswith(INBOX_SUFFIX) and member_problem(name) is None:
                names.append(name)
        return sorted(names)

    async def wait_for_mail(self, team: str, member: str, *, timeout_s: float) -> bool:
        """Look at the inbox every `poll_s` until it holds unread mail (True) or `timeout_s`
        has passed (False)."""
        check_names(team, member)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        while True:
            if await asyncio.to_thread(self.unread, team, member):
                return True
            left = deadline - loop.time()
            if left <= 0:
                return False
            await asyncio.sleep(min(left, self._poll_s))

    def problems(self, team: str, member: str) -> list[str]:
        """The lines of an inbox that were skipped (not a mail nor a read mark), and a torn
        last line if there is one: what a check or a repair would look at."""
        return self._read(team, member).problems

    def _read(self, team: str, member: str) -> _View:
        """A copy of the inbox as on disk now (empty when there is none); no file lock."""
        path = self.path(team, member)
        with self._lock(path):
            fd = self._open_inbox(team, path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            if fd is None:
                return _View([], 0, [])
            try:
                inbox = self._refresh(fd, path, cut_torn=False)
            finally:
                os.close(fd)
            torn = [f"line {inbox.lines + 1}: torn last line ignored"] if inbox.torn else []
            return _View(list(inbox.mails), inbox.read_upto, [*inbox.problems, *torn])

    def _open_inbox(self, team: str, name: str, flags: int) -> int | None:
        """The existing inbox file `name` of `team`, opened with `flags` (never through a
        link); None when there is none."""
        folder = self._dir.open(team, create=False)
        if folder is None:
            return None
        try:
            return os.open(name, flags, dir_fd=folder)
        except FileNotFoundError:
            return None
        finally:
            os.close(folder)

    def _refresh(self, fd: int, path: Path, *, cut_torn: bool) -> ParsedInbox:
        """The inbox as on disk now (the path's thread lock held): the cached prefix, then what
        was appended since. With `cut_torn` (the file lock held too) a torn tail is cut off."""
        info = os.fstat(fd)
        cached = self._cache.get(path)
        if (
            cached is None
            or (cached.device, cached.inode) != (info.st_dev, info.st_ino)
            or info.st_size < cached.inbox.valid_bytes
        ):
            cached = _Cached(info.st_dev, info.st_ino, ParsedInbox())
            self._cache[path] = cached
        inbox = cached.inbox
        tail = os.pread(fd, info.st_size - inbox.valid_bytes, inbox.valid_bytes)
        parse_inbox(tail, into=inbox)
        if inbox.torn and cut_torn:
            os.ftruncate(fd, inbox.valid_bytes)
            os.fsync(fd)
            inbox.torn = False
        return inbox

    def _lock(self, path: Path) -> threading.Lock:
        with self._locks_lock:
            lock = self._locks.get(path)
            if lock is None:
                lock = self._locks[path] = threading.Lock()
            return lock
