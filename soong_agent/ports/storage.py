"""The session store port: sessions, runs, the message tree and events, written per turn."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from soong_agent.ports.errors import UsageError
from soong_agent.ports.events import RunEvent, RunStatus
from soong_agent.ports.messages import Message


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A session's header: where it runs and which message is the tip of its active path."""

    id: str
    project_dir: str
    created_at: float
    updated_at: float
    title: str = ""
    agent: str | None = None
    active_leaf_id: str | None = None
    parent_session_id: str | None = None


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run of a session."""

    id: str
    session_id: str
    started_at: float
    status: RunStatus = "running"
    finished_at: float | None = None
    reason: str | None = None
    model: str = ""


@dataclass(slots=True)
class TurnCommit:
    """Everything that happened since the last turn boundary, written in one transaction.

    `session` and `run` are upserted (inserted the first time, updated after), `messages` are new
    messages (with ids and parent ids set), `events` are new events in sequence order.
    """

    session: SessionInfo
    run: RunInfo
    messages: list[Message] = field(default_factory=list)
    events: list[RunEvent] = field(default_factory=list)
    at: float = 0.0
    fence: RunFence | None = None
    """A queued run's lease (WORK-2): the store writes the batch only while the run queue
    still holds this fence for the run, checked in the same transaction; else `LeaseLost`
    (`ports.run_queue`) and nothing is written."""


@dataclass(frozen=True, slots=True)
class RunFence:
    """The fence of the lease a worker holds on a queued run (`ports.run_queue`)."""

    run_id: str
    fence: int


class SessionBusy(UsageError):
    """Another process (or another claim in this one) holds the session (STORE-2)."""

    def __init__(self, session_id: str, *, holder: str | None = None) -> None:
        self.session_id = session_id
        self.holder = holder
        by = f" by {holder}" if holder else " by another process"
        super().__init__(
            f"session {session_id!r} is in use{by}; wait for that run to end, or resume the"
            " session once it has"
        )


class SessionClaim:
    """A session held by this process until `release` (`SessionStore.claim_session`).

    Use it as an async context manager, or call `release` (idempotent) when the run ends.
    A process that dies lets its claims go without calling anything.
    """

    def __init__(self, session_id: str, release: Callable[[], Awaitable[None]]) -> None:
        self.session_id = session_id
        self._release: Callable[[], Awaitable[None]] | None = release

    @property
    def released(self) -> bool:
        """Whether `release` has been called."""
        return self._release is None

    async def release(self) -> None:
        """Let the session go (a second call does nothing)."""
        release, self._release = self._release, None
        if release is not None:
            await release()

    async def __aenter__(self) -> SessionClaim:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"SessionClaim({self.session_id!r}, {state})"


@runtime_checkable
class SessionStore(Protocol):
    """Durable sessions; two processes may use the same store at once."""

    commit_survives_cancel: bool
    """True when a commit, once called, goes through (or fails, the failure raised by the
    next commit) even when its caller is cancelled, and the next commit comes after it: the
    runtime then awaits its commits directly, a task and a few event-loop rounds fewer (both
    built-in stores say True). False: the runtime awaits each commit in a task of its own,
    shielded. Every store declares it (a class attribute will do)."""

    async def commit(self, batch: TurnCommit) -> None:
        """Write one turn's messages, events, and session/run state atomically.

        The runtime never lets a run's cancellation abandon a commit half way: how it awaits
        the commit depends on `commit_survives_cancel`."""
        ...

    async def get_session(self, session_id: str) -> SessionInfo | None:
        """The session with this id, or None."""
        ...

    async def list_sessions(self, *, limit: int = 50) -> list[SessionInfo]:
        """The most recently updated sessions first."""
        ...

    async def child_sessions(self, session_id: str) -> list[SessionInfo]:
        """The sessions whose `parent_session_id` is `session_id` (sub-agent, fork and worker
        sessions, AGT-2), oldest first; empty for an unknown session."""
        ...

    async def active_path(self, session_id: str, *, limit: int | None = None) -> list[Message]:
        """Messages from the root to the active leaf (the last `limit` of them when given)."""
        ...

    async def path_to(self, session_id: str, message_id: str) -> list[Message]:
        """Messages from the root to `message_id` (empty when the session has no such message)."""
        ...

    async def all_messages(self, session_id: str) -> list[Message]:
        """Every message of the session (all branches) in the order they were written."""
        ...

    async def list_runs(self, session_id: str) -> list[RunInfo]:
        """The session's runs, oldest first.

        A store shared by processes reports a run still `running` whose process is gone (it
        was killed, or could not save the run's end) as `interrupted`, and may write it so;
        a run some live process still executes stays `running`."""
        ...

    async def run_events(self, run_id: str) -> Sequence[RunEvent]:
        """A run's events in sequence order."""
        ...

    async def get_mark(self, session_id: str, key: str) -> str | None:
        """The session's mark named `key` (e.g. the last message memory extraction read), or
        None when it has none (or there is no such session)."""
        ...

    async def set_mark(
        self, session_id: str, key: str, value: str, *, previous: str | None
    ) -> bool:
        """Set the session's mark `key` to `value` if it is still `previous` (None: not set
        yet), atomically, also against another process using the same store; False, writing
        nothing, when it is not. `UsageError` for an unknown session."""
        ...

    async def claim_session(self, session_id: str) -> SessionClaim:
        """Hold `session_id` for this process until the claim is released (or the process
        ends, however it ends), so that two processes never run one session at once.

        Raises `SessionBusy` (a `UsageError` naming the session and, when the store knows it,
        the holder's host and pid) while another claim holds it: another process, another
        store of this one, or an earlier claim of this store not yet released. The session
        need not exist yet."""
        ...

    async def close(self) -> None:
        """Release connections and claims; pending writes are finished first."""
        ...
