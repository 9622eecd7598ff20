"""Teams (issue 20; seed 003's multi-agent architecture): long-lived teammates with mailboxes,
status labels, autonomous claiming and a git worktree each.

A team belongs to an orchestrator session (the lead's; its id is the team's). A teammate is a
member of the roster (name, role = agent definition, status, current step, worktree) with a
session of its own, linked to the lead's; it works in runs of that session, one after another:

- **Mailboxes.** Every member, and the lead, has an append-only inbox (`Mailbox`: locked,
  fsynced, a torn last line ignored). A member's loop starts a run when mail arrives; during a
  run, mail that arrives is handed to the model at the start of the next turn, labelled by its
  sender (a ``mail`` message). `send_message` refuses unknown kinds at send time.
- **Status labels.** ``idle`` (waiting for mail or work), ``working`` (a run is on),
  ``waiting_approval`` (it asked the lead to approve a plan and waits for the answer),
  ``stopped`` (it acknowledged a shutdown). Each change is saved in the roster (a mark of the
  lead's session in the session store) and is a `team_changed` event.
- **Autonomous claiming.** An idle member looks for ready steps of the lead's task graphs whose
  conditions (a role, tools, labels) it meets, and is given one to claim; the claim goes
  through the Task WAL's lease protocol (as the member: its claims outlive its runs), so a
  step whose holder died is taken up by another member once the lease expires.
- **Shutdown.** A ``shutdown_request`` is graceful: the member's run (if any) ends, the steps it
  holds are released, it answers ``shutdown_ack`` and stops.
- **Handoff.** A ``handoff`` mail moves a step (the sender releases it; the recipient is told to
  claim it) and copies the named artifacts into the recipient's session.
- **Worktrees.** With `agents.worktrees` (default: when the project is a git repository) each
  member works in its own `git worktree` (its file tools and its commands' sandbox write only
  there); the lead reviews, accepts (merges; a conflict is reported, never forced) or rejects
  it. A stopped member's worktree is removed once nothing in it is left unreviewed.
- **Restarts.** The roster, the inboxes and the task WALs are on disk, so when the lead's
  session is resumed in a new process its members come back (a member that was working is
  idle again; its session resumes with the interrupted calls answered), with their unread
  mail.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from soong_agent.application.children.launcher import ORCHESTRATOR_MARK
from soong_agent.application.hooks import RunHooks
from soong_agent.application.runs.assembler import RunAssembler, RunSpec
from soong_agent.application.runs.handle import RunResult
from soong_agent.application.runs.lineage import Lineage
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.runs.starter import RunStarter, wait_bounded
from soong_agent.application.tools.base import ToolOutput
from soong_agent.domain.permissions import PermissionMode, SessionGrants
from soong_agent.domain.tasks.state import TaskState, fold
from soong_agent.domain.usage import cost_usd
from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.errors import SoongAgentError, UsageError
from soong_agent.ports.events import (
    ChildFinished,
    ErrorEvent,
    MemberStatus,
    TeamChanged,
)
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
from soong_agent.ports.tasks import StepReleased, TaskLog
from soong_agent.ports.worktrees import Worktree, Worktrees

ROSTER_MARK = "team.roster"
"""The mark of the lead's session that holds the roster (JSON)."""
QUIET: frozenset[str] = frozenset({"idle", "stopped", "waiting_approval"})

MemberSetup = Callable[[str, str | None], tuple[RunAssembler, RunSpec]]
"""How a member of a role (an agent definition) is put together, working in a worktree (its
path) or in the project (None)."""


@dataclass(slots=True)
class Member:
    """One teammate as the roster records it."""

    name: str
    role: str
    session_id: str
    status: MemberStatus = "idle"
    step: str | None = None
    labels: tuple[str, ...] = ()
    worktree: str | None = None
    runs: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "session_id": self.session_id,
            "status": self.status,
            "step": self.step,
            "labels": list(self.labels),
            "worktree": self.worktree,
            "runs": self.runs,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Member:
        return cls(
            name=str(data["name"]),
            role=str(data["role"]),
            session_id=str(data["session_id"]),
            status=data.get("status", "idle"),
            step=data.get("step"),
            labels=tuple(data.get("labels", ())),
            worktree=data.get("worktree"),
            runs=int(data.get("runs", 0)),
        )


def roster_from_mark(text: str | None) -> list[Member]:
    """The members a roster mark lists (none for no mark)."""
    if not text:
        return []
    data = json.loads(text)
    return [Member.from_json(m) for m in data.get("members", [])]


