"""A teammate's run that a worker process ran from the queue (WORK-1, issue 20): what it read
and asked for reaches the member's state in the lead's process as an in-process run's seat
would have noted it — a shutdown it read stops the member next round, a plan approval it asked
for leaves the member waiting, one it then read lets it go on."""

from __future__ import annotations

from soong_agent.application.teams.member_runs import read_by_run
from soong_agent.application.teams.roster import Member, Team
from soong_agent.ports.mailbox import LEAD, Mail
from soong_agent.testing import InMemoryMailbox

TEAM = "ses_lead"


def mail(n: int, sender: str, to: str, kind: str, at: float) -> Mail:
    data = {"approved": True, "note": ""} if kind == "plan_approval" else {}
    return Mail.model_validate(
        {"id": f"mail_{n}", "at": at, "sender": sender, "to": to, "kind": kind, "data": data}
    )


def team_with_alice() -> Team:
    team = Team(id=TEAM, project_dir="/p")
    team.members["alice"] = Member(name="alice", role="default_worker_agent", session_id="ses_a")
    return team


async def test_a_shutdown_the_run_read_is_noted_and_mail_read_before_it_is_not() -> None:
    box, team = InMemoryMailbox(), team_with_alice()
    box.send(TEAM, mail(1, LEAD, "alice", "shutdown_request", at=10))  # read before the run
    box.mark_read(TEAM, "alice", 1)
    await read_by_run(box, team, "alice", before=1, began=20)
    assert "alice" not in team.shutdown
    box.send(TEAM, mail(2, LEAD, "alice", "shutdown_request", at=30))
    box.send(TEAM, mail(3, LEAD, "alice", "message", at=31))
    box.mark_read(TEAM, "alice", 2)  # the run read #2; #3 came after it
    await read_by_run(box, team, "alice", before=1, began=20)
    assert team.shutdown["alice"].id == "mail_2"


async def test_a_plan_asked_for_leaves_the_member_waiting_until_an_approval_is_read() -> None:
    box, team = InMemoryMailbox(), team_with_alice()
    box.send(TEAM, mail(1, "alice", LEAD, "plan_approval_request", at=5))  # an earlier run's
    await read_by_run(box, team, "alice", before=0, began=20)
    assert "alice" not in team.awaiting
    box.send(TEAM, mail(2, "alice", LEAD, "plan_approval_request", at=25))
    await read_by_run(box, team, "alice", before=0, began=20)
    assert "alice" in team.awaiting
    box.send(TEAM, mail(3, LEAD, "alice", "plan_approval", at=40))
    box.mark_read(TEAM, "alice", 1)
    await read_by_run(box, team, "alice", before=0, began=20)
    assert "alice" not in team.awaiting
