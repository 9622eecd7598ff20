"""`InMemoryMailbox`: the Mailbox fake. Each inbox is kept as the bytes its file would hold, so a
test can tear or corrupt one behind the mailbox's back (`raw`, `put_raw`); sends and read marks
are checked, refused and written exactly as `FileMailbox` does. A wait for mail is woken by the
send itself (from any thread), so a test of it needs no clock."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from soong_agent.ports.mailbox import (
    Mail,
    MailRefused,
    ParsedInbox,
    ReadMark,
    check_mail,
    check_names,
    encode_line,
    next_mark,
    numbered,
    parse_inbox,
    team_problem,
)


class InMemoryMailbox:
    """Team inboxes in memory, one byte string per inbox."""

    def __init__(self) -> None:
        self._inboxes: dict[tuple[str, str], bytes] = {}
        self._lock = threading.Lock()
        self._waits: dict[tuple[str, str], set[asyncio.Future[None]]] = {}

    def raw(self, team: str, member: str) -> bytes:
        """The bytes of an inbox (empty when it does not exist)."""
        check_names(team, member)
        with self._lock:
            return self._inboxes.get((team, member), b"")

    def put_raw(self, team: str, member: str, data: bytes) -> None:
        """Replace an inbox's bytes (a crash or a hand edit, for tests)."""
        check_names(team, member)
        with self._lock:
            self._inboxes[(team, member)] = data

    def send(self, team: str, mail: Mail) -> Mail:
        check_mail(team, mail)
        key = (team, mail.to)
        with self._lock:
            data, inbox = self._parsed(key)
            stored = numbered(mail, inbox)
            self._inboxes[key] = data[: inbox.valid_bytes] + encode_line(stored)
            waits = list(self._waits.get((team, mail.to), ()))
        for waiting in waits:  # the wait's own loop sets it: a send may come from any thread
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                waiting.get_loop().call_soon_threadsafe(_wake, waiting)
        return stored

    def unread(self, team: str, member: str) -> list[Mail]:
        inbox = parse_inbox(self.raw(team, member))
        return [m for m in inbox.mails if m.seq > inbox.read_upto]

    def mark_read(self, team: str, member: str, upto: int) -> None:
        check_names(team, member)
        key = (team, member)
        with self._lock:
            if key not in self._inboxes:
                return
            data, inbox = self._parsed(key)
            mark = next_mark(inbox, upto)
            if mark is not None:
                self._inboxes[key] = data[: inbox.valid_bytes] + encode_line(ReadMark(upto=mark))

    def inbox(self, team: str, member: str) -> list[Mail]:
        return parse_inbox(self.raw(team, member)).mails

    def members(self, team: str) -> list[str]:
        problem = team_problem(team)
        if problem is not None:
            raise MailRefused(problem)
        with self._lock:
            return sorted(member for t, member in self._inboxes if t == team)

    async def wait_for_mail(self, team: str, member: str, *, timeout_s: float) -> bool:
        """Wait until the member has unread mail (True), woken by the send, or until
        `timeout_s` has passed (False)."""
        check_names(team, member)
        key = (team, member)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        while True:
            waiting: asyncio.Future[None] = loop.create_future()
            with self._lock:
                self._waits.setdefault(key, set()).add(waiting)
            try:
                if self.unread(team, member):
                    return True
                left = deadline - loop.time()
                if left <= 0:
                    return False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiting, timeout=left)
            finally:
                with self._lock:
                    self._waits[key].discard(waiting)
                    if not self._waits[key]:
                        del self._waits[key]

    def _parsed(self, key: tuple[str, str]) -> tuple[bytes, ParsedInbox]:
        data = self._inboxes.get(key, b"")
        return data, parse_inbox(data)


def _wake(waiting: asyncio.Future[None]) -> None:
    if not waiting.done():
        waiting.set_result(None)
