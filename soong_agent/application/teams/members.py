"""A teammate's life (issue 20): its loop of rounds (read mail, take up offered work, run),
its runs through the starter, and a graceful shutdown."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from soong_agent.application.children.handoff import ChildQueue, Handoff
from soong_agent.application.hooks import RunHooks
from soong_agent.application.runs.assembler import RunAssembler, RunSpec
from soong_agent.application.runs.handle import RunResult
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.runs.starter import RunStarter, wait_bounded
from soong_agent.application.teams.member_runs import (
    member_finished,
    member_lineage,
    read_by_run,
)
from soong_agent.application.teams.roster import (
    Member,
    Team,
    TeamLimits,
    save_roster,
    set_status,
)
from soong_agent.application.teams.seat import Seat, TeamActions, render_mails
from soong_agent.domain.run_limits import RunLimits
from soong_agent.domain.tasks.state import TaskState, fold
from soong_agent.ports.errors import SoongAgentError, UsageError
from soong_agent.ports.events import (
    ChildStarted,
    ErrorEvent,
    MemberStatus,
    TeamChanged,
)
from soong_agent.ports.mailbox import Mail, Mailbox
from soong_agent.ports.storage import SessionStore
from soong_agent.ports.system import Clock, IdGenerator
from soong_agent.ports.tasks import StepReleased, TaskLog
from soong_agent.ports.worktrees import Worktrees

__all__ = ["MemberLoops", "MemberSetup", "SeatOf", "task_state"]

MemberSetup = Callable[[str, str | None], tuple[RunAssembler, RunSpec]]
"""How a member of a role (an agent definition) is put together, working in a worktree (its
path) or in the project (None)."""


SeatOf = Callable[[RunRecorder, RunHooks | None], Seat]
"""How a member's run takes its seat."""


async def task_state(tasks: TaskLog, team_id: str, task: str) -> TaskState | None:
    """The state of one of the team's task graphs (None: no such task)."""
    records, _ = await asyncio.to_thread(tasks.read, team_id, task)
    if not records:
        return None
    return fold(records).state


