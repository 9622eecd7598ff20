"""The Mailbox contract, run against the InMemoryMailbox fake, the FileMailbox on real files and the
PostgresMailbox on a real PostgreSQL (`tests/support/postgres.py`): sends get sequence numbers
per inbox, unread follows the read mark, the mark is durable and never goes backwards, unknown
kinds, bad names and missing data are refused with the problem named (nothing written), a torn
last line is ignored on read and cut off by the next append, a line that is not a mail is
skipped; a wait for mail returns at once when there is unread mail, is woken by a send to its
member from another thread, and not by one to another member. For the file adapter alone: the
mark survives a new instance, and several processes sending into one inbox never interleave
their lines."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from soong_agent.adapters.mailbox import FileMailbox
from soong_agent.adapters.postgres import PostgresMailbox, PostgresSettings, PostgresSyncDatabase
from soong_agent.adapters.postgres.mail_sql import TABLES
from soong_agent.ports.mailbox import MAIL_KINDS, Mail, Mailbox, MailRefused
from soong_agent.testing import InMemoryMailbox
from tests.support.postgres_lines import LinesInDatabase

TEAM = "ses_1"
T0 = 1_767_225_600.0


class Backend:
    """One implementation, raw access to an inbox's bytes behind its back, and (for the file
    adapter) a second instance over the same inboxes, as a restarted process would build."""

    def __init__(
        self,
        box: Mailbox,
        raw: Callable[[str, str], bytes],
        put: Callable[[str, str, bytes], None],
        reopen: Callable[[], Mailbox],
    ) -> None:
        self.box = box
        self.raw = raw
        self.put = put
        self.reopen = reopen


def fake_backend(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    fake = InMemoryMailbox()
    return Backend(fake, fake.raw, fake.put_raw, lambda: fake)


def postgres_backend(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    url = str(request.getfixturevalue("postgres_url"))

    def open_box() -> PostgresMailbox:  # a database of its own, as another process has
        database = PostgresSyncDatabase(PostgresSettings(url))
        request.addfinalizer(database.close)
        return PostgresMailbox(database)

    lines = LinesInDatabase(url, TABLES)  # a hand edit: the inbox's rows written anew
    return Backend(open_box(), lines.raw, lines.put, open_box)


def file_backend(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    box = FileMailbox(tmp_path / "mail")

    def raw(team: str, member: str) -> bytes:
        path = box.path(team, member)
        return path.read_bytes() if path.exists() else b""

    def put(team: str, member: str, data: bytes) -> None:
        path = box.path(team, member)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)  # a hand edit: a new file

    return Backend(box, raw, put, lambda: FileMailbox(tmp_path / "mail"))


@pytest.fixture(
    params=[fake_backend, file_backend, postgres_backend],
    ids=["InMemoryMailbox", "FileMailbox", "PostgresMailbox"],
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    factory: Callable[[Path, pytest.FixtureRequest], Backend] = request.param
    return factory(tmp_path, request)


def mail(n: int, *, to: str = "alice", sender: str = "lead", kind: str = "message", **more: Any):
    fields: dict[str, Any] = {
        "id": f"m{n}",
        "at": T0 + n,
        "sender": sender,
        "to": to,
        "kind": kind,
        "body": f"body {n}",
    }
    return Mail(**(fields | more))


def test_every_backend_implements_the_port(backend: Backend) -> None:
    assert isinstance(backend.box, Mailbox)


def test_an_inbox_that_does_not_exist_is_empty(backend: Backend) -> None:
    assert backend.box.unread(TEAM, "alice") == []
    assert backend.box.inbox(TEAM, "alice") == []
    assert backend.box.members(TEAM) == []
    backend.box.mark_read(TEAM, "alice", 5)  # nothing to mark: no inbox is created
    assert backend.box.members(TEAM) == []
    assert backend.raw(TEAM, "alice") == b""


def test_sends_are_numbered_per_inbox_and_read_back_in_order(backend: Backend) -> None:
    sent = [backend.box.send(TEAM, mail(i)) for i in range(1, 4)]
    other = backend.box.send(TEAM, mail(9, to="lead", sender="alice"))
    assert [m.seq for m in sent] == [1, 2, 3]
    assert other.seq == 1
    assert sent[0] == mail(1).model_copy(update={"seq": 1})
    assert backend.box.unread(TEAM, "alice") == sent
    assert backend.box.inbox(TEAM, "alice") == sent
    assert backend.box.unread(TEAM, "lead") == [other]
    assert backend.box.members(TEAM) == ["alice", "lead"]
    assert backend.box.members("ses_2") == []
    assert backend.raw(TEAM, "alice").count(b"\n") == 3


def test_every_kind_with_its_data_is_delivered(backend: Backend) -> None:
    data: dict[str, dict[str, Any]] = {
        "plan_approval": {"approved": False, "note": "split step 2"},
        "handoff": {"task": "build", "step_id": "a", "summary": "did A", "artifacts": ["a.txt"]},
        "ack": {"of": "m1"},
    }
    for n, kind in enumerate(MAIL_KINDS, start=1):
        backend.box.send(TEAM, mail(n, kind=kind, data=data.get(kind, {})))
    got = backend.box.inbox(TEAM, "alice")
    assert [m.kind for m in got] == list(MAIL_KINDS)
    assert got[MAIL_KINDS.index("handoff")].data["artifacts"] == ["a.txt"]


def test_mark_read_moves_the_unread_window(backend: Backend) -> None:
    for i in range(1, 5):
        backend.box.send(TEAM, mail(i))
    backend.box.mark_read(TEAM, "alice", 2)
    assert [m.seq for m in backend.box.unread(TEAM, "alice")] == [3, 4]
    assert [m.seq for m in backend.box.inbox(TEAM, "alice")] == [1, 2, 3, 4]
    backend.box.send(TEAM, mail(5))
    assert [m.seq for m in backend.box.unread(TEAM, "alice")] == [3, 4, 5]
    backend.box.mark_read(TEAM, "alice", 5)
    assert backend.box.unread(TEAM, "alice") == []


def test_mark_read_never_goes_backwards_nor_past_the_last_mail(backend: Backend) -> None:
    for i in range(1, 4):
        backend.box.send(TEAM, mail(i))
    backend.box.mark_read(TEAM, "alice", 3)
    before = backend.raw(TEAM, "alice")
    backend.box.mark_read(TEAM, "alice", 1)
    backend.box.mark_read(TEAM, "alice", 3)
    backend.box.mark_read(TEAM, "alice", -4)
    assert backend.raw(TEAM, "alice") == before  # nothing written
    assert backend.box.unread(TEAM, "alice") == []
    # a mark past the last mail stops at it, so the next mail is still unread
    backend.box.mark_read(TEAM, "alice", 100)
    sent = backend.box.send(TEAM, mail(4))
    assert backend.box.unread(TEAM, "alice") == [sent]


def test_the_read_mark_is_durable(backend: Backend) -> None:
    for i in range(1, 4):
        backend.box.send(TEAM, mail(i))
    backend.box.mark_read(TEAM, "alice", 2)
    again = backend.reopen()
    assert [m.seq for m in again.unread(TEAM, "alice")] == [3]
    assert b'{"kind":"read","upto":2}\n' in backend.raw(TEAM, "alice")
    assert again.send(TEAM, mail(4)).seq == 4


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ({"kind": "gossip"}, "unknown mail kind 'gossip'"),
        ({"to": "Alice"}, "recipient 'Alice' is not a member name"),
        ({"to": "../x"}, "recipient '../x'"),
        ({"to": ""}, "recipient ''"),
        ({"to": "a" * 65}, "is not a member name"),
        ({"sender": "bob/x"}, "sender 'bob/x'"),
        ({"id": ""}, "a mail id is 1 to 200 characters"),
        ({"kind": "plan_approval"}, "plan_approval mail needs data.approved"),
        ({"kind": "plan_approval", "data": {"approved": "yes"}}, "data.approved"),
        ({"kind": "plan_approval", "data": {"approved": True, "note": 3}}, "data.note"),
        ({"kind": "handoff", "data": {"summary": "s"}}, "handoff mail needs data.task"),
        ({"kind": "handoff", "data": {"task": "t"}}, "handoff mail needs data.summary"),
        (
            {"kind": "handoff", "data": {"task": "t", "summary": "s", "artifacts": "a"}},
            "data.artifacts",
        ),
        ({"kind": "ack"}, "ack mail needs data.of"),
        ({"data": {"x": object()}}, "data is not JSON"),
    ],
)
def test_a_bad_mail_is_refused_with_its_problem_named(
    backend: Backend, bad: dict[str, Any], named: str
) -> None:
    backend.box.send(TEAM, mail(1))
    before = backend.raw(TEAM, "alice")
    fields = mail(2).model_dump() | bad
    bad_mail = Mail.model_construct(**fields)  # as a caller skipping validation would
    with pytest.raises(MailRefused, match="mail refused: ") as caught:
        backend.box.send(TEAM, bad_mail)
    assert named in str(caught.value)
    assert backend.raw(TEAM, "alice") == before
    assert backend.box.members(TEAM) == ["alice"]


def test_an_unknown_kind_is_refused_when_the_mail_is_built_too() -> None:
    with pytest.raises(ValueError, match="kind"):
        Mail(id="x", at=T0, sender="lead", to="alice", kind="gossip")  # type: ignore[arg-type]


def test_a_mail_id_is_used_once_per_inbox(backend: Backend) -> None:
    backend.box.send(TEAM, mail(1))
    with pytest.raises(MailRefused, match="mail id 'm1' is already in the inbox of 'alice'"):
        backend.box.send(TEAM, mail(1))
    assert backend.box.send(TEAM, mail(1, to="bob")).seq == 1  # another inbox


@pytest.mark.parametrize("team", ["", "../x", "a/b", ".", "a b"])
def test_team_names_must_be_plain(backend: Backend, team: str) -> None:
    with pytest.raises(MailRefused, match="not a team name"):
        backend.box.send(team, mail(1))
    with pytest.raises(MailRefused, match="not a team name"):
        backend.box.unread(team, "alice")
    with pytest.raises(MailRefused, match="not a team name"):
        backend.box.members(team)


def test_member_names_are_checked_on_read_too(backend: Backend) -> None:
    for call in (backend.box.unread, backend.box.inbox):
        with pytest.raises(MailRefused, match=r"member '\.\./lead' is not a member name"):
            call(TEAM, "../lead")
    with pytest.raises(MailRefused):
        backend.box.mark_read(TEAM, "Lead", 1)


def test_a_torn_last_line_is_ignored_then_cut_off_by_the_next_append(backend: Backend) -> None:
    backend.box.send(TEAM, mail(1))
    backend.box.send(TEAM, mail(2))
    whole = backend.raw(TEAM, "alice")
    backend.put(TEAM, "alice", whole + b'{"seq":3,"id":"m3","at":1,"sen')
    assert [m.seq for m in backend.box.unread(TEAM, "alice")] == [1, 2]
    assert [m.seq for m in backend.reopen().inbox(TEAM, "alice")] == [1, 2]
    sent = backend.box.send(TEAM, mail(3))
    assert sent.seq == 3
    assert backend.raw(TEAM, "alice") == whole + sent.model_dump_json().encode() + b"\n"
    assert [m.id for m in backend.box.inbox(TEAM, "alice")] == ["m1", "m2", "m3"]


def test_a_torn_last_line_is_cut_off_by_a_read_mark_too(backend: Backend) -> None:
    backend.box.send(TEAM, mail(1))
    whole = backend.raw(TEAM, "alice")
    backend.put(TEAM, "alice", whole + b'{"kind":"rea')
    backend.box.mark_read(TEAM, "alice", 1)
    assert backend.raw(TEAM, "alice") == whole + b'{"kind":"read","upto":1}\n'
    assert backend.box.unread(TEAM, "alice") == []


def test_a_line_that_is_not_a_mail_is_skipped(backend: Backend) -> None:
    backend.box.send(TEAM, mail(1))
    backend.box.send(TEAM, mail(2))
    first, second = backend.raw(TEAM, "alice").splitlines(keepends=True)
    backend.put(TEAM, "alice", first + b"not json\n" + b'{"kind":"gossip"}\n' + second)
    assert [m.id for m in backend.box.inbox(TEAM, "alice")] == ["m1", "m2"]
    assert backend.box.send(TEAM, mail(3)).seq == 3


def test_inboxes_are_per_team(backend: Backend) -> None:
    backend.box.send(TEAM, mail(1))
    backend.box.send("ses_2", mail(1, to="bob"))
    assert backend.box.members(TEAM) == ["alice"]
    assert backend.box.members("ses_2") == ["bob"]
    assert backend.box.unread("ses_2", "alice") == []


# --- waiting for mail ------------------------------------------------------------------------

WAIT_S = 60.0
"""Longer than any wait here should take: a wait that is not woken fails the test, slowly."""


async def test_a_wait_returns_at_once_when_there_is_unread_mail(backend: Backend) -> None:
    backend.box.send(TEAM, mail(1))
    assert await backend.box.wait_for_mail(TEAM, "alice", timeout_s=0) is True
    assert await backend.box.wait_for_mail(TEAM, "alice", timeout_s=WAIT_S) is True
    backend.box.mark_read(TEAM, "alice", 1)
    assert await backend.box.wait_for_mail(TEAM, "alice", timeout_s=0) is False
    assert await backend.box.wait_for_mail(TEAM, "nobody", timeout_s=0) is False


async def test_a_send_from_another_thread_wakes_the_wait_of_its_member(backend: Backend) -> None:
    backend.box.send(TEAM, mail(1))
    backend.box.mark_read(TEAM, "alice", 1)  # read mail does not count
    waiting = asyncio.create_task(backend.box.wait_for_mail(TEAM, "alice", timeout_s=WAIT_S))
    await asyncio.sleep(0)  # the wait starts before the send
    sent = await asyncio.to_thread(backend.box.send, TEAM, mail(2))
    assert await asyncio.wait_for(waiting, WAIT_S) is True
    assert backend.box.unread(TEAM, "alice") == [sent]


async def test_mail_to_another_member_or_team_does_not_end_a_wait(backend: Backend) -> None:
    waiting = asyncio.create_task(backend.box.wait_for_mail(TEAM, "alice", timeout_s=0.5))
    await asyncio.sleep(0)
    await asyncio.to_thread(backend.box.send, TEAM, mail(1, to="bob"))
    await asyncio.to_thread(backend.box.send, "ses_2", mail(2, to="alice"))
    assert await asyncio.wait_for(waiting, WAIT_S) is False
    assert backend.box.unread(TEAM, "alice") == []


async def test_a_wait_is_cancelled_cleanly_and_the_next_one_works(backend: Backend) -> None:
    waiting = asyncio.create_task(backend.box.wait_for_mail(TEAM, "alice", timeout_s=WAIT_S))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    again = asyncio.create_task(backend.box.wait_for_mail(TEAM, "alice", timeout_s=WAIT_S))
    await asyncio.to_thread(backend.box.send, TEAM, mail(1))
    assert await asyncio.wait_for(again, WAIT_S) is True


async def test_a_wait_checks_its_names(backend: Backend) -> None:
    with pytest.raises(MailRefused, match="not a team name"):
        await backend.box.wait_for_mail("../x", "alice", timeout_s=0)
    with pytest.raises(MailRefused, match="not a member name"):
        await backend.box.wait_for_mail(TEAM, "Alice", timeout_s=0)


# --- the file adapter alone ------------------------------------------------------------------


def test_the_file_layout(tmp_path: Path) -> None:
    box = FileMailbox(tmp_path)
    box.send(TEAM, mail(1, to="lead", sender="alice"))
    assert (tmp_path / TEAM / "lead.inbox.jsonl").is_file()
    (tmp_path / TEAM / "notes.txt").write_text("x")
    (tmp_path / TEAM / "Bad.inbox.jsonl").write_text("")
    assert box.members(TEAM) == ["lead"]


def test_a_skipped_line_and_a_torn_tail_are_reported(tmp_path: Path) -> None:
    box = FileMailbox(tmp_path)
    box.send(TEAM, mail(1))
    path = box.path(TEAM, "alice")
    path.write_bytes(path.read_bytes() + b"not json\n" + b'{"seq":')
    problems = FileMailbox(tmp_path).problems(TEAM, "alice")
    assert len(problems) == 2
    assert problems[0].startswith("line 2: not a mail, skipped")
    assert problems[1] == "line 3: torn last line ignored"


def test_a_second_instance_sees_what_the_first_appends(tmp_path: Path) -> None:
    writer, reader = FileMailbox(tmp_path), FileMailbox(tmp_path)
    writer.send(TEAM, mail(1))
    assert [m.id for m in reader.unread(TEAM, "alice")] == ["m1"]
    writer.send(TEAM, mail(2))
    reader.mark_read(TEAM, "alice", 1)
    assert [m.id for m in writer.unread(TEAM, "alice")] == ["m2"]
    assert reader.send(TEAM, mail(3)).seq == 3
    assert [m.seq for m in writer.inbox(TEAM, "alice")] == [1, 2, 3]


SENDERS = 4
PER_SENDER = 200


def _send_many(root: str, sender: int, count: int) -> None:
    """A child process: `count` sends into alice's inbox, each its own FileMailbox call."""
    box = FileMailbox(root)
    for i in range(count):
        box.send(
            TEAM,
            Mail(
                id=f"p{sender}-{i}",
                at=T0 + i,
                sender=f"member-{sender}",
                to="alice",
                kind="message",
                body=f"{sender}:{i} " + "x" * (i % 300),
            ),
        )


def test_concurrent_senders_in_several_processes_never_interleave(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_send_many, args=(str(tmp_path), n, PER_SENDER))
        for n in range(SENDERS)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    box = FileMailbox(tmp_path)
    got = box.inbox(TEAM, "alice")
    total = SENDERS * PER_SENDER
    assert [m.seq for m in got] == list(range(1, total + 1))
    assert len({m.id for m in got}) == total
    for n in range(SENDERS):  # each sender's mails arrive in the order it sent them
        mine = [m.id for m in got if m.sender == f"member-{n}"]
        assert mine == [f"p{n}-{i}" for i in range(PER_SENDER)]
    assert box.problems(TEAM, "alice") == []
    assert box.path(TEAM, "alice").read_bytes().count(b"\n") == total
    assert os.stat(box.path(TEAM, "alice")).st_size > 0
