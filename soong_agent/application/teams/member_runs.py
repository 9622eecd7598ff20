"""A teammate's run seen from the lead's side (issue 20, WORK-1): its lineage, its end recorded
in the lead's run, and — for a run a worker process ran from the queue — what it read and asked
for that changes the member's state in the lead's process."""

from __future__ import annotations

import asyncio

from soong_agent.application.runs.assembler import RunSpec
from soong_agent.application.runs.handle import RunResult
from soong_agent.application.runs.lineage import Lineage
from soong_agent.application.teams.roster import Member, Team
from soong_agent.domain.usage import cost_usd
from soong_agent.ports.events import ChildFinished
from soong_agent.ports.mailbox import LEAD, Mailbox

__all__ = ["member_finished", "member_lineage", "read_by_run"]


async def read_by_run(mailbox: Mailbox, team: Team, name: str, before: int, began: float) -> None:
    """What a queued run of the member read (mail after seq `before` no longer unread) and
    asked for (a plan approval since `began`), as an in-process run's seat would have
    noted it."""
    mails = await asyncio.to_thread(mailbox.inbox, team.id, name)
    unread = {m.seq for m in await asyncio.to_thread(mailbox.unread, team.id, name)}
    asked = 0.0
    for inbox in [LEAD, *team.members]:
        for mail in await asyncio.to_thread(mailbox.inbox, team.id, inbox):
            if mail.sender == name and mail.kind == "plan_approval_request" and mail.at >= began:
                asked = max(asked, mail.at)
    if asked:
        team.awaiting.add(name)
    for mail in mails:
        if mail.seq <= before or mail.seq in unread:
            continue
        if mail.kind == "shutdown_request":
            team.shutdown[name] = mail
        if mail.kind == "plan_approval" and mail.at >= asked:
            team.awaiting.discard(name)


def member_finished(
    team: Team, member: Member, run_id: str, result: RunResult, spec: RunSpec
) -> None:
    """The member's run ended: a `child_finished` event in the lead's run, if it runs."""
    lead = team.lead_running()
    if lead is None:
        return
    cost = result.cost_usd
    lead.event(
        ChildFinished,
        kind="teammate",
        agent=member.role,
        child_session_id=member.session_id,
        child_run_id=run_id,
        parent_call_id="",
        status=result.status,
        reason=result.reason,
        turns=result.turns,
        usage=result.usage,
        cost_usd=cost if cost is not None else cost_usd(result.usage, spec.settings.price),
        worker=member.name,
    )


def member_lineage(team: Team, member: Member, lead_run_id: str) -> Lineage:
    """What a member's run is: a teammate of the lead's run, bound by the lead's restrictions
    (its mode, and its session's plan mode)."""
    return Lineage(
        kind="teammate",
        agent=member.role,
        depth=1,
        parent_session_id=team.id,
        parent_run_id=lead_run_id,
        parent_call_id="",
        parent_mode=team.lead_mode,
        label=f"teammate {member.name}",
        worker=member.name,
        task_session_id=team.id,
        actor=member.name,
    )
