"""What a run is — the root of a session, or a sub-agent, fork, worker or teammate of another
run — as one value (issue 32; codex's `SessionSource::SubAgent{parent, depth, role}`).

A new kind of run is a new value of `Lineage`, never a new starter: the `RunStarter` reads
everything it needs from it (the approver's label, the parent whose restrictions bind the run,
who the hooks fire for, whose task graphs the task tools see). A child's lineage is stored
with its run as its `child_started` event, which `soong-agent sessions show` reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from soong_agent.domain.permissions import PermissionMode
from soong_agent.ports.events import ChildKind

__all__ = ["Lineage", "RunKind"]

RunKind = Literal["root", "sub_agent", "fork", "worker", "teammate"]

TASK_CHARS = 200
"""How much of a child's task its `child_started` events keep."""


@dataclass(frozen=True, slots=True)
class Lineage:
    """What one run is and whose it is."""

    kind: RunKind = "root"
    agent: str | None = None
    """The agent definition the run follows (None: a root run of the default agent)."""
    depth: int = 0
    """0 for a root run; one more than its parent's for a child."""
    parent_session_id: str | None = None
    parent_run_id: str | None = None
    parent_call_id: str | None = None
    """The call of the parent's that started it ("" for a teammate: mail starts it)."""
    parent_mode: PermissionMode | None = None
    """The parent run's permission mode: the child's is at least as strict."""
    label: str = ""
    """How approvals and messages name the run: ``sub-agent reviewer``, ``fork``,
    ``worker build/w1``, ``teammate alice`` ("" for a root run)."""
    pool: str | None = None
    worker: str | None = None
    """A worker's pool and id; a teammate's name."""
    task_session_id: str | None = None
    """Whose task graphs the run's task tools and board see (None: its own session's)."""
    actor: str | None = None
    """Who the run acts as in task graphs (a teammate's name; None: the run)."""

    @property
    def is_root(self) -> bool:
        return self.kind == "root"

    @property
    def hook_agent(self) -> str:
        """Who the run's hooks fire for: ``root``, or the child's agent definition."""
        return "root" if self.kind == "root" else (self.agent or self.kind)

    def child_kind(self) -> ChildKind:
        """The kind of a child run (ValueError for a root run)."""
        if self.kind == "root":
            raise ValueError("a root run is nobody's child")
        return self.kind

    def started_fields(
        self, *, child_session_id: str, child_run_id: str, task: str, model: str
    ) -> dict[str, Any]:
        """The fields of the `child_started` event that records this lineage."""
        return {
            "kind": self.child_kind(),
            "agent": self.agent or self.kind,
            "child_session_id": child_session_id,
            "child_run_id": child_run_id,
            "parent_session_id": self.parent_session_id or "",
            "parent_run_id": self.parent_run_id or "",
            "parent_call_id": self.parent_call_id or "",
            "task": task[:TASK_CHARS],
            "model": model,
            "pool": self.pool,
            "worker": self.worker,
            "depth": self.depth,
        }
