"""When a team is quiet (issue 20): `TeamService.lead_wait` tells the lead "every teammate is
idle" only when no teammate has a mail left to handle or a run on, and a member being spawned
can be mailed at once. The member loops are real; their runs are replaced by a recorder, the
mailbox is the in-memory fake (a mail put in it directly is one sent by another process: no
wake-up) and the idle poll is an hour, so nothing here depends on timing."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pytest

from soong_agent.application.teams.roster import save_roster
from soong_agent.application.teams.service import Member, TeamLimits, TeamService
from soong_agent.ports.mailbox import LEAD, Mail
from soong_agent.ports.storage import SessionStore
from soong_agent.testing import FixedClock, InMemoryMailbox, InMemoryTaskLog, SequentialIds

TEAM = "ses_lead"
LIMIT_S = 30.0  # a bound on waits for the loops, never reached when the test passes


class _Marks:
    """The session store as teams use it outside runs: marks only."""

    def __init__(self) -> None:
        self.marks: dict[tuple[str, str], str] = {}

    async def get_mark(self, session_id: str, key: str) -> str | None:
        return self.marks.get((session_id, key))

    async def set_mark(
        self, session_id: str, key: str, value: str, *, previous: str | None
    ) -> bool:
        if self.marks.get((session_id, key)) != previous:
            return False
        self.marks[(session_id, key)] = value
        return True


class _GatedMailbox(InMemoryMailbox):
    """Holds the write of a mail whose body is ``gate`` until `release` is set; calls
    `on_send` with each mail before it is written."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.on_send: list[Any] = []

    def send(self, team: str, mail: Mail) -> Mail:
        for hook in self.on_send:
            hook(mail)
        if mail.body == "gate":
            self.entered.set()
            self.release.wait(LIMIT_S)
        return super().send(team, mail)


def _setup(role: str, worktree: str | None) -> Any:
    spec = SimpleNamespace(tools=SimpleNamespace(names=lambda: []))
    return cast(Any, None), spec


@pytest.fixture
def mailbox() -> _GatedMailbox:
    return _GatedMailbox()


@pytest.fixture
async def service(mailbox: _GatedMailbox) -> AsyncIterator[TeamService]:
    svc = TeamService(
        store=cast(SessionStore, _Marks()),
        mailbox=mailbox,
        tasks=InMemoryTaskLog(),
        clock=FixedClock(),
        ids=SequentialIds(),
        setup=_setup,
        limits=TeamLimits(poll_s=3600.0),
    )
    yield svc
    await svc.close()


