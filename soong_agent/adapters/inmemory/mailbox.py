"""`InMemoryMailbox`: the Mailbox fake. Each inbox is kept as the bytes its file would hold, so a
test can tear or corrupt one behind the mailbox's back (`raw`, `put_raw`); sends and read marks
are checked, refused and written exactly as `FileMailbox` does."""

from __future__ import annotations

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

    def _parsed(self, key: tuple[str, str]) -> tuple[bytes, ParsedInbox]:
        data = self._inboxes.get(key, b"")
        return data, parse_inbox(data)
