"""`PostgresMailbox`: team inboxes in PostgreSQL (TEAM-2, STORE-1), shared by every process and
host that reaches the database.

An inbox is a row of `inboxes` and its lines, mails and read marks, one row each (`mail_sql`,
`line_logs`), read by the same parser as an inbox file (`ports.mailbox.parse_inbox`). A send or
a read mark is one transaction holding the inbox's row lock (``SELECT … FOR UPDATE``): mails get
their numbers in order and an id is used once per inbox, whichever host sends. A send is
checked first exactly as every mailbox checks it (`check_mail`), and notifies the team's channel
when it commits, so a reader waiting in any process wakes at once (`wait_for_mail`, LISTEN);
a reader that cannot listen looks every `fallback_poll_s` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any

from soong_agent.adapters.postgres import mail_sql as sql
from soong_agent.adapters.postgres.line_logs import content
from soong_agent.adapters.postgres.mail_listener import MailListener
from soong_agent.ports.errors import UsageError
from soong_agent.ports.mailbox import (
    Mail,
    MailRefused,
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

if TYPE_CHECKING:
    from psycopg import Connection

    from soong_agent.adapters.postgres.sync_database import PostgresSyncDatabase


class PostgresMailbox:
    """A `Mailbox` in a PostgreSQL database (`PostgresSyncDatabase`).

    Its calls block but `wait_for_mail` (the port is synchronous: the application calls it from
    a worker thread). Besides `MailRefused`, database failures raise `RunError` (`UsageError`
    when the database cannot be reached at all); a send whose connection is lost is tried once
    more on a new one, and is not delivered twice.

    `fallback_poll_s`: how often a wait looks at the inbox while it cannot listen for
    notifications (the connection for LISTEN cannot be made, or was lost), and how long it
    waits before trying that connection again.
    """

    def __init__(self, database: PostgresSyncDatabase, *, fallback_poll_s: float = 2.0) -> None:
        if fallback_poll_s <= 0:
            raise ValueError(f"fallback_poll_s must be positive, not {fallback_poll_s}")
        self._db = database
        database.attach()
        self._fallback_poll_s = fallback_poll_s
        self._listener: MailListener | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresMailbox({self._db.where!r})"

    def send(self, team: str, mail: Mail) -> Mail:
        """Append `mail` to the inbox of `mail.to` and notify the team's channel, in one
        transaction; returns it with its number in that inbox."""
        self._check_open()
        check_mail(team, mail)
        key = (team, mail.to)

        def work(conn: Connection[Any], retrying: bool) -> Mail:
            with conn.transaction():
                sql.TABLES.lock(conn, key, create=True, at=time.time())
                lines = sql.TABLES.read(conn, key)
                inbox = parse_inbox(content(lines))
                if retrying and mail.id in inbox.ids:
                    found = next(m for m in inbox.mails if m.id == mail.id)
                    if found == mail.model_copy(update={"seq": found.seq}):
                        return found  # committed before the connection was lost
                stored = numbered(mail, inbox)
                sql.TABLES.append(
                    conn, key, lines, inbox.valid_bytes, encode_line(stored).decode("utf-8")
                )
                conn.execute(sql.NOTIFY, (sql.channel(team), mail.to))
                return stored

        return self._db.run(work, what=f"send a mail to {mail.to!r} in team {team!r}")

    def unread(self, team: str, member: str) -> list[Mail]:
        """The mails after the member's read mark, in order."""
        inbox = parse_inbox(self._content(team, member))
        return [m for m in inbox.mails if m.seq > inbox.read_upto]

    def mark_read(self, team: str, member: str, upto: int) -> None:
        """Mark every mail up to `upto` read (at most the last); never moves the mark back."""
        self._check_open()
        check_names(team, member)
        key = (team, member)

        def work(conn: Connection[Any], _retrying: bool) -> None:
            with conn.transaction():
                if not sql.TABLES.lock(conn, key, create=False, at=0.0):
                    return  # no inbox, no mail to mark
                lines = sql.TABLES.read(conn, key)
                inbox = parse_inbox(content(lines))
                mark = next_mark(inbox, upto)
                if mark is not None:
                    line = encode_line(ReadMark(upto=mark)).decode("utf-8")
                    sql.TABLES.append(conn, key, lines, inbox.valid_bytes, line)

        self._db.run(work, what=f"mark the mail of {member!r} in team {team!r} read")

    def inbox(self, team: str, member: str) -> list[Mail]:
        """Every mail of the member's inbox, read or not, in order."""
        return parse_inbox(self._content(team, member)).mails

    def members(self, team: str) -> list[str]:
        """The members of `team` that have an inbox, sorted."""
        self._check_open()
        problem = team_problem(team)
        if problem is not None:
            raise MailRefused(problem)

        def work(conn: Connection[Any], _retrying: bool) -> list[tuple[str, str]]:
            return sql.TABLES.keys_of(conn, team)

        keys = self._db.run(work, what=f"list the inboxes of team {team!r}")
        return sorted(member for _, member in keys if member_problem(member) is None)

    async def wait_for_mail(self, team: str, member: str, *, timeout_s: float) -> bool:
        """Wait until `member` of `team` has unread mail, at most `timeout_s` seconds: woken by
        the notification of a send from any process (polling only while it cannot listen).
        True when there is unread mail (at once when there is some already), False when the
        time ran out."""
        self._check_open()
        check_names(team, member)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, timeout_s)
        listener = self._listener
        if listener is None or listener.loop is not loop:
            listener = self._listener = MailListener(self._db, retry_s=self._fallback_poll_s)
        while True:
            listening = timeout_s > 0 and await listener.listen(team)
            woken = listener.waiter(team, member)
            try:
                if await asyncio.to_thread(self.unread, team, member):
                    return True
                left = deadline - loop.time()
                if left <= 0:
                    return False
                wait = left if listening else min(left, self._fallback_poll_s)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken, timeout=wait)
            finally:
                listener.forget(team, member, woken)

    async def close(self) -> None:
        """Stop listening and stop using the database (its pool closes with the last store)."""
        if self._closed:
            return
        self._closed = True
        listener, self._listener = self._listener, None
        if listener is not None and listener.loop is asyncio.get_running_loop():
            await listener.close()
        await asyncio.to_thread(self._db.detach)

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError(f"the mailbox in the {self._db.where} is closed")

    def _content(self, team: str, member: str) -> bytes:
        self._check_open()
        check_names(team, member)

        def work(conn: Connection[Any], _retrying: bool) -> bytes:
            return content(sql.TABLES.read(conn, (team, member)))

        return self._db.run(work, what=f"read the inbox of {member!r} in team {team!r}")