@pytest.fixture
def runs(service: TeamService, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Each teammate run as (member, the message it was started with); it ends at once."""
    seen: list[tuple[str, str]] = []

    async def run(team: Any, member: Member, message: str) -> None:
        seen.append((member.name, message))

    monkeypatch.setattr(service.members, "_run", run)
    return seen


async def _team_with(service: TeamService, *names: str) -> None:
    """A restored team whose members are idle and have gone to sleep."""
    marks = cast(_Marks, service._store)
    roster = [Member(name=n, role="worker", session_id=f"ses_{n}").as_json() for n in names]
    marks.marks[(TEAM, "team.roster")] = json.dumps({"members": roster})
    await service.restore(TEAM, "/project")
    assert await asyncio.wait_for(service.settle(TEAM), LIMIT_S)


def _mail(to: str, body: str, *, sender: str = "alice", kind: str = "message") -> Mail:
    return Mail.model_validate(
        {
            "id": f"mail_{to}_{body}",
            "at": 0.0,
            "sender": sender,
            "to": to,
            "kind": kind,
            "body": body,
        }
    )


async def test_an_unread_mail_keeps_the_team_from_being_quiet(
    service: TeamService, mailbox: _GatedMailbox, runs: list[tuple[str, str]]
) -> None:
    await _team_with(service, "alice", "bob")
    # bob is idle and asleep, and nothing woke it: a mail it has not read yet is in its inbox
    mailbox.send(TEAM, _mail("bob", "hello bob"))

    waited = await service.lead_wait(service._teams[TEAM], 0)

    assert "every teammate is idle" not in waited.content
    assert "timed out" in waited.content
    # the look at the inboxes woke bob: it handles the mail, and then the team is quiet
    assert await asyncio.wait_for(service.settle(TEAM), LIMIT_S)
    assert [(name, "hello bob" in text) for name, text in runs] == [("bob", True)]
    assert mailbox.unread(TEAM, "bob") == []
    waited = await service.lead_wait(service._teams[TEAM], 0)
    assert waited.content.startswith("No mail; every teammate is idle.")


async def test_quiet_reads_the_inboxes_only_when_the_team_looks_quiet(
    service: TeamService, mailbox: _GatedMailbox, runs: list[tuple[str, str]]
) -> None:
    await _team_with(service, "bob")
    reads: list[str] = []
    unread = mailbox.unread

    def counted(team: str, member: str) -> list[Mail]:
        reads.append(member)
        return unread(team, member)

    mailbox.unread = counted  # type: ignore[method-assign]
    service._teams[TEAM].sending += 1  # a mail on its way: not quiet, and no inbox is read
    assert not await service.quiet(TEAM)
    assert reads == []
    service._teams[TEAM].sending -= 1
    assert await service.quiet(TEAM)
    assert reads == ["bob"]


async def test_a_teammate_being_spawned_can_be_mailed_and_keeps_the_team_busy(
    service: TeamService, mailbox: _GatedMailbox, runs: list[tuple[str, str]]
) -> None:
    await _team_with(service, "alice")
    # bob's spawn stops at the write of its first mail; alice mails bob meanwhile
    spawning = asyncio.create_task(service.add_member(TEAM, "worker", "bob", "gate"))
    assert await asyncio.to_thread(mailbox.entered.wait, LIMIT_S)
    assert [m.name for m in service.roster(TEAM)] == ["alice", "bob"]
    assert not await service.quiet(TEAM)

    sent = await service.mail(TEAM, "bob", "hello bob", sender="alice")
    assert not sent.is_error, sent.content
    assert not await service.quiet(TEAM)
    waited = await service.lead_wait(service._teams[TEAM], 0)
    assert "every teammate is idle" not in waited.content

    mailbox.release.set()
    joined = await asyncio.wait_for(spawning, LIMIT_S)
    assert "joined the team" in joined.content
    assert await asyncio.wait_for(service.settle(TEAM), LIMIT_S)
    handled = "\n".join(text for name, text in runs if name == "bob")
    assert "hello bob" in handled and "gate" in handled
    assert mailbox.unread(TEAM, "bob") == []


async def test_a_second_spawn_of_a_name_being_spawned_is_refused(
    service: TeamService, mailbox: _GatedMailbox, runs: list[tuple[str, str]]
) -> None:
    await _team_with(service, "alice")
    spawning = asyncio.create_task(service.add_member(TEAM, "worker", "bob", "gate"))
    assert await asyncio.to_thread(mailbox.entered.wait, LIMIT_S)
    again = await service.add_member(TEAM, "worker", "bob", "again")
    assert again.is_error and "already" in again.content
    mailbox.release.set()
    assert not (await asyncio.wait_for(spawning, LIMIT_S)).is_error


async def test_a_member_is_stopped_before_its_shutdown_ack_is_in_the_inbox(
    service: TeamService, mailbox: _GatedMailbox, runs: list[tuple[str, str]]
) -> None:
    await _team_with(service, "alice", "bob")
    at_ack: list[dict[str, str]] = []

    def record(mail: Mail) -> None:
        if mail.kind == "shutdown_ack":
            at_ack.append({m.name: m.status for m in service.roster(TEAM)})

    mailbox.on_send.append(record)
    sent = await service.mail(TEAM, "bob", "", kind="shutdown_request", sender=LEAD)
    assert not sent.is_error, sent.content

    waited = await asyncio.wait_for(service.lead_wait(service._teams[TEAM], LIMIT_S), LIMIT_S)

    assert "from bob, shutdown_ack" in waited.content
    assert at_ack == [{"alice": "idle", "bob": "stopped"}]
    assert {m.name: m.status for m in service.roster(TEAM)} == {"alice": "idle", "bob": "stopped"}
    assert runs == []


async def test_a_spawn_that_fails_leaves_no_teammate_in_the_saved_roster(
    service: TeamService, mailbox: _GatedMailbox, runs: list[tuple[str, str]]
) -> None:
    await _team_with(service, "alice")
    held, release = threading.Event(), threading.Event()

    def fail_after_a_while(mail: Mail) -> None:
        if mail.to == "carol":  # carol's first mail cannot be written, once the test says so
            held.set()
            release.wait(LIMIT_S)
            raise OSError("the inbox cannot be written")

    mailbox.on_send.append(fail_after_a_while)
    spawning = asyncio.create_task(service.add_member(TEAM, "worker", "carol", "do things"))
    assert await asyncio.to_thread(held.wait, LIMIT_S)
    # the roster is saved meanwhile (a status change)
    await save_roster(service._store, service._teams[TEAM])
    release.set()
    with pytest.raises(OSError, match="cannot be written"):
        await asyncio.wait_for(spawning, LIMIT_S)
    assert [m.name for m in service.roster(TEAM)] == ["alice"]
    saved = json.loads(cast(_Marks, service._store).marks[(TEAM, "team.roster")])
    assert [m["name"] for m in saved["members"]] == ["alice"]  # no restart brings carol back
