"""The teams of one runtime (`TeamService`): spawning members, mail between them, the lead's
wait, restarts, quiet and settle, and the lead's worktree reviews. What a team is: the
package's docstring (`soong_agent.application.teams`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from soong_agent.application.children.handoff import ChildQueue
from soong_agent.application.children.launcher import ORCHESTRATOR_MARK
from soong_agent.application.hooks import RunHooks
from soong_agent.application.runs.parking import parked
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.runs.starter import RunStarter
from soong_agent.application.teams.handoff import hand_off
from soong_agent.application.teams.members import MemberLoops, MemberSetup
from soong_agent.application.teams.roster import (
    ROSTER_MARK,
    Member,
    Team,
    TeamLimits,
    announce,
    roster_from_mark,
    save_roster,
    status_text,
)
from soong_agent.application.teams.seat import Seat, render_mails
from soong_agent.application.tools.base import ToolOutput
from soong_agent.domain.permissions import PermissionMode
from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.errors import SoongAgentError, UsageError
from soong_agent.ports.mailbox import (
    LEAD,
    Mail,
    Mailbox,
    MailRefused,
    mail_problem,
    member_problem,
)
from soong_agent.ports.storage import SessionStore
from soong_agent.ports.system import Clock, IdGenerator
from soong_agent.ports.tasks import TaskLog
from soong_agent.ports.worktrees import Worktree, Worktrees

__all__ = [
    "ROSTER_MARK",
    "Member",
    "MemberSetup",
    "Seat",
    "TeamLimits",
    "TeamService",
    "render_mails",
    "roster_from_mark",
]


class TeamService:
    """The teams of one runtime: their rosters, member loops and seats."""

    def __init__(
        self,
        *,
        store: SessionStore,
        mailbox: Mailbox,
        tasks: TaskLog,
        clock: Clock,
        ids: IdGenerator,
        setup: MemberSetup,
        limits: TeamLimits,
        worktrees: Worktrees | None = None,
        artifacts: ArtifactStore | None = None,
        starter: RunStarter | None = None,
        queue: ChildQueue | None = None,
    ) -> None:
        self._store = store
        self._starter = starter or RunStarter(clock=clock, ids=ids)
        self._mailbox = mailbox
        self._tasks = tasks
        self._clock = clock
        self._ids = ids
        self._setup = setup
        self.limits = limits
        self._worktrees = worktrees
        self._artifacts = artifacts
        self._teams: dict[str, Team] = {}
        self.members = MemberLoops(
            store=store,
            mailbox=mailbox,
            tasks=tasks,
            clock=clock,
            ids=ids,
            setup=setup,
            starter=self._starter,
            limits=limits,
            worktrees=worktrees,
            actions=self,
            queue=queue,  # members' runs queued for any worker process (WORK-1)
        )

    # --- the lead's side ---------------------------------------------------------------------
    def lead_seat(self, team_id: str, rec: RunRecorder, hooks: RunHooks | None) -> Seat:
        """The seat of a lead's run: its events and hooks are where the team reports."""
        team = self._team(team_id, rec.session.project_dir)
        team.lead_rec, team.lead_hooks = rec, hooks
        return Seat(self, self._mailbox, team, LEAD, rec)

    def set_lead_mode(self, team_id: str, mode: PermissionMode) -> None:
        """The permission mode of the lead's run: its teammates' runs are held to it at
        least (AGT-1, TEAM-4)."""
        team = self._teams.get(team_id)
        if team is not None:
            team.lead_mode = mode

    async def restore(self, team_id: str, project_dir: str) -> list[Member]:
        """Bring back the members of a team after a restart (roster from the store); those not
        stopped get their loops again. Returns the roster."""
        team = self._team(team_id, project_dir)
        if team.members:
            return list(team.members.values())
        for member in roster_from_mark(await self._store.get_mark(team_id, ROSTER_MARK)):
            if member.status == "working":
                member.status = "idle"  # its run was cut off by the end of the last process
            team.members[member.name] = member
        for member in team.members.values():
            if member.status != "stopped":
                self.members.start(team, member.name)
        return list(team.members.values())

    async def attach(self, team_id: str, project_dir: str) -> Team:
        """The team as its stored roster says (read again while no loop of it runs here): the
        team of a member's run that the lead's process queued for this one (WORK-1)."""
        team = self._team(team_id, project_dir)
        if not team.loops:
            for member in roster_from_mark(await self._store.get_mark(team_id, ROSTER_MARK)):
                team.members[member.name] = member
        return team

    def roster(self, team_id: str) -> list[Member]:
        team = self._teams.get(team_id)
        return list(team.members.values()) if team is not None else []

    def has_members(self, team_id: str) -> bool:
        team = self._teams.get(team_id)
        return team is not None and any(m.status != "stopped" for m in team.members.values())

    async def quiet(self, team_id: str) -> bool:
        """Every member that has not stopped is idle or waiting for an approval, asleep, not
        woken, with no unread mail, and no mail is on its way: nothing is left to do. The
        inboxes are read only when everything else already looks quiet; a member found with
        unread mail (one sent from another process, say) is woken and the team is not quiet."""
        team = self._teams.get(team_id)
        return team is None or await self._quiet(team)

    async def settle(self, team_id: str, *, timeout_s: float | None = None) -> bool:
        """Wait until the team is quiet (see `quiet`); False when `timeout_s` passed first."""
        deadline = None if timeout_s is None else self._clock.monotonic() + timeout_s
        while not await self.quiet(team_id):
            if deadline is not None and self._clock.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def _quiet(self, team: Team) -> bool:
        if not team.looks_quiet():
            return False
        names = [n for n, m in team.members.items() if m.status != "stopped"]
        unread = await asyncio.to_thread(self._with_unread, team.id, names)
        for name in unread:  # mail nobody woke it for: it is woken now
            team.wake_up(name)
        # still quiet after the read: a mail sent meanwhile in this process woke its member
        return not unread and team.looks_quiet()

    def _with_unread(self, team_id: str, names: Sequence[str]) -> list[str]:
        return [name for name in names if self._mailbox.unread(team_id, name)]

    async def close(self, team_id: str | None = None) -> None:
        """Stop every member loop (of `team_id` only, when given): their runs are cancelled;
        sessions stay resumable."""
        teams = [t for t in self._teams.values() if team_id in (None, t.id)]
        loops = [task for team in teams for task in team.loops.values()]
        for task in loops:
            task.cancel()
        if loops:
            await asyncio.wait(loops, timeout=self.limits.cancel_timeout_s)
        for team in teams:
            team.loops.clear()
            if team_id is not None:
                self._teams.pop(team.id, None)

    async def mail(
        self,
        team_id: str,
        to: str,
        body: str,
        *,
        kind: str = "message",
        sender: str = LEAD,
        data: dict[str, Any] | None = None,
    ) -> ToolOutput:
        """Send a mail into a team from outside a run (the SDK caller speaking as the lead,
        say); the result says what happened, as `send_message`'s does."""
        team = self._teams.get(team_id)
        if team is None:
            return ToolOutput(f"no team {team_id!r} in this runtime", is_error=True)
        return await self.send(team, sender, to, kind, body, data or {})

    async def add_member(
        self, team_id: str, definition: str, name: str, prompt: str, labels: Sequence[str] = ()
    ) -> ToolOutput:
        """`spawn_teammate` from outside a run."""
        team = self._teams.get(team_id)
        if team is None:
            return ToolOutput(f"no team {team_id!r} in this runtime", is_error=True)
        return await self.spawn(team, definition, name, prompt, list(labels))

    # --- seats' actions ----------------------------------------------------------------------
    async def spawn(
        self, team: Team, definition: str, name: str, prompt: str, labels: list[str]
    ) -> ToolOutput:
        problem = member_problem(name, "teammate") if name != LEAD else "'lead' is the lead"
        if problem is not None:
            return ToolOutput(f"spawn_teammate: {problem}", is_error=True)
        if name in team.members:
            return ToolOutput(f"spawn_teammate: there is a teammate {name!r} already", True)
        active = [m for m in team.members.values() if m.status != "stopped"]
        if len(active) >= self.limits.max_teammates:
            return ToolOutput(
                f"spawn_teammate: the team has {len(active)} teammates, the most it may "
                f"(agents.max_teammates = {self.limits.max_teammates})",
                is_error=True,
            )
        try:
            self._setup(definition, None)
        except UsageError as exc:
            return ToolOutput(f"spawn_teammate: {exc}", is_error=True)
        # the member joins the roster before the first await: a teammate spawned in the same
        # batch (or any sender) can mail it at once, its name is taken, and the team is not
        # quiet (it is not asleep) until its loop has looked at its first mail
        member = Member(
            name=name, role=definition, session_id=self._ids.new_id("ses"), labels=tuple(labels)
        )
        team.members[name] = member
        team.joining.add(name)  # not in the saved roster until its first mail is out
        team.wake.setdefault(name, asyncio.Event())
        team.offered.setdefault(name, set())
        worktree: Worktree | None = None
        try:
            if self._worktrees is not None and await asyncio.to_thread(self._worktrees.available):
                try:
                    worktree = await asyncio.to_thread(self._worktrees.create, team.id, name)
                except SoongAgentError as exc:
                    self._unreserve(team, name)
                    return ToolOutput(f"spawn_teammate: {exc}", is_error=True)
            member.worktree = worktree.path if worktree is not None else None
            if await self._store.get_mark(team.id, ORCHESTRATOR_MARK) is None:  # resumes as lead
                await self._store.set_mark(team.id, ORCHESTRATOR_MARK, "1", previous=None)
            first = Mail(
                id=self._ids.new_id("mail"),
                at=self._clock.now(),
                sender=LEAD,
                to=name,
                kind="message",
                body=prompt,
            )
            await asyncio.to_thread(self._mailbox.send, team.id, first)
            team.joining.discard(name)
            await save_roster(self._store, team)
        except BaseException:
            self._unreserve(team, name)
            raise
        announce(team, member, "joined the team")
        self.members.start(team, name)
        where = f", working in {worktree.path}" if worktree is not None else ""
        return ToolOutput(
            f"teammate {name} ({definition}) joined the team{where}; session {member.session_id}"
        )

    def _unreserve(self, team: Team, name: str) -> None:
        """Take back a spawn that failed before the member's loop started (nothing was mailed
        to it that anyone may expect an answer to: its inbox is left as it is)."""
        team.members.pop(name, None)
        team.joining.discard(name)
        team.wake.pop(name, None)
        team.offered.pop(name, None)
        team.lead_wake.set()

    async def send(
        self, team: Team, sender: str, to: str, kind: str, body: str, data: dict[str, Any]
    ) -> ToolOutput:
        if to == sender:
            return ToolOutput("send_message: a mail to yourself is not sent", is_error=True)
        if to != LEAD and to not in team.members:
            known = ", ".join(sorted(team.members)) or "none yet"
            return ToolOutput(
                f"send_message: no teammate {to!r}; the team: lead, {known}", is_error=True
            )
        if to != LEAD and team.members[to].status == "stopped":
            return ToolOutput(f"send_message: teammate {to} has stopped", is_error=True)
        payload = dict(data)
        mail = Mail.model_construct(
            seq=0,
            id=self._ids.new_id("mail"),
            at=self._clock.now(),
            sender=sender,
            to=to,
            kind=kind,  # type: ignore[arg-type]
            body=body,
            data=payload,
        )
        problem = mail_problem(mail)
        if problem is not None:  # refused before anything moves
            return ToolOutput(f"send_message: mail refused: {problem}", is_error=True)
        if kind == "handoff":  # the step and artifacts move; the copies' ids go in `payload`
            moved = await hand_off(
                team,
                sender,
                to,
                payload,
                store=self._store,
                tasks=self._tasks,
                clock=self._clock,
                artifacts=self._artifacts,
            )
            if isinstance(moved, ToolOutput):
                return moved
        team.sending += 1  # from the write to the wake-up, the team is not quiet
        try:
            sent = await asyncio.to_thread(self._mailbox.send, team.id, mail)
        except MailRefused as exc:
            return ToolOutput(f"send_message: {exc}", is_error=True)
        finally:
            team.sending -= 1
            team.wake_up(to)  # the mail, if written, is found; if not, nothing is lost
        if sender != LEAD and kind == "plan_approval_request":
            team.awaiting.add(sender)
        return ToolOutput(f"mail {sent.id} ({kind}) sent to {to}")

    async def lead_wait(self, team: Team, timeout_s: float) -> ToolOutput:
        deadline = self._clock.monotonic() + timeout_s
        while True:
            team.lead_wake.clear()  # before looking: whatever happens after it wakes the wait
            # quiet first, the lead's inbox then: a mail a member sent before the team was
            # quiet is in the inbox by now, so "every teammate is idle" never hides one
            quiet = await self._quiet(team)
            mails = await asyncio.to_thread(self._mailbox.unread, team.id, LEAD)
            if mails:
                await asyncio.to_thread(self._mailbox.mark_read, team.id, LEAD, mails[-1].seq)
                return ToolOutput(render_mails(mails))
            if quiet and team.members:
                return ToolOutput("No mail; every teammate is idle.\n" + status_text(team))
            left = deadline - self._clock.monotonic()
            if left <= 0:
                return ToolOutput("No mail yet (timed out).\n" + status_text(team))
            with contextlib.suppress(TimeoutError), parked():  # no worker slot held meanwhile
                await asyncio.wait_for(team.lead_wake.wait(), timeout=min(left, 0.2))

    async def worktree_action(self, team: Team, action: str, name: str, message: str) -> ToolOutput:
        member = team.members.get(name)
        if member is None:
            return ToolOutput(f"no teammate {name!r}", is_error=True)
        wt = self._worktrees
        if wt is None or member.worktree is None:
            return ToolOutput(f"teammate {name} has no worktree (agents.worktrees)", True)
        try:
            if action == "review":
                diff = await asyncio.to_thread(wt.diff, name)
                return ToolOutput(diff or f"teammate {name} changed nothing")
            if action == "accept":
                outcome = await asyncio.to_thread(
                    wt.accept, name, message or f"Work of teammate {name}"
                )
                if not outcome.merged:
                    return ToolOutput(f"not merged: {outcome.conflict}", is_error=True)
                if outcome.commit is None:
                    return ToolOutput(f"teammate {name} has nothing to merge")
                if member.status == "stopped":
                    await asyncio.to_thread(wt.remove, name)
                    member.worktree = None
                    await save_roster(self._store, team)
                return ToolOutput(f"merged the worktree of {name} as {outcome.commit}")
            await asyncio.to_thread(wt.reject, name)
            if member.status != "stopped":  # it goes on working, from the project as it is now
                await asyncio.to_thread(wt.create, team.id, name)
            else:
                member.worktree = None
                await save_roster(self._store, team)
            return ToolOutput(f"discarded what teammate {name} changed")
        except SoongAgentError as exc:
            return ToolOutput(str(exc), is_error=True)

    # --- the member loops --------------------------------------------------------------------
    def _team(self, team_id: str, project_dir: str) -> Team:
        team = self._teams.get(team_id)
        if team is None:
            team = self._teams[team_id] = Team(id=team_id, project_dir=project_dir)
        return team
