"""A run's seat in a team (`TeamSeat`): the lead's or a teammate's, and mail as the model reads
it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any, Protocol

from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.teams.roster import Team, status_text
from soong_agent.application.tools.base import ToolOutput
from soong_agent.ports.mailbox import LEAD, Mail, Mailbox

__all__ = ["Seat", "TeamActions", "render_mails"]


class TeamActions(Protocol):
    """What a seat asks of the team service (`TeamService`)."""

    async def spawn(
        self, team: Team, definition: str, name: str, prompt: str, labels: list[str]
    ) -> ToolOutput: ...

    async def send(
        self, team: Team, sender: str, to: str, kind: str, body: str, data: dict[str, Any]
    ) -> ToolOutput: ...

    async def lead_wait(self, team: Team, timeout_s: float) -> ToolOutput: ...

    async def worktree_action(
        self, team: Team, action: str, name: str, message: str
    ) -> ToolOutput: ...


class Seat:
    """The `TeamSeat` of one run: the lead's (``lead``) or a teammate's."""

    def __init__(
        self, service: TeamActions, mailbox: Mailbox, team: Team, member: str, rec: RunRecorder
    ) -> None:
        self._service = service
        self._mailbox = mailbox
        self._team = team
        self.member = member
        self._rec = rec

    async def inbox(self) -> str:
        """The mails that arrived since the last look, rendered for the model (marked read)."""
        mailbox, team = self._mailbox, self._team
        mails = await asyncio.to_thread(mailbox.unread, team.id, self.member)
        if not mails:
            return ""
        await asyncio.to_thread(mailbox.mark_read, team.id, self.member, mails[-1].seq)
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
        return ToolOutput(status_text(self._team))

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
