"""An in-memory `SessionStore`: the SQLite store's behaviour in plain Python, for tests.

It follows the same contract as `SqliteSessionStore` (the shared contract suite runs on both):

- `commit` upserts the session (title, agent, active leaf and `updated_at` change; project folder,
  creation time and parent session are kept from the first write) and the run (status, model,
  reason and finish time change), then appends messages and events. The session's `updated_at`
  becomes the later of `batch.session.updated_at` and `batch.at`. A batch that cannot be written
  (a message without id, a duplicate message id or event sequence number, a run of an unknown
  session) raises `UsageError` and changes nothing.
- A message's parent link is resolved when it is written: `parent_id` must name an earlier message
  of the same session (possibly earlier in the same batch), otherwise the message starts the path.
- Unknown session or run ids give empty results (and `None` from `get_session`).
- Marks (`get_mark`/`set_mark`) are compared and set at once; an unknown session's is refused.
- `claim_session` holds a session until the claim is released; a second claim of a held
  session raises `SessionBusy` (closing the store lets every claim go).
- A batch fenced with a queued run's lease (`TurnCommit.fence`) is written only while the
  `run_queue` given to the store (an `InMemoryRunQueue`) holds that fence; else `LeaseLost`
  and nothing changes. Without a queue no fence holds (as a database without the run's queue
  row): every fenced batch is refused.
- After `close()` every method raises `UsageError`.

`commits` keeps every batch given to `commit`, in order, for assertions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from soong_agent.adapters.inmemory.run_queue import InMemoryRunQueue
from soong_agent.ports.errors import UsageError
from soong_agent.ports.events import RunEvent
from soong_agent.ports.messages import Message
from soong_agent.ports.run_queue import LeaseLost
from soong_agent.ports.storage import (
    RunInfo,
    SessionBusy,
    SessionClaim,
    SessionInfo,
    TurnCommit,
)


@dataclass(slots=True)
class _StoredMessage:
    message: Message
    parent_index: int | None  # index into the session's message list, resolved at write time


@dataclass(slots=True)
class _SessionData:
    info: SessionInfo
    order: int
    messages: list[_StoredMessage] = field(default_factory=list)
    index_by_id: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _RunData:
    info: RunInfo
    order: int
    events: dict[int, RunEvent] = field(default_factory=dict)


def _copy(message: Message) -> Message:
    # Blocks are frozen; copying the list makes the copy independent of the caller's message.
    return message.model_copy(update={"content": list(message.content)})


class InMemorySessionStore:
    """A `SessionStore` kept in dictionaries; nothing survives the process."""

    commit_survives_cancel = True
    """Its commit never waits: once called, it is done before a cancellation can arrive."""

    def __init__(self, *, run_queue: InMemoryRunQueue | None = None) -> None:
        self._run_queue = run_queue
        self._sessions: dict[str, _SessionData] = {}
        self._runs: dict[str, _RunData] = {}
        self._closed = False
        self._marks: dict[tuple[str, str], str] = {}
        self._claimed: set[str] = set()
        self.commits: list[TurnCommit] = []

    def _check_open(self) -> None:
        if self._closed:
            raise UsageError("the in-memory session store is closed")

    async def commit(self, batch: TurnCommit) -> None:
        """Write one turn's messages, events, and session/run state atomically."""
        self._check_open()
        fence = batch.fence
        if fence is not None and (self._run_queue is None or not self._run_queue.holds(fence)):
            raise LeaseLost(fence.run_id, fence.fence)
        s, r = batch.session, batch.run
        existing = self._sessions.get(s.id)
        if r.session_id != s.id and r.session_id not in self._sessions:
            raise UsageError(f"cannot commit the turn: run {r.id!r} names unknown session")
        new_ids: set[str] = set()
        for m in batch.messages:
            if not m.id:
                raise UsageError("every committed message needs an id")
            if m.id in new_ids or (existing is not None and m.id in existing.index_by_id):
                raise UsageError(f"cannot commit the turn: duplicate message id {m.id!r}")
            new_ids.add(m.id)
        new_seqs: set[tuple[str, int]] = set()
        for e in batch.events:
            run = self._runs.get(e.run_id)
            if e.run_id != r.id and run is None:
                raise UsageError(f"cannot commit the turn: event of unknown run {e.run_id!r}")
            key = (e.run_id, e.seq)
            if key in new_seqs or (run is not None and e.seq in run.events):
                raise UsageError(f"cannot commit the turn: duplicate event {key!r}")
            new_seqs.add(key)

        # Everything is valid: apply.
        updated_at = max(s.updated_at, batch.at)
        if existing is None:
            existing = _SessionData(replace(s, updated_at=updated_at), order=len(self._sessions))
            self._sessions[s.id] = existing
        else:
            existing.info = replace(
                existing.info,
                title=s.title,
                agent=s.agent,
                active_leaf_id=s.active_leaf_id,
                updated_at=updated_at,
            )
        run_data = self._runs.get(r.id)
        if run_data is None:
            self._runs[r.id] = _RunData(r, order=len(self._runs))
        else:
            run_data.info = replace(
                run_data.info,
                status=r.status,
                model=r.model,
                reason=r.reason,
                finished_at=r.finished_at,
            )
        for m in batch.messages:
            parent = existing.index_by_id.get(m.parent_id) if m.parent_id is not None else None
            existing.index_by_id[m.id] = len(existing.messages)
            existing.messages.append(_StoredMessage(_copy(m), parent))
        for e in batch.events:
            self._runs[e.run_id].events[e.seq] = e
        self.commits.append(batch)

    async def get_session(self, session_id: str) -> SessionInfo | None:
        """The session with this id, or None."""
        self._check_open()
        data = self._sessions.get(session_id)
        return data.info if data is not None else None

    async def list_sessions(self, *, limit: int = 50) -> list[SessionInfo]:
        """The most recently updated sessions first (the later created first on a tie)."""
        self._check_open()
        if limit <= 0:
            return []
        ordered = sorted(
            self._sessions.values(), key=lambda d: (d.info.updated_at, d.order), reverse=True
        )
        return [d.info for d in ordered[:limit]]

    async def child_sessions(self, session_id: str) -> list[SessionInfo]:
        """The sessions whose parent is `session_id`, oldest first."""
        self._check_open()
        found = [d for d in self._sessions.values() if d.info.parent_session_id == session_id]
        return [d.info for d in sorted(found, key=lambda d: (d.info.created_at, d.order))]

    async def active_path(self, session_id: str, *, limit: int | None = None) -> list[Message]:
        """Messages from the root to the active leaf (the last `limit` of them when given)."""
        self._check_open()
        data = self._sessions.get(session_id)
        if data is None or data.info.active_leaf_id is None or (limit is not None and limit <= 0):
            return []
        return self._walk(data, data.info.active_leaf_id, limit)

    async def path_to(self, session_id: str, message_id: str) -> list[Message]:
        """Messages from the root to `message_id` (empty when the session has no such message)."""
        self._check_open()
        data = self._sessions.get(session_id)
        return [] if data is None else self._walk(data, message_id, None)

    @staticmethod
    def _walk(data: _SessionData, leaf_id: str, limit: int | None) -> list[Message]:
        index = data.index_by_id.get(leaf_id)
        path: list[Message] = []
        while index is not None and (limit is None or len(path) < limit):
            stored = data.messages[index]
            path.append(_copy(stored.message))
            index = stored.parent_index
        path.reverse()
        return path

    async def all_messages(self, session_id: str) -> list[Message]:
        """Every message of the session (all branches) in the order they were written."""
        self._check_open()
        data = self._sessions.get(session_id)
        return [] if data is None else [_copy(s.message) for s in data.messages]

    async def list_runs(self, session_id: str) -> list[RunInfo]:
        """The session's runs, oldest first."""
        self._check_open()
        runs = [d for d in self._runs.values() if d.info.session_id == session_id]
        runs.sort(key=lambda d: (d.info.started_at, d.order))
        return [d.info for d in runs]

    async def run_events(self, run_id: str) -> Sequence[RunEvent]:
        """A run's events in sequence order."""
        self._check_open()
        data = self._runs.get(run_id)
        return [] if data is None else [data.events[k] for k in sorted(data.events)]

    async def get_mark(self, session_id: str, key: str) -> str | None:
        """The session's mark named `key`, or None."""
        self._check_open()
        return self._marks.get((session_id, key))

    async def set_mark(
        self, session_id: str, key: str, value: str, *, previous: str | None
    ) -> bool:
        """Set the mark to `value` if it is still `previous` (None: not set yet); whether it
        was written. `UsageError` for an unknown session."""
        self._check_open()
        if session_id not in self._sessions:
            raise UsageError(f"cannot set the mark {key!r}: unknown session {session_id!r}")
        if self._marks.get((session_id, key)) != previous:
            return False
        self._marks[(session_id, key)] = value
        return True

    async def claim_session(self, session_id: str) -> SessionClaim:
        """Hold the session until the claim is released; `SessionBusy` while it is held."""
        self._check_open()
        if session_id in self._claimed:
            raise SessionBusy(session_id, holder="an earlier claim of this store")
        self._claimed.add(session_id)

        async def release() -> None:
            self._claimed.discard(session_id)

        return SessionClaim(session_id, release)

    async def close(self) -> None:
        """Mark the store closed (its claims let go); later calls raise `UsageError`."""
        self._closed = True
        self._claimed.clear()
