"""What every run event shares (LOOP-3): the base model, the run statuses, default factories."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from soong_agent.ports.streaming import Usage

RunStatus = Literal[
    "running",
    "completed",
    "cancelled",
    "failed",
    "max_turns",
    "stuck",
    "budget_exhausted",
    "blocked",
    "interrupted",
]
"""`blocked`: a pre_sampling hook stopped the run before a model call (HOOK-1).
`interrupted`: the process running it ended before the run's end was saved (killed, or the
store refused the last write); a store reports it so once no live process holds the run. The
session resumes as after any other end."""


# Default factories are plain functions (see `soong_agent.ports.defaults`): pydantic reads a
# factory's signature when it builds a model, and that of a model class costs far more.
def no_usage() -> Usage:
    """An empty `Usage` (a default factory)."""
    return Usage()


class EventBase(BaseModel):
    """What every run event has: its run, its session, its place in the run and its time."""

    # built at first use, not at import: a run uses a handful of the event types
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    seq: int
    run_id: str
    session_id: str
    at: float