class MemberLoops:
    """The member loops of a runtime's teams: each member's rounds, work offers, runs and
    shutdown. `actions` is the team service the members' seats speak to."""

    def __init__(
        self,
        *,
        store: SessionStore,
        mailbox: Mailbox,
        tasks: TaskLog,
        clock: Clock,
        ids: IdGenerator,
        setup: MemberSetup,
        starter: RunStarter,
        limits: TeamLimits,
        worktrees: Worktrees | None,
        actions: TeamActions,
        queue: ChildQueue | None = None,
    ) -> None:
        self._store = store
        self._mailbox = mailbox
        self._tasks = tasks
        self._clock = clock
        self._ids = ids
        self._setup = setup
        self._starter = starter
        self._limits = limits
        self._worktrees = worktrees
        self._actions = actions
        self._queue = queue
        """Where members' runs are queued for any worker process (None: run here)."""

    def start(self, team: Team, name: str) -> None:
        """Start the member's loop (unless it runs already)."""
        team.wake.setdefault(name, asyncio.Event())
        team.offered.setdefault(name, set())
        running = team.loops.get(name)
        if running is None or running.done():
            team.loops[name] = asyncio.create_task(
                self._loop(team, name), name=f"soong-teammate-{name}"
            )

    async def _loop(self, team: Team, name: str) -> None:
        """The member's life: read mail, take up work, run; a failure of one round (the store,
        the mailbox, a task log) is reported in the lead's run and the member goes on."""
        while team.members[name].status != "stopped":
            try:
                await self._round(team, name)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # reported, never silent; the member keeps its seat
                lead = team.lead_running()
                if lead is not None:
                    lead.event(
                        ErrorEvent,
                        kind="teammate",
                        message=f"teammate {name}: {type(exc).__name__}: {exc}",
                        fatal=False,
                    )
                await asyncio.sleep(self._limits.poll_s)

    async def _round(self, team: Team, name: str) -> None:
        """One look at the member's mail and work, and the run they call for."""
        member = team.members[name]
        mails = await asyncio.to_thread(self._mailbox.unread, team.id, name)
        shutdown = team.shutdown.pop(name, None) or next(
            (m for m in mails if m.kind == "shutdown_request"), None
        )
        if shutdown is not None:
            await self._stop(team, member, shutdown, mails)
            return
        if any(m.kind == "plan_approval" for m in mails):
            team.awaiting.discard(name)
        work: tuple[str, str, str] | None = None
        if not mails and name not in team.awaiting:
            work = await self._work_for(team, member)
        if not mails and work is None:
            await self._sleep(team, name)
            return
        if mails:
            await asyncio.to_thread(self._mailbox.mark_read, team.id, name, mails[-1].seq)
        text = render_mails(mails)
        if work is not None:
            task, step, title = work
            text += (
                f"{chr(10) * 2 if text else ''}Work is ready for you: task {task!r}, step "
                f"{step!r} ({title}). Claim it with task_claim(task={task!r}, "
                f"step_id={step!r}), do it, then task_complete (or task_fail with the "
                "reason, or task_release if you cannot take it)."
            )
        await self._work(team, member, text, f"{work[0]}/{work[1]}" if work else None)

    async def _sleep(self, team: Team, name: str) -> None:
        """Until a wake-up in this process, mail from anywhere (the mailbox's own wait: a
        PostgreSQL inbox is woken by a send from another host), or `poll_s`."""
        event = team.wake[name]
        team.sleeping.add(name)
        woken = asyncio.ensure_future(event.wait())
        mail = asyncio.ensure_future(
            self._mailbox.wait_for_mail(team.id, name, timeout_s=self._limits.poll_s)
        )
        try:
            await asyncio.wait(
                {woken, mail}, timeout=self._limits.poll_s, return_when="FIRST_COMPLETED"
            )
        finally:
            team.sleeping.discard(name)
            event.clear()
            for waiting in (woken, mail):
                waiting.cancel()
            await asyncio.gather(woken, mail, return_exceptions=True)
        problem = mail.exception() if mail.done() and not mail.cancelled() else None
        if problem is not None:
            raise problem  # the mailbox failed: the loop reports it

    async def _work_for(self, team: Team, member: Member) -> tuple[str, str, str] | None:
        """A ready step of the team's task graphs this member may take up, not yet offered to
        it at this claim count (so a step it let go is offered again only after a change)."""
        _, spec = self._setup(member.role, member.worktree)
        tools = set(spec.tools.names())
        now = self._clock.now()
        offered = team.offered[member.name]
        for ref in await asyncio.to_thread(self._tasks.list, team.id):
            state = await task_state(self._tasks, team.id, ref.name)
            if state is None:
                continue
            for step_id in state.ready(now):
                step = state.steps[step_id]
                key = (ref.name, step_id, step.claims)
                if key in offered:
                    continue
                if step.role is not None and step.role != member.role:
                    continue
                if not set(step.tools) <= tools or not set(step.labels) <= set(member.labels):
                    continue
                offered.add(key)
                return ref.name, step_id, step.title
        return None

    async def _held(self, team: Team, name: str) -> list[tuple[str, str]]:
        now = self._clock.now()
        held: list[tuple[str, str]] = []
        for ref in await asyncio.to_thread(self._tasks.list, team.id):
            state = await task_state(self._tasks, team.id, ref.name)
            if state is None:
                continue
            held += [(ref.name, s) for s in state.steps if state.holder(s, now) == name]
        return held

    async def _work(self, team: Team, member: Member, message: str, step: str | None) -> None:
        await set_status(self._store, team, member, "working", step)
        try:
            await self._run(team, member, message)
        finally:
            held = await self._held(team, member.name)
            now_step = f"{held[0][0]}/{held[0][1]}" if held else None
            status: MemberStatus = "waiting_approval" if member.name in team.awaiting else "idle"
            if team.members[member.name].status != "stopped":
                await set_status(self._store, team, member, status, now_step)

    def member_run(self, team: Team, name: str) -> tuple[RunAssembler, RunSpec, SeatOf]:
        """How a run of the member is put together: its role's assembler and spec (in its
        worktree, if it has one) and its seat. UsageError for a name not in the roster."""
        member = team.members.get(name)
        if member is None:
            raise UsageError(f"no teammate {name!r} in the team of session {team.id}")
        assembler, spec = self._setup(member.role, member.worktree)
        return (
            assembler,
            spec,
            lambda rec, _hooks: Seat(self._actions, self._mailbox, team, name, rec),
        )

    async def _run(self, team: Team, member: Member, message: str) -> RunResult | None:
        """One run of the member's session through the starter, bounded; None when it did
        not end on its own."""
        if self._queue is not None:
            return await self._queued(self._queue, team, member, message)
        assembler, spec = self._setup(member.role, member.worktree)
        store, starter = self._store, self._starter
        session = await store.get_session(member.session_id)
        history = await store.active_path(member.session_id) if session is not None else []
        if session is None:
            session = starter.new_session(
                session_id=member.session_id,
                project_dir=team.project_dir,
                title=f"[teammate {member.name}] {member.role}",
                agent=member.role,
                parent_session_id=team.id,
            )
        lead = team.lead_running()
        prepared = await starter.prepare(
            assembler,
            spec,
            member_lineage(team, member, lead.run_info.id if lead is not None else ""),
            session=session,
            message=message,
            history=history,
            resumed=bool(history),
            grants=team.grants,
            earlier=history,
            team=lambda rec, hooks: Seat(self._actions, self._mailbox, team, member.name, rec),
        )
        first = member.runs == 0
        member.runs += 1
        prepared.recorder.event(
            TeamChanged,
            team=team.id,
            member=member.name,
            role=member.role,
            status="working",
            step=member.step,
        )
        task = starter.launch(prepared, parent=lead if first else None)
        await wait_bounded(task, self._limits.run_timeout_s, self._limits.cancel_timeout_s)
        if not task.done() or task.cancelled():
            return None
        result = task.result()
        member_finished(team, member, prepared.run_info.id, result, spec)
        return result

    async def _queued(
        self, queue: ChildQueue, team: Team, member: Member, message: str
    ) -> RunResult | None:
        """The member's run queued for any worker process (WORK-1); what the run read and
        sent that changes the member's state here (a shutdown asked, a plan approved or asked
        for) is taken from the mailbox once it ended."""
        _, spec = self._setup(member.role, member.worktree)
        lead = team.lead_running()
        lineage = member_lineage(team, member, lead.run_info.id if lead is not None else "")
        seen = await asyncio.to_thread(self._mailbox.inbox, team.id, member.name)
        before, began = max((m.seq for m in seen), default=0), self._clock.now()
        handoff = Handoff(
            lineage, message, RunLimits(), None, team.project_dir, session_id=member.session_id
        )
        handed = await queue.hand_off(handoff)
        if member.runs == 0 and lead is not None:
            link = lineage.started_fields(
                child_session_id=member.session_id,
                child_run_id=handed.run_id,
                task=message,
                model=spec.settings.model_label,
            )
            lead.event(ChildStarted, **link)
        member.runs += 1
        limits = self._limits
        result, timed_out = await queue.outcome(
            handed, timeout_s=limits.run_timeout_s, cancel_s=limits.cancel_timeout_s, park=False
        )
        await read_by_run(self._mailbox, team, member.name, before, began)
        if timed_out:
            return None
        member_finished(team, member, handed.run_id, result, spec)
        return result

    async def _stop(self, team: Team, member: Member, request: Mail, mails: list[Mail]) -> None:
        """A graceful shutdown: release what the member holds, acknowledge, stop."""
        if mails:
            await asyncio.to_thread(self._mailbox.mark_read, team.id, member.name, mails[-1].seq)
        for task, step in await self._held(team, member.name):
            record = StepReleased(seq=0, at=self._clock.now(), actor=member.name, step_id=step)
            with contextlib.suppress(SoongAgentError):
                await asyncio.to_thread(self._tasks.append, team.id, task, record)
        ack = Mail(
            id=self._ids.new_id("mail"),
            at=self._clock.now(),
            sender=member.name,
            to=request.sender,
            kind="shutdown_ack",
            body=f"{member.name} stopped",
            data={"of": request.id},
        )
        # the member is stopped (in the roster, and as a team_changed event) before its ack is
        # in the inbox; from then until the ack is written the team is not quiet
        team.sending += 1
        try:
            try:
                await set_status(
                    self._store, team, member, "stopped", None, reason="shut down on request"
                )
            finally:  # acknowledged even when the roster could not be saved
                await asyncio.to_thread(self._mailbox.send, team.id, ack)
        finally:
            team.sending -= 1
            team.wake_up(request.sender)
        if self._worktrees is not None and member.worktree is not None:
            diff = await asyncio.to_thread(self._worktrees.diff, member.name)
            if not diff.strip():  # nothing left to review: the worktree goes
                await asyncio.to_thread(self._worktrees.remove, member.name)
                member.worktree = None
                await save_roster(self._store, team)
        lead = team.lead_running()
        if lead is not None and team.lead_hooks is not None:
            await team.lead_hooks.subagent_stop(
                lead, agent_id=member.role, reason="stopped", session=member.session_id
            )
