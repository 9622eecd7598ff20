"""What a child's end turns into (AGT-2): the parent's tool output and the `child_finished`
fields naming the child; and, before a fork starts, its copy of the parent's context."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from soong_agent.application.runs.handle import RunResult
from soong_agent.application.runs.lineage import Lineage
from soong_agent.application.tools.base import ToolOutput
from soong_agent.domain.history import unanswered_calls
from soong_agent.ports.events import ChildKind
from soong_agent.ports.messages import Message, ToolResultBlock

__all__ = [
    "FORK_CALL_RESULT",
    "ChildEnd",
    "child_output",
    "fork_context",
    "result_of",
    "timed_out_reason",
]

FORK_CALL_RESULT = (
    "This call started you: you are the fork. Do the sub-task below; your final answer goes "
    "back to the agent that forked you."
)
"""The result a fork's copy of the parent's context gets for the parent's pending calls."""


@dataclass(frozen=True, slots=True)
class ChildEnd:
    """Which child ended: what its `child_finished` event names."""

    lineage: Lineage
    session_id: str
    run_id: str

    @property
    def kind(self) -> ChildKind:
        return self.lineage.child_kind()

    @property
    def agent(self) -> str:
        return self.lineage.agent or self.lineage.kind

    @property
    def call_id(self) -> str:
        return self.lineage.parent_call_id or ""

    @property
    def pool(self) -> str | None:
        return self.lineage.pool

    @property
    def worker(self) -> str | None:
        return self.lineage.worker


def result_of(task: asyncio.Task[RunResult], session_id: str, run_id: str) -> RunResult:
    """The child's result; a cancelled one when its run did not end after the cancel."""
    if task.done() and not task.cancelled():
        return task.result()
    return RunResult(
        session_id=session_id,
        run_id=run_id,
        status="cancelled",
        reason="the child did not end within agents.child_cancel_timeout_ms",
    )


def child_output(
    label: str, session_id: str, result: RunResult, reason: str | None, timed_out: bool
) -> ToolOutput:
    """The parent's tool result: the child's final answer, or why it did not complete."""
    head = f"[{label}, session {session_id}, {result.status}"
    head += f" after {result.turns} turn{'s' if result.turns != 1 else ''}]"
    if result.status == "completed" and not timed_out:
        return ToolOutput(f"{head}\n{result.final_text}" if result.final_text else head)
    why = reason or result.status
    text = f"{head}\nThe child did not complete: {why}."
    if result.final_text:
        text += f"\nIts last answer:\n{result.final_text}"
    return ToolOutput(text, is_error=True)


def fork_context(history: Sequence[Message]) -> list[Message]:
    """A copy of the parent's active path for a fork: new ids (the store gives them), and the
    parent's calls still waiting for results (this fork's among them) answered by a note."""
    copies = [m.model_copy(update={"id": "", "parent_id": None}) for m in history]
    pending = unanswered_calls(copies)
    if pending:
        copies.append(
            Message(
                role="tool",
                content=[
                    ToolResultBlock(call_id=c.id, name=c.name, content=FORK_CALL_RESULT)
                    for c in pending
                ],
                kind="synthetic",
            )
        )
    return copies


def timed_out_reason(timeout_s: float) -> str:
    """Why a child that ran past its time did not complete."""
    return (
        f"did not finish within {timeout_s:g} s (agents.default_child_timeout_ms) and was cancelled"
    )