@dataclass(frozen=True, slots=True)
class TeamLimits:
    """`[agents]` as teams use it."""

    max_teammates: int = 8
    run_timeout_s: float = 600.0
    cancel_timeout_s: float = 30.0
    poll_s: float = 0.5
    """How often an idle member looks at its inbox and the task graphs (mail sent in this
    process wakes it at once)."""


@dataclass(slots=True)
class _Team:
    id: str
    project_dir: str
    members: dict[str, Member] = field(default_factory=dict)
    loops: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    wake: dict[str, asyncio.Event] = field(default_factory=dict)
    sleeping: set[str] = field(default_factory=set)
    shutdown: dict[str, Mail] = field(default_factory=dict)
    awaiting: set[str] = field(default_factory=set)
    offered: dict[str, set[tuple[str, str, int]]] = field(default_factory=dict)
    sending: int = 0
    """Mails being written whose recipient is not woken yet, and shutdowns between the member's
    ``stopped`` and its ``shutdown_ack``: the team is not quiet while any is under way."""
    joining: set[str] = field(default_factory=set)
    """Members whose spawn is under way (in `members`, not yet in the saved roster)."""
    lead_rec: RunRecorder | None = None
    lead_hooks: RunHooks | None = None
    lead_wake: asyncio.Event = field(default_factory=asyncio.Event)
    grants: SessionGrants = field(default_factory=SessionGrants)
    save_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    lead_mode: PermissionMode | None = None
    """The permission mode of the lead's last run in this process: its teammates' runs are
    held to it at least (None: no lead run yet; the configuration's then)."""

    def lead_running(self) -> RunRecorder | None:
        rec = self.lead_rec
        return rec if rec is not None and rec.run_info.status == "running" else None


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
        self._teams: dict[str, _Team] = {}

    # --- the lead's side ---------------------------------------------------------------------
    def lead_seat(self, team_id: str, rec: RunRecorder, hooks: RunHooks | None) -> Seat:
        """The seat of a lead's run: its events and hooks are where the team reports."""
        team = self._team(team_id, rec.session.project_dir)
        team.lead_rec, team.lead_hooks = rec, hooks
        return Seat(self, team, LEAD, rec)

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
                self._start_loop(team, member.name)
        return list(team.members.values())

    def roster(self, team_id: str) -> list[Member]:
        team = self._teams.get(team_id)
        return list(team.members.values()) if team is not None else []

    def has_members(self, team_id: str) -> bool:
        team = self._teams.get(team_id)
        return team is not None and any(m.status != "stopped" for m in team.members.values())

    async def quiet(self, team_id: str) -> bool:
        """Every member that has not stopped is idle or waiting for an approval, asleep, not
        woken, with no unread mail, and no mail is on its way: nothing is left to do.

        The inboxes are read only when everything else already looks quiet; a member found
        with unread mail (one sent from another process, say) is woken and the team is not
        quiet."""
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

    def _looks_quiet(self, team: _Team) -> bool:
        """`quiet` as far as the team's state in memory tells (no mailbox read)."""
        if team.sending:
            return False
        for name, member in team.members.items():
            if member.status == "stopped":
                continue
            if member.status not in QUIET or name not in team.sleeping:
                return False
            wake = team.wake.get(name)
            if wake is None or wake.is_set():
                return False
        return True

    async def _quiet(self, team: _Team) -> bool:
        if not self._looks_quiet(team):
            return False
        names = [n for n, m in team.members.items() if m.status != "stopped"]
        unread = await asyncio.to_thread(self._with_unread, team.id, names)
        for name in unread:  # mail nobody woke it for: it is woken now
            self._wake(team, name)
        # still quiet after the read: a mail sent meanwhile in this process woke its member
        return not unread and self._looks_quiet(team)

    def _with_unread(self, team_id: str, names: Sequence[str]) -> list[str]:
        return [name for name in names if self._mailbox.unread(team_id, name)]

    def _wake(self, team: _Team, to: str) -> None:
        if to == LEAD:
            team.lead_wake.set()
        else:
            team.wake.setdefault(to, asyncio.Event()).set()

    async def close(self) -> None:
        """Stop every member loop (their runs are cancelled; sessions stay resumable)."""
        loops = [task for team in self._teams.values() for task in team.loops.values()]
        for task in loops:
            task.cancel()
        if loops:
            await asyncio.wait(loops, timeout=self.limits.cancel_timeout_s)
        for team in self._teams.values():
            team.loops.clear()

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
        self, team: _Team, definition: str, name: str, prompt: str, labels: list[str]
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
            await self._save(team)
        except BaseException:
            self._unreserve(team, name)
            raise
        self._changed(team, member, "joined the team")
        self._start_loop(team, name)
        where = f", working in {worktree.path}" if worktree is not None else ""
        return ToolOutput(
            f"teammate {name} ({definition}) joined the team{where}; session {member.session_id}"
        )

    def _unreserve(self, team: _Team, name: str) -> None:
        """Take back a spawn that failed before the member's loop started (nothing was mailed
        to it that anyone may expect an answer to: its inbox is left as it is)."""
        team.members.pop(name, None)
        team.joining.discard(name)
        team.wake.pop(name, None)
        team.offered.pop(name, None)
        team.lead_wake.set()

    async def send(
        self, team: _Team, sender: str, to: str, kind: str, body: str, data: dict[str, Any]
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
            moved = await self._hand_off(team, sender, to, payload)
            if isinstance(moved, ToolOutput):
                return moved
        team.sending += 1  # from the write to the wake-up, the team is not quiet
        try:
            sent = await asyncio.to_thread(self._mailbox.send, team.id, mail)
        except MailRefused as exc:
            return ToolOutput(f"send_message: {exc}", is_error=True)
        finally:
            team.sending -= 1
            self._wake(team, to)  # the mail, if written, is found; if not, nothing is lost
        if sender != LEAD and kind == "plan_approval_request":
            team.awaiting.add(sender)
        return ToolOutput(f"mail {sent.id} ({kind}) sent to {to}")

    async def _hand_off(
        self, team: _Team, sender: str, to: str, data: dict[str, Any]
    ) -> ToolOutput | None:
        """A handoff releases the sender's step and copies its artifacts to the recipient."""
        task, step = data.get("task"), data.get("step_id")
        if isinstance(task, str) and isinstance(step, str) and step:
            state = await self._task_state(team.id, task)
            if state is None or step not in state.steps:
                return ToolOutput(f"send_message: task {task!r} has no step {step!r}", True)
            if state.holder(step, self._clock.now()) == sender:
                record = StepReleased(seq=0, at=self._clock.now(), actor=sender, step_id=step)
                await asyncio.to_thread(self._tasks.append, team.id, task, record)
        artifacts = data.get("artifacts") or []
        if artifacts and self._artifacts is not None and to != LEAD:
            source = team.members[sender].session_id if sender != LEAD else team.id
            target = team.members[to].session_id
            runs = await self._store.list_runs(target)
            if not runs:
                return ToolOutput(f"send_message: teammate {to} has not started yet", True)
            copied: list[str] = []
            for artifact_id in artifacts:
                info = await self._artifacts.get(source, str(artifact_id))
                if info is None:
                    missing = f"send_message: no artifact {artifact_id!r} to hand off"
                    return ToolOutput(missing, is_error=True)
                content = await self._artifacts.read(source, info.id, offset=0, length=info.size)
                saved = await self._artifacts.save(
                    session_id=target,
                    run_id=runs[-1].id,
                    filename=info.filename,
                    data=content,
                    preview_chars=200,
                )
                copied.append(saved.id)
            data["artifacts"] = copied
        return None

    def status_text(self, team: _Team) -> str:
        if not team.members:
            return "The team has no teammates yet."
        lines = []
        for m in team.members.values():
            step = f", step {m.step}" if m.step else ""
            where = f", worktree {m.worktree}" if m.worktree else ""
            lines.append(f"{m.name} ({m.role}): {m.status}{step}{where}")
        return "\n".join(lines)

    async def lead_wait(self, team: _Team, timeout_s: float) -> ToolOutput:
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
                return ToolOutput("No mail; every teammate is idle.\n" + self.status_text(team))
            left = deadline - self._clock.monotonic()
            if left <= 0:
                return ToolOutput("No mail yet (timed out).\n" + self.status_text(team))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(team.lead_wake.wait(), timeout=min(left, 0.2))

    async def worktree_action(
        self, team: _Team, action: str, name: str, message: str
    ) -> ToolOutput:
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
                    await self._save(team)
                return ToolOutput(f"merged the worktree of {name} as {outcome.commit}")
            await asyncio.to_thread(wt.reject, name)
            if member.status != "stopped":  # it goes on working, from the project as it is now
                await asyncio.to_thread(wt.create, team.id, name)
            else:
                member.worktree = None
                await self._save(team)
            return ToolOutput(f"discarded what teammate {name} changed")
        except SoongAgentError as exc:
            return ToolOutput(str(exc), is_error=True)

    # --- the member loops --------------------------------------------------------------------
    def _team(self, team_id: str, project_dir: str) -> _Team:
        team = self._teams.get(team_id)
        if team is None:
            team = self._teams[team_id] = _Team(id=team_id, project_dir=project_dir)
        return team

    def _start_loop(self, team: _Team, name: str) -> None:
        team.wake.setdefault(name, asyncio.Event())
        team.offered.setdefault(name, set())
        running = team.loops.get(name)
        if running is None or running.done():
            team.loops[name] = asyncio.create_task(
                self._loop(team, name), name=f"soong-teammate-{name}"
            )

    async def _loop(self, team: _Team, name: str) -> None:
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
                await asyncio.sleep(self.limits.poll_s)

    async def _round(self, team: _Team, name: str) -> None:
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

    async def _sleep(self, team: _Team, name: str) -> None:
        event = team.wake[name]
        team.sleeping.add(name)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout=self.limits.poll_s)
        finally:
            team.sleeping.discard(name)
            event.clear()

    async def _work_for(self, team: _Team, member: Member) -> tuple[str, str, str] | None:
        """A ready step of the team's task graphs this member may take up, not yet offered to
        it at this claim count (so a step it let go is offered again only after a change)."""
        _, spec = self._setup(member.role, member.worktree)
        tools = set(spec.tools.names())
        now = self._clock.now()
        offered = team.offered[member.name]
        for ref in await asyncio.to_thread(self._tasks.list, team.id):
            state = await self._task_state(team.id, ref.name)
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

    async def _task_state(self, team_id: str, task: str) -> TaskState | None:
        records, _ = await asyncio.to_thread(self._tasks.read, team_id, task)
        if not records:
            return None
        return fold(records).state

    async def _held(self, team: _Team, name: str) -> list[tuple[str, str]]:
        now = self._clock.now()
        held: list[tuple[str, str]] = []
        for ref in await asyncio.to_thread(self._tasks.list, team.id):
            state = await self._task_state(team.id, ref.name)
            if state is None:
                continue
            held += [(ref.name, s) for s in state.steps if state.holder(s, now) == name]
        return held

    async def _work(self, team: _Team, member: Member, message: str, step: str | None) -> None:
        await self._set(team, member, "working", step)
        try:
            await self._run(team, member, message)
        finally:
            held = await self._held(team, member.name)
            now_step = f"{held[0][0]}/{held[0][1]}" if held else None
            status: MemberStatus = "waiting_approval" if member.name in team.awaiting else "idle"
            if team.members[member.name].status != "stopped":
                await self._set(team, member, status, now_step)

    async def _run(self, team: _Team, member: Member, message: str) -> RunResult | None:
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
        # the lead's restrictions bind the teammate: its mode, and its session's plan mode
        lineage = Lineage(
            kind="teammate",
            agent=member.role,
            depth=1,
            parent_session_id=team.id,
            parent_run_id=lead.run_info.id if lead is not None else "",
            parent_call_id="",
            parent_mode=team.lead_mode,
            label=f"teammate {member.name}",
            worker=member.name,
            task_session_id=team.id,
            actor=member.name,
        )
        prepared = await starter.prepare(
            assembler,
            spec,
            lineage,
            session=session,
            message=message,
            history=history,
            resumed=bool(history),
            grants=team.grants,
            earlier=history,
            team=lambda rec, hooks: Seat(self, team, member.name, rec),
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
        await wait_bounded(task, self.limits.run_timeout_s, self.limits.cancel_timeout_s)
        if not task.done() or task.cancelled():
            return None
        result = task.result()
        lead = team.lead_running()
        if lead is not None:
            lead.event(
                ChildFinished,
                kind="teammate",
                agent=member.role,
                child_session_id=session.id,
                child_run_id=prepared.run_info.id,
                parent_call_id="",
                status=result.status,
                reason=result.reason,
                turns=result.turns,
                usage=result.usage,
                cost_usd=(
                    result.cost_usd
                    if result.cost_usd is not None
                    else cost_usd(result.usage, spec.settings.price)
                ),
                worker=member.name,
            )
        return result

    async def _stop(self, team: _Team, member: Member, request: Mail, mails: list[Mail]) -> None:
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
                await self._set(team, member, "stopped", None, reason="shut down on request")
            finally:  # acknowledged even when the roster could not be saved
                await asyncio.to_thread(self._mailbox.send, team.id, ack)
        finally:
            team.sending -= 1
            self._wake(team, request.sender)
        if self._worktrees is not None and member.worktree is not None:
            diff = await asyncio.to_thread(self._worktrees.diff, member.name)
            if not diff.strip():  # nothing left to review: the worktree goes
                await asyncio.to_thread(self._worktrees.remove, member.name)
                member.worktree = None
                await self._save(team)
        lead = team.lead_running()
        if lead is not None and team.lead_hooks is not None:
            await team.lead_hooks.subagent_stop(
                lead, agent_id=member.role, reason="stopped", session=member.session_id
            )

    # --- the roster ----------------------------------------------------------------------------
    async def _set(
        self,
        team: _Team,
        member: Member,
        status: MemberStatus,
        step: str | None,
        *,
        reason: str = "",
    ) -> None:
        if member.status == status and member.step == step:
            return
        member.status, member.step = status, step
        await self._save(team)
        self._changed(team, member, reason)

    def _changed(self, team: _Team, member: Member, reason: str) -> None:
        lead = team.lead_running()
        if lead is not None:
            lead.event(
                TeamChanged,
                team=team.id,
                member=member.name,
                role=member.role,
                status=member.status,
                step=member.step,
                reason=reason,
            )
        team.lead_wake.set()

    async def _save(self, team: _Team) -> None:
        # a member still joining is left out: should its spawn fail, no restart brings it back
        members = [m for n, m in team.members.items() if n not in team.joining]
        text = json.dumps({"members": [m.as_json() for m in members]})
        async with team.save_lock:
            for _ in range(5):
                previous = await self._store.get_mark(team.id, ROSTER_MARK)
                if await self._store.set_mark(team.id, ROSTER_MARK, text, previous=previous):
                    return


class Seat:
    """The `TeamSeat` of one run: the lead's (``lead``) or a teammate's."""

    def __init__(self, service: TeamService, team: _Team, member: str, rec: RunRecorder) -> None:
        self._service = service
        self._team = team
        self.member = member
        self._rec = rec

    async def inbox(self) -> str:
        """The mails that arrived since the last look, rendered for the model (marked read)."""
        service, team = self._service, self._team
        mails = await asyncio.to_thread(service._mailbox.unread, team.id, self.member)
        if not mails:
            return ""
        await asyncio.to_thread(service._mailbox.mark_read, team.id, self.member, mails[-1].seq)
        for mail in mails:
            if mail.kind == "shutdown_request" and self.member != LEAD:
                team.shutdown[self.member] = mail
            if mail.kind == "plan_approval":
                team.awaiting.discard(self.member)
        return render_mails(mails)

    def _lead_only(self, tool: str) -> ToolOutput | None:
        if self.member != LEAD:
            return ToolOutput(f"{tool} is the lead's tool", is_error=True)
        return None

    async def spawn(self, definition: str, name: str, prompt: str, labels: list[str]) -> ToolOutput:
        refused = self._lead_only("spawn_teammate")
        if refused is not None:
            return refused
        return await self._service.spawn(self._team, definition, name, prompt, labels)

    async def send(self, to: str, kind: str, body: str, data: dict[str, Any]) -> ToolOutput:
        return await self._service.send(self._team, self.member, to, kind, body, data)

    async def status(self) -> ToolOutput:
        return ToolOutput(self._service.status_text(self._team))

    async def wait(self, timeout_s: float) -> ToolOutput:
        refused = self._lead_only("team_wait")
        if refused is not None:
            return refused
        return await self._service.lead_wait(self._team, timeout_s)

    async def worktree(self, action: str, member: str, message: str) -> ToolOutput:
        refused = self._lead_only(f"{action}_worktree")
        if refused is not None:
            return refused
        return await self._service.worktree_action(self._team, action, member, message)


def render_mails(mails: Sequence[Mail]) -> str:
    """Mails as the model reads them: one block each, labelled by sender and kind."""
    blocks = []
    for mail in mails:
        head = f"[mail {mail.id} from {mail.sender}, {mail.kind}]"
        extra = f"\n{json.dumps(mail.data, ensure_ascii=False)}" if mail.data else ""
        blocks.append(f"{head}\n{mail.body}{extra}".rstrip())
    return "\n\n".join(blocks)
