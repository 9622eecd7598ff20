"""The run queue port (WORK-1, WORK-2): runs submitted by anyone, claimed by workers under a
lease, taken over when the lease runs out, fenced so that an old holder writes nothing more.

A queued run carries everything a worker needs to start it as `soong-agent run` would: the
session it goes into (a new session's id is chosen at submit time, so the submitter can print
it at once), the project folder, the message and the run's options. Its `id` becomes the id of
the run the worker starts, so `runs show RUN_ID` and `sessions show` speak of one run.

Every claim raises the run's `fence` by one; a holder proves it still holds the run by its
fence (`renew`, `finish`, `release`, and the session store's commit when it is given one), so
a worker frozen past its lease, whose run another worker took over, is refused everything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from soong_agent.ports.errors import UsageError

QueueStatus = Literal["queued", "running", "completed", "failed", "cancelled", "interrupted"]
"""Where a queued run is: waiting, held by a worker, or ended (`completed`, `failed` with a
reason — budget exhausted, `max_attempts` reached, an error — `cancelled`)."""

ENDED: frozenset[str] = frozenset({"completed", "failed", "cancelled", "interrupted"})


def attempt_fence(run_id: str, attempt_id: str) -> int | None:
    """The fence of an attempt of the queued run `run_id`, from the id of the run it started
    in its session (the first attempt's is `run_id`, 0; a takeover's `<run_id>-<fence>`); None
    for the id of another run."""
    if attempt_id == run_id:
        return 0
    if not attempt_id.startswith(run_id + "-"):
        return None
    suffix = attempt_id[len(run_id) + 1 :]
    return int(suffix) if suffix.isdigit() else 0


def queue_end(status: str, reason: str | None) -> tuple[QueueStatus, str]:
    """How the queue records a run that ended with the run status `status`: completed,
    cancelled, or failed, with the status and its reason."""
    if status == "completed":
        return "completed", ""
    said = f"{status}: {reason}" if reason else status
    return ("cancelled" if status == "cancelled" else "failed"), said


def session_end(
    status: str, reason: str | None, *, cancel_requested: bool
) -> tuple[QueueStatus, str] | None:
    """The end (`queue_end`) of an attempt that ended in its session with `status` although
    its worker never told the queue (it died between the two writes); None when it did not
    end: running, interrupted, or cancelled by a worker stopping without a cancellation asked
    for (it gives the run back, to be continued)."""
    if status in ("running", "interrupted"):
        return None
    if status == "cancelled" and not cancel_requested:
        return None
    return queue_end(status, reason)


@dataclass(frozen=True, slots=True)
class Dispatched:
    """A queued run that an orchestrator handed to the queue (AGT-4, TEAM-1, WORK-1): a worker
    of one of its pools (`dispatch_worker`) or a run of one of its teammates, run by whichever
    worker process claims it, linked to the orchestrator's run as an in-process one would be."""

    parent_session_id: str
    parent_run_id: str
    parent_call_id: str
    parent_mode: str
    """The orchestrator run's permission mode: the worker's is at least as strict."""
    pool: str
    worker: str
    agent: str
    """The worker's agent definition."""
    task_session_id: str
    """Whose task graphs the worker's task tools see (the orchestrator's session)."""
    depth: int = 1
    allowed_tools: tuple[str, ...] | None = None
    """The pool entry's cap on the definition's tools (None: no cap)."""
    kind: str = "worker"
    """``worker`` (a pool worker: `pool` and `worker` name it) or ``teammate`` (a member of the
    orchestrator's team: `worker` is its name, `parent_session_id` the team)."""


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What `run` takes besides the message, carried to the worker as given."""

    agent: str | None = None
    orchestrator: bool = False
    plan_mode: bool = False
    from_message: str | None = None
    resume: bool = False
    """The session exists already (the run continues it); False: the run makes it."""
    max_cost_usd: float | None = None
    max_tokens: int | None = None
    max_wall_ms: int | None = None
    max_turns: int | None = None
    model: str | None = None
    permission_mode: str | None = None
    dispatched: Dispatched | None = None
    """Set for a pool worker an orchestrator dispatched through the queue."""
    trace_parent: str | None = None
    """The W3C ``traceparent`` of whoever queued the run, when telemetry was on (OBS-1): every
    attempt of the run, on whichever worker, continues that trace."""


@dataclass(frozen=True, slots=True)
class QueuedRun:
    """One submitted run and where it stands."""

    id: str
    session_id: str
    project_dir: str
    message: str
    options: RunOptions = field(default_factory=RunOptions)
    status: QueueStatus = "queued"
    submitted_at: float = 0.0
    worker: str | None = None
    """The worker holding it (running) or that last held it."""
    attempts: int = 0
    """How many times a worker claimed it (a takeover counts)."""
    fence: int = 0
    lease_expires_at: float | None = None
    cancel_requested: bool = False
    reason: str = ""
    finished_at: float | None = None

    @property
    def ended(self) -> bool:
        return self.status in ENDED


@dataclass(frozen=True, slots=True)
class Lease:
    """A worker's hold on a run: valid while `fence` is the run's fence and it is renewed."""

    run: QueuedRun
    worker: str
    fence: int
    expires_at: float


class LeaseLost(UsageError):
    """The run was taken over (or cancelled and ended) since this lease was granted."""

    def __init__(self, run_id: str, fence: int) -> None:
        self.run_id = run_id
        self.fence = fence
        super().__init__(
            f"run {run_id}: this worker's lease (fence {fence}) was taken over by another "
            "worker; it writes nothing more"
        )


class RunNotQueued(UsageError):
    """No queued run has this id."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"no queued run {run_id!r} (runs list shows the runs there are)")


