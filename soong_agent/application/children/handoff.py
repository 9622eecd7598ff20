"""Pool workers run by other processes (AGT-4, WORK-1).

When the runtime has a run queue to hand work to (a `soong-agent worker`'s runtime), an
orchestrator's `dispatch_worker` does not start the worker in its own process: it queues the
worker's run, linked to its own run by its lineage, and waits for it to end. Whichever worker
process claims the queued run (on this host or another) starts it as a pool worker, under the
orchestrator's mode and what is left of its budgets; its final answer, usage and cost come back
to the orchestrator as an in-process worker's would.

`ChildQueue` is what the launcher needs of that queue; the application's worker package
implements it over the `RunQueue` port.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from soong_agent.application.children.pools import ChildLimits
from soong_agent.application.children.results import ChildEnd, child_output, timed_out_reason
from soong_agent.application.runs.handle import RunResult
from soong_agent.application.runs.lineage import Lineage
from soong_agent.application.tools.base import ToolOutput
from soong_agent.domain.run_limits import RunLimits

__all__ = ["ChildQueue", "HandedOff", "Handoff", "queued_child"]


@dataclass(frozen=True, slots=True)
class Handoff:
    """A pool worker's run to be queued."""

    lineage: Lineage
    task: str
    limits: RunLimits
    """What is left of the orchestrator's budgets, within the worker's and its pool's."""
    allowed_tools: tuple[str, ...] | None
    project_dir: str
    session_id: str | None = None
    """The session the run continues or starts (a teammate's); None: a new one."""


@dataclass(frozen=True, slots=True)
class HandedOff:
    """The queued worker run: its new session and its run id."""

    session_id: str
    run_id: str


class ChildQueue(Protocol):
    """Where an orchestrator's workers are queued, and how it learns how they ended."""

    async def hand_off(self, handoff: Handoff) -> HandedOff:
        """Queue the worker's run; its ids are chosen now."""
        ...

    async def outcome(
        self, handed: HandedOff, *, timeout_s: float, cancel_s: float, park: bool = True
    ) -> tuple[RunResult, bool]:
        """Wait for the run to end and return how it ended, and whether it was cancelled for
        taking longer than `timeout_s` (its holder then has `cancel_s` to end it). A waiter
        cancelled meanwhile asks for the run's cancellation before it re-raises. `park`: the
        current run waits meanwhile (`runs.parking`)."""
        ...


async def queued_child(
    queue: ChildQueue,
    handoff: Handoff,
    limits: ChildLimits,
    *,
    model: str,
    started: Callable[[dict[str, Any]], object],
    ended: Callable[[ChildEnd, RunResult, str | None], Awaitable[None]],
) -> ToolOutput:
    """Queue the worker's run, record its `child_started` (`started`, in the orchestrator's
    run), wait for its end within `limits`, and record that (`ended`); the orchestrator's tool
    result is its final answer, or why it did not complete."""
    lineage = handoff.lineage
    handed = await queue.hand_off(handoff)
    started(
        lineage.started_fields(
            child_session_id=handed.session_id,
            child_run_id=handed.run_id,
            task=handoff.task,
            model=model,
        )
    )
    end = ChildEnd(lineage, handed.session_id, handed.run_id)
    try:
        result, timed_out = await queue.outcome(
            handed, timeout_s=limits.timeout_s, cancel_s=limits.cancel_timeout_s
        )
    except asyncio.CancelledError:  # the orchestrator was cancelled: so was its worker
        cancelled = RunResult(
            session_id=handed.session_id,
            run_id=handed.run_id,
            status="cancelled",
            reason="the orchestrator's run was cancelled",
        )
        await ended(end, cancelled, None)
        raise
    reason = timed_out_reason(limits.timeout_s) if timed_out else result.reason
    await ended(end, result, reason)
    return child_output(lineage.label, handed.session_id, result, reason, timed_out)
