"""The mailbox port: one append-only inbox per team member, and the typed mails they exchange.

An inbox is a JSON-lines log, ``<team>/<member>.inbox.jsonl``: each line is a `Mail` (numbered
1, 2, … by the mailbox) or a `ReadMark` (the member has read every mail up to ``upto``). Every
line is written whole and ends in a newline, so an unterminated last line is a write a crash cut
short: it is ignored on read and dropped before the next append. A terminated line that is
neither is skipped (and reported by `parse_inbox`), so one bad line never silences an inbox.

The mail and line types, the name rules and the checks `Mailbox.send` makes live here, so the
file adapter and the fake refuse exactly the same mails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Protocol, get_args, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from soong_agent.ports.defaults import no_entries
from soong_agent.ports.errors import UsageError

MailKind = Literal[
    "message",
    "shutdown_request",
    "shutdown_ack",
    "plan_approval_request",
    "plan_approval",
    "handoff",
    "ack",
]
MAIL_KINDS: tuple[str, ...] = get_args(MailKind)

LEAD = "lead"
"""The team lead's name; every other member name is a slug."""
MEMBER_RULE = (
    "lowercase letters, digits and '-', starting with a letter or digit, at most 64 characters "
    "(or 'lead')"
)
TEAM_RULE = "letters, digits, '_' and '-', starting with a letter or digit, at most 128"
INBOX_SUFFIX = ".inbox.jsonl"
MAX_ID_LENGTH = 200

_MEMBER = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_TEAM = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


class Mail(BaseModel):
    """One mail in one inbox."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq: int = Field(default=0, ge=0, description="1, 2, … per inbox; 0 before it is sent")
    id: str = Field(description="unique in the inbox; given by the sender")
    at: float = Field(description="seconds since the epoch (the clock port)")
    sender: str = Field(description="a member name or 'lead'")
    to: str = Field(description="a member name or 'lead'")
    kind: MailKind
    body: str = ""
    data: dict[str, Any] = Field(
        default_factory=no_entries,
        description=(
            "by kind: plan_approval {approved: bool, note: str}; handoff {task, step_id, "
            "summary, artifacts: [str]}; ack {of: a mail id}"
        ),
    )


class ReadMark(BaseModel):
    """A line of an inbox saying its member has read every mail up to `upto`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["read"] = "read"
    upto: int = Field(ge=0)


InboxLine = Annotated[Mail | ReadMark, Field(discriminator="kind")]
_LINE: TypeAdapter[Mail | ReadMark] = TypeAdapter(InboxLine)


class MailRefused(UsageError):
    """A mail, team or member name the mailbox will not take; nothing was written."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(f"mail refused: {problem}")


def team_problem(team: str) -> str | None:
    """Why `team` cannot name a team folder, or None when it can."""
    if _TEAM.fullmatch(team) is None:
        return f"team {team!r} is not a team name ({TEAM_RULE})"
    return None


def member_problem(member: str, role: str = "member") -> str | None:
    """Why `member` cannot name an inbox, or None when it can; `role` names it in the message."""
    if member != LEAD and _MEMBER.fullmatch(member) is None:
        return f"{role} {member!r} is not a member name ({MEMBER_RULE})"
    return None


def check_names(team: str, member: str) -> None:
    """MailRefused unless `team` and `member` can name an inbox."""
    problem = team_problem(team) or member_problem(member)
    if problem is not None:
        raise MailRefused(problem)


def mail_problem(mail: Mail) -> str | None:
    """Why `mail` cannot be sent, or None when it can: its kind, names, id and the data its kind
    needs (a mail built with `model_construct` skips pydantic, so the kind is checked too)."""
    if mail.kind not in MAIL_KINDS:
        return f"unknown mail kind {mail.kind!r}; the kinds are {', '.join(MAIL_KINDS)}"
    problem = member_problem(mail.sender, "sender") or member_problem(mail.to, "recipient")
    if problem is not None:
        return problem
    if not mail.id or len(mail.id) > MAX_ID_LENGTH:
        return f"a mail id is 1 to {MAX_ID_LENGTH} characters, got {len(mail.id)}"
    return _data_problem(mail.kind, mail.data)


def check_mail(team: str, mail: Mail) -> None:
    """MailRefused unless `mail` can be sent in `team` (see `mail_problem`)."""
    problem = team_problem(team) or mail_problem(mail)
    if problem is not None:
        raise MailRefused(problem)


def _data_problem(kind: str, data: dict[str, Any]) -> str | None:
    where = f"a {kind} mail"
    if kind == "plan_approval":
        if not isinstance(data.get("approved"), bool):
            return f"{where} needs data.approved, true or false"
        if not isinstance(data.get("note", ""), str):
            return f"{where}: data.note must be text"
    elif kind == "handoff":
        for key in ("task", "summary"):
            if not isinstance(data.get(key), str) or not data[key]:
                return f"{where} needs data.{key}, a non-empty text"
        if not isinstance(data.get("step_id", ""), str):
            return f"{where}: data.step_id must be text"
        artifacts = data.get("artifacts", [])
        if not isinstance(artifacts, list) or not all(isinstance(a, str) for a in artifacts):
            return f"{where}: data.artifacts must be a list of texts"
    elif kind == "ack" and (not isinstance(data.get("of"), str) or not data["of"]):
        return f"{where} needs data.of, the id of the mail it acknowledges"
    return None


def encode_line(line: Mail | ReadMark) -> bytes:
    """One line of an inbox (compact JSON, a newline in a string escaped); MailRefused when
    the mail's data is not JSON."""
    try:
        return line.model_dump_json().encode("utf-8") + b"\n"
    except PydanticSerializationError as exc:
        raise MailRefused(f"data is not JSON: {exc}") from exc