@runtime_checkable
class RunQueue(Protocol):
    """The queue of runs, in the session store's database (SQLite on one host, PostgreSQL
    across hosts). Every method may be called from any task of one event loop."""

    async def submit(self, run: QueuedRun) -> QueuedRun:
        """Store `run` as queued (its `status`, `attempts`, `fence` and lease are reset) and wake
        a waiting worker. UsageError when a run with its id exists."""
        ...

    async def claim(
        self, worker: str, projects: Sequence[str], *, lease_s: float, max_attempts: int, now: float
    ) -> Lease | None:
        """Take the oldest run of one of `projects` that is queued, or running under a lease
        that ended before `now` (a takeover): its attempts and fence go up by one and it is held
        by `worker` until `now + lease_s`. A run whose attempts already reached `max_attempts`
        is not claimed but ended `failed` with a reason saying so. None: nothing to take. Two
        claimers, in two processes or on two hosts, never get the same run and fence."""
        ...

    async def renew(self, lease: Lease, *, lease_s: float, now: float) -> Lease:
        """Extend the lease to `now + lease_s`; the returned lease says whether cancellation
        was asked for (`run.cancel_requested`). LeaseLost when the run's fence moved on."""
        ...

    async def finish(
        self, lease: Lease, status: QueueStatus, *, reason: str = "", now: float
    ) -> QueuedRun:
        """End the held run with `status` (an ended status). LeaseLost as for `renew`."""
        ...

    async def release(self, lease: Lease, *, now: float) -> QueuedRun:
        """Give the held run back: queued again at once (a worker stopping), its attempt not
        counted against it. LeaseLost as for `renew`."""
        ...

    async def cancel(self, run_id: str, *, now: float) -> QueuedRun:
        """Cancel a run: a queued one ends `cancelled` at once; a running one is marked
        `cancel_requested` for its holder to honour; an ended one is returned as it is.
        RunNotQueued for an unknown id."""
        ...

    async def get(self, run_id: str) -> QueuedRun | None:
        """The run, or None."""
        ...

    async def list(
        self, *, status: QueueStatus | None = None, limit: int = 100
    ) -> Sequence[QueuedRun]:
        """Runs, newest submitted first (only those with `status` when given)."""
        ...

    async def wait_for_work(self, timeout_s: float) -> bool:
        """Wait until a run may have been submitted, released or cancelled since the call (a
        notification from any process), or `timeout_s` passed (False). A True may be spurious:
        the caller claims and finds out."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...
