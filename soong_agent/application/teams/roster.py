"""A team's roster: its members as the lead's session records them, and a team's state in this
process (members, loops, wake-ups, the lead's run); each status change is saved and reported."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from soong_agent.application.hooks import RunHooks
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.domain.permissions import PermissionMode, SessionGrants
from soong_agent.ports.events import MemberStatus, TeamChanged
from soong_agent.ports.mailbox import LEAD, Mail
from soong_agent.ports.storage import SessionStore

__all__ = [
    "QUIET",
    "ROSTER_MARK",
    "Member",
    "Team",
    "TeamLimits",
    "announce",
    "roster_from_mark",
    "save_roster",
    "set_status",
    "status_text",
]

ROSTER_MARK = "team.roster"
"""The mark of the lead's session that holds the roster (JSON)."""
QUIET: frozenset[str] = frozenset({"idle", "stopped", "waiting_approval"})


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
class Team:
    """One team in this process: its roster, its members' loops and wake-ups, the lead's run."""

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

    def looks_quiet(self) -> bool:
        """`TeamService.quiet` as far as the team's state in memory tells (no mailbox read):
        nothing is being sent, every member not stopped is idle or waiting for an approval,
        asleep and not woken."""
        if self.sending:
            return False
        for name, member in self.members.items():
            if member.status == "stopped":
                continue
            if member.status not in QUIET or name not in self.sleeping:
                return False
            wake = self.wake.get(name)
            if wake is None or wake.is_set():
                return False
        return True

    def wake_up(self, to: str) -> None:
        """Wake the member `to` (or the lead's `team_wait`)."""
        if to == LEAD:
            self.lead_wake.set()
        else:
            self.wake.setdefault(to, asyncio.Event()).set()


async def save_roster(store: SessionStore, team: Team) -> None:
    """Save the team's roster in the lead's session (a mark, compare-and-set)."""
    # a member still joining is left out: should its spawn fail, no restart brings it back
    members = [m for n, m in team.members.items() if n not in team.joining]
    text = json.dumps({"members": [m.as_json() for m in members]})
    async with team.save_lock:
        for _ in range(5):
            previous = await store.get_mark(team.id, ROSTER_MARK)
            if await store.set_mark(team.id, ROSTER_MARK, text, previous=previous):
                return


def announce(team: Team, member: Member, reason: str) -> None:
    """A member's change as a `team_changed` event of the lead's run; the lead's wait wakes."""
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


async def set_status(
    store: SessionStore,
    team: Team,
    member: Member,
    status: MemberStatus,
    step: str | None,
    *,
    reason: str = "",
) -> None:
    """A member's new status and step, saved in the roster and announced (no-op if same)."""
    if member.status == status and member.step == step:
        return
    member.status, member.step = status, step
    await save_roster(store, team)
    announce(team, member, reason)


def status_text(team: Team) -> str:
    """The roster as `team_status` shows it: a line per member."""
    if not team.members:
        return "The team has no teammates yet."
    lines = []
    for m in team.members.values():
        step = f", step {m.step}" if m.step else ""
        where = f", worktree {m.worktree}" if m.worktree else ""
        lines.append(f"{m.name} ({m.role}): {m.status}{step}{where}")
    return "\n".join(lines)