@dataclass(slots=True)
class ParsedInbox:
    """An inbox's bytes as read: its mails in order (and their ids), the highest sequence
    number and read mark seen (neither goes backwards), the length of the whole lines (where a
    writer cuts a torn tail), whether a torn last line follows them, and one line per line
    skipped."""

    mails: list[Mail] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    last_seq: int = 0
    read_upto: int = 0
    valid_bytes: int = 0
    lines: int = 0
    problems: list[str] = field(default_factory=list)
    torn: bool = False

    def add(self, mail: Mail) -> None:
        """Take in one mail as read or written."""
        self.mails.append(mail)
        self.ids.add(mail.id)
        self.last_seq = max(self.last_seq, mail.seq)


def parse_inbox(data: bytes, into: ParsedInbox | None = None) -> ParsedInbox:
    """Fold `data` (the bytes after `into.valid_bytes`, or a whole inbox) into `into`."""
    parsed = into if into is not None else ParsedInbox()
    parsed.torn = False
    offset = 0
    while offset < len(data):
        end = data.find(b"\n", offset)
        number = parsed.lines + 1
        if end < 0:
            parsed.torn = True
            break
        try:
            line = _LINE.validate_json(data[offset:end])
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "line"
            parsed.problems.append(f"line {number}: not a mail, skipped: {where}: {first['msg']}")
        else:
            if isinstance(line, ReadMark):
                parsed.read_upto = max(parsed.read_upto, line.upto)
            else:
                parsed.add(line)
        parsed.lines += 1
        parsed.valid_bytes += end + 1 - offset
        offset = end + 1
    return parsed


def numbered(mail: Mail, inbox: ParsedInbox) -> Mail:
    """`mail` with the next sequence number of `inbox`; MailRefused when its id is taken."""
    if mail.id in inbox.ids:
        raise MailRefused(f"mail id {mail.id!r} is already in the inbox of {mail.to!r}")
    return mail.model_copy(update={"seq": inbox.last_seq + 1})


def next_mark(inbox: ParsedInbox, upto: int) -> int | None:
    """The read mark `mark_read(upto)` writes (`upto`, at most the last mail), or None when it
    would not move the mark forward."""
    mark = min(upto, inbox.last_seq)
    return mark if mark > inbox.read_upto else None


@runtime_checkable
class Mailbox(Protocol):
    """The inboxes of every team. Calls are short and synchronous (the application makes them
    from a worker thread), but `wait_for_mail`, a coroutine: a member waiting for mail holds no
    thread, and its caller can stop the wait by cancelling it."""

    def send(self, team: str, mail: Mail) -> Mail:
        """Append `mail` to the inbox of `mail.to` under an exclusive lock and fsync.

        Args:
            team: the team (a session id or slug).
            mail: the mail; its `seq` is ignored.

        Returns:
            The mail as written, with its sequence number in the recipient's inbox.

        Raises:
            MailRefused: an unknown kind, a bad team, sender or recipient name, an id already in
                the inbox, or data the kind needs missing (nothing written).
        """
        ...

    def unread(self, team: str, member: str) -> list[Mail]:
        """The mails after the member's read mark, in order (none when it has no inbox)."""
        ...

    def mark_read(self, team: str, member: str, upto: int) -> None:
        """Durably mark every mail up to `upto` read (at most the last mail); a mark below the
        current one changes nothing."""
        ...

    def inbox(self, team: str, member: str) -> list[Mail]:
        """Every mail of the member's inbox, read or not, in order."""
        ...

    def members(self, team: str) -> list[str]:
        """The members of `team` that have an inbox, sorted."""
        ...

    async def wait_for_mail(self, team: str, member: str, *, timeout_s: float) -> bool:
        """Wait until the member has unread mail, sent by this process or another.

        Args:
            team: the team.
            member: the member whose inbox to watch (a member name or 'lead').
            timeout_s: the longest to wait (0: only look).

        Returns:
            True when the member has unread mail (at once when it has some already; read it
            with `unread`), False when the time ran out first.

        Raises:
            MailRefused: a bad team or member name.
        """
        ...
