"""A ``handoff`` mail's moves (issue 20): the sender lets go of its step, and the artifacts it
names are copied into the recipient's session."""

from __future__ import annotations

import asyncio
from typing import Any

from soong_agent.application.teams.members import task_state
from soong_agent.application.teams.roster import Team
from soong_agent.application.tools.base import ToolOutput
from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.mailbox import LEAD
from soong_agent.ports.storage import SessionStore
from soong_agent.ports.system import Clock
from soong_agent.ports.tasks import StepReleased, TaskLog

__all__ = ["hand_off"]


async def hand_off(
    team: Team,
    sender: str,
    to: str,
    data: dict[str, Any],
    *,
    store: SessionStore,
    tasks: TaskLog,
    clock: Clock,
    artifacts: ArtifactStore | None,
) -> ToolOutput | None:
    """A handoff releases the sender's step and copies its artifacts to the recipient (the
    copies' ids replace the originals' in `data`); a ToolOutput says why it could not."""
    task, step = data.get("task"), data.get("step_id")
    if isinstance(task, str) and isinstance(step, str) and step:
        state = await task_state(tasks, team.id, task)
        if state is None or step not in state.steps:
            return ToolOutput(f"send_message: task {task!r} has no step {step!r}", True)
        if state.holder(step, clock.now()) == sender:
            record = StepReleased(seq=0, at=clock.now(), actor=sender, step_id=step)
            await asyncio.to_thread(tasks.append, team.id, task, record)
    names = data.get("artifacts") or []
    if names and artifacts is not None and to != LEAD:
        source = team.members[sender].session_id if sender != LEAD else team.id
        target = team.members[to].session_id
        runs = await store.list_runs(target)
        if not runs:
            return ToolOutput(f"send_message: teammate {to} has not started yet", True)
        copied: list[str] = []
        for artifact_id in names:
            info = await artifacts.get(source, str(artifact_id))
            if info is None:
                missing = f"send_message: no artifact {artifact_id!r} to hand off"
                return ToolOutput(missing, is_error=True)
            content = await artifacts.read(source, info.id, offset=0, length=info.size)
            saved = await artifacts.save(
                session_id=target,
                run_id=runs[-1].id,
                filename=info.filename,
                data=content,
                preview_chars=200,
            )
            copied.append(saved.id)
        data["artifacts"] = copied
    return None
