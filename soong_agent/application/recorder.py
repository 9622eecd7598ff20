"""Collects a run's new messages and events and writes them at each turn boundary (CTX-1)."""

from __future__ import annotations

import dataclasses
from typing import Any

from soong_agent.application.batch_writer import GroupCommitWriter
from soong_agent.application.run_handle import Run
from soong_agent.ports.events import RunEvent, RunStatus
from soong_agent.ports.messages import Message
from soong_agent.ports.storage import RunInfo, SessionInfo, SessionStore, TurnCommit
from soong_agent.ports.system import Clock, IdGenerator


class RunRecorder:
    """Owns the active path, the event sequence and the pending turn batch of one run."""

    def __init__(
        self,
        *,
        run: Run,
        store: SessionStore,
        clock: Clock,
        ids: IdGenerator,
        session: SessionInfo,
        run_info: RunInfo,
        history: list[Message],
    ) -> None:
        self._run = run
        self._store = store
        self._clock = clock
        self._ids = ids
        self.session = session
        self.run_info = run_info
        self.history = history
        self._seq = 0
        self._messages: list[Message] = []
        self._events: list[RunEvent] = []
        self._writer = GroupCommitWriter(store)

    @property
    def leaf_id(self) -> str | None:
        return self.history[-1].id if self.history else None

    def event(self, cls: type[Any], **fields: Any) -> RunEvent:
        """Build, sequence, publish and queue one event."""
        self._seq += 1
        event: RunEvent = cls(
            seq=self._seq,
            run_id=self.run_info.id,
            session_id=self.session.id,
            at=self._clock.now(),
            **fields,
        )
        self._events.append(event)
        self._run.emit(event)
        return event

    def add_message(self, message: Message) -> Message:
        """Append a message to the active path, giving it an id (when it has none) and its
        parent. The message itself is recorded, not a copy: the caller hands over a message
        it built for this, and must not change it afterwards."""
        if not message.id:
            message.id = self._ids.new_id("msg")
        message.parent_id = self.leaf_id
        self.history.append(message)
        self._messages.append(message)
        return message

    def replace_path(self, messages: list[Message]) -> None:
        """Make `messages` the active path (after a compaction), stored as new messages.

        The old messages stay in the store on their own branch; the new path starts at a new
        root, so resuming the session rebuilds exactly this context.
        """
        self.history = []
        for message in messages:
            self.add_message(message.model_copy(update={"id": ""}))

    def finish(self, status: RunStatus, reason: str | None) -> None:
        self.run_info = dataclasses.replace(
            self.run_info, status=status, reason=reason, finished_at=self._clock.now()
        )

    async def commit(self) -> None:
        """Write everything since the last boundary in one transaction."""
        await self._writer.submit(self._take_batch())
        await self._writer.flush()

    async def commit_pipelined(self) -> None:
        """Start writing the pending batch and return without waiting for it.

        The writes overlap the next model call (group commit, see `batch_writer`); the first
        boundary of a run uses it so that opening the store overlaps the first request.
        """
        await self._writer.submit(self._take_batch())

    def _take_batch(self) -> TurnCommit:
        now = self._clock.now()
        self.session = dataclasses.replace(
            self.session, active_leaf_id=self.leaf_id, updated_at=now
        )
        batch = TurnCommit(
            session=self.session,
            run=self.run_info,
            messages=self._messages,
            events=self._events,
            at=now,
        )
        self._messages, self._events = [], []
        return batch
