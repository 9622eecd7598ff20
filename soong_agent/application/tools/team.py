"""The team tools (issue 20, seed 003): the lead's `spawn_teammate`, `team_status`, `team_wait`
and the worktree review tools; everyone's `send_message`.

Each hands its call to the run's `TeamSeat` (`ToolContext.team`). Mails only change the team's
own logs, never project files, so these are ``read_only`` for the permission engine; merging a
teammate's worktree into the project (`accept_worktree`) is a ``write``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput
from soong_agent.ports.defaults import no_entries, no_items
from soong_agent.ports.mailbox import MAIL_KINDS

_NO_TEAM = "this run is not part of a team (teams need orchestrator mode)"
_MEMBER = Field(description="A teammate's name (lowercase letters, digits and '-').")


class SpawnTeammateArgs(ToolArgs):
    definition: str = Field(description="The agent definition the teammate follows.")
    name: str = _MEMBER
    prompt: str = Field(min_length=1, description="Its first instructions (its first mail).")
    labels: list[str] = Field(
        default_factory=no_items, description="Labels of work items it may take up on its own."
    )


class SendMessageArgs(ToolArgs):
    to: str = Field(description="A teammate's name, or 'lead'.")
    kind: str = Field(default="message", description=f"One of: {', '.join(MAIL_KINDS)}.")
    body: str = Field(default="", description="The text of the mail.")
    data: dict[str, Any] = Field(
        default_factory=no_entries,
        description=(
            "By kind: plan_approval {approved: true|false, note}; handoff {task, step_id, "
            "summary, artifacts: [artifact ids]}; ack {of: mail id}."
        ),
    )


class TeamStatusArgs(ToolArgs):
    pass


class TeamWaitArgs(ToolArgs):
    timeout_s: float = Field(default=60.0, gt=0, le=3600, description="How long to wait.")


class WorktreeArgs(ToolArgs):
    member: str = _MEMBER


class AcceptWorktreeArgs(WorktreeArgs):
    message: str = Field(default="", description="The merge commit's message.")


async def _spawn(args: SpawnTeammateArgs, ctx: ToolContext) -> ToolOutput:
    if ctx.team is None:
        return ToolOutput(_NO_TEAM, is_error=True)
    return await ctx.team.spawn(args.definition, args.name, args.prompt, args.labels)


async def _send(args: SendMessageArgs, ctx: ToolContext) -> ToolOutput:
    if ctx.team is None:
        return ToolOutput(_NO_TEAM, is_error=True)
    return await ctx.team.send(args.to, args.kind, args.body, args.data)


async def _status(args: TeamStatusArgs, ctx: ToolContext) -> ToolOutput:
    if ctx.team is None:
        return ToolOutput(_NO_TEAM, is_error=True)
    return await ctx.team.status()


async def _wait(args: TeamWaitArgs, ctx: ToolContext) -> ToolOutput:
    if ctx.team is None:
        return ToolOutput(_NO_TEAM, is_error=True)
    return await ctx.team.wait(args.timeout_s)


def _worktree_handler(action: str) -> Any:
    async def handle(args: WorktreeArgs, ctx: ToolContext) -> ToolOutput:
        if ctx.team is None:
            return ToolOutput(_NO_TEAM, is_error=True)
        message = args.message if isinstance(args, AcceptWorktreeArgs) else ""
        return await ctx.team.worktree(action, args.member, message)

    return handle


def send_message_tool() -> Tool:
    """`send_message`, for the lead and every teammate."""
    return Tool(
        name="send_message",
        description=(
            "Send a mail to a teammate or the lead; it reaches them at the start of their next "
            "turn. Kinds: message, shutdown_request, shutdown_ack, plan_approval_request, "
            "plan_approval, handoff (moves a task step and its artifacts), ack."
        ),
        args_model=SendMessageArgs,
        handler=_send,
        describe=lambda a, c: ("*", f"mail {a.kind} to {a.to}"),
    )


def lead_tools() -> list[Tool]:
    """The lead's team tools (orchestrator mode)."""
    return [
        Tool(
            name="spawn_teammate",
            description=(
                "Add a long-lived teammate: it works in its own session (and git worktree), "
                "reads its mails at each turn and takes up ready work items that fit it."
            ),
            args_model=SpawnTeammateArgs,
            handler=_spawn,
            describe=lambda a, c: ("*", f"add teammate {a.name} ({a.definition})"),
        ),
        send_message_tool(),
        Tool(
            name="team_status",
            description="The team: each member's role, status and current step.",
            args_model=TeamStatusArgs,
            handler=_status,
        ),
        Tool(
            name="team_wait",
            description=(
                "Wait until a mail arrives for you or every teammate is idle; returns the mails."
            ),
            args_model=TeamWaitArgs,
            handler=_wait,
        ),
        Tool(
            name="review_worktree",
            description="The diff of everything a teammate changed in its worktree.",
            args_model=WorktreeArgs,
            handler=_worktree_handler("review"),
            describe=lambda a, c: ("*", f"review the worktree of {a.member}"),
        ),
        Tool(
            name="accept_worktree",
            description=(
                "Merge a teammate's worktree into the project; a conflict is reported, never "
                "forced."
            ),
            args_model=AcceptWorktreeArgs,
            handler=_worktree_handler("accept"),
            permission_class="write",
            describe=lambda a, c: (
                f"accept_worktree {a.member}",
                f"merge the worktree of {a.member} into the project",
            ),
        ),
        Tool(
            name="reject_worktree",
            description="Discard what a teammate changed in its worktree.",
            args_model=WorktreeArgs,
            handler=_worktree_handler("reject"),
            describe=lambda a, c: ("*", f"discard the worktree of {a.member}"),
        ),
    ]
