"""Collects a run's new messages and events and writes them at each turn boundary (CTX-1).

The recorder is also the run's one boundary for secrets (CFG-6): with a `SecretRedactor`, every
event is scrubbed before it is published (so the SDK's event stream and the CLI's live output
never carry a secret) and queued, every message before it is handed to the session store, the
session title and the run's reason before they are stored, and (through `redacting_artifacts`)
every artifact before its bytes are written. A secret becomes ``[redacted:NAME]``.

What is scrubbed is the stored and shown copy, never the conversation in memory: the model
still receives each tool result exactly as the tool returned it (and as the user approved the
call), so an agent asked to work with a file that holds a key can still do so. A resumed
session is read back from the store, so its history holds ``[redacted:NAME]`` instead: the
model of a later run sees the placeholder, which is intended.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from soong_agent.application.runs.batch_writer import GroupCommitWriter
from soong_agent.application.runs.event_factory import EventFactory
from soong_agent.application.runs.handle import Run
from soong_agent.application.runs.scrubbing import (
    TEXT_FIELDS,
    HeldStream,
    Scrubber,
    texts_of,
)
from soong_agent.ports.errors import RunError
from soong_agent.ports.events import (
    ContextMeasured,
    ModelCallStarted,
    PermissionDecided,
    RunEvent,
    RunStatus,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolCallRequested,
    ToolResultEvent,
    UsageEvent,
)
from soong_agent.ports.messages import Message
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.ports.storage import RunFence, RunInfo, SessionInfo, SessionStore, TurnCommit
from soong_agent.ports.system import Clock, IdGenerator
from soong_agent.ports.telemetry import Telemetry

_STREAMED = (TextDeltaEvent, ThinkingDeltaEvent)
_FIELDS_SET: dict[tuple[Any, ...], set[str]] = {}
"""The `__pydantic_fields_set__` that content blocks (by class and the names given) share, as
events do (`event_factory`). Each message is kept for the run, and a set of its own would be
one more object for the cyclic garbage collector to go through again and again. Only frozen
models share one: pydantic adds to the set only when a field is assigned."""
_EVENTS = EventFactory(
    # the events of every turn (see `event_factory`): the others are validated
    (
        ContextMeasured,
        ModelCallStarted,
        TextDeltaEvent,
        ThinkingDeltaEvent,
        UsageEvent,
        ToolCallRequested,
        PermissionDecided,
        ToolResultEvent,
    )
)
_set_attribute = object.__setattr__


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
        redactor: SecretRedactor | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._run = run
        self._emit: Callable[[RunEvent], None] = run.emit  # with telemetry (OBS-1), its
        if telemetry is not None:  # observer sees each event as well
            self._emit = _to_both(run.emit, telemetry.observer(session.id, run_info.id).emit)
        self._now = clock.now
        self._store = store
        self._clock = clock
        self._ids = ids
        self.session = session
        self.run_info = run_info
        self._session_id, self._run_id = session.id, run_info.id  # (each event names them)
        self.history = history
        self._seq = 0
        self._messages: list[Message] = []
        self._events: list[RunEvent] = []
        self._writer = GroupCommitWriter(store)
        self._redactor = redactor
        self._scrubber = Scrubber(redactor) if redactor is not None else None
        self._held: dict[type[Any], HeldStream] = {}
        self._memo: dict[str, str] = self._scrubber.memo if self._scrubber is not None else {}
        """Texts scrubbed since the last batch (`Scrubber.memo`)."""
        self.fence: RunFence | None = None
        """The lease of the worker running this queued run (WORK-2): every batch carries it,
        and the store refuses the batch once another worker took the run over."""
        self.rewritten = False
        """Whether the active path was replaced (a compaction, a pruned loop): the session's
        earlier messages are then no longer all in `history`."""

    @property
    def leaf_id(self) -> str | None:
        return self.history[-1].id if self.history else None

    def event(self, cls: type[Any], **fields: Any) -> RunEvent | None:
        """Build, sequence, publish and queue one event, its texts scrubbed of secrets.

        A text delta may be held back in part (it could be the start of a secret) and handed
        on with the next piece; None when nothing of it could be published yet. Whatever is
        held is published before any other event, so the order of events is kept.
        """
        redactor = self._redactor
        if redactor is not None:
            if cls in _STREAMED:
                held = self._held.get(cls)
                if held is None:  # a new stream: the other one (if any) has ended
                    if self._held:
                        self._flush_streams()
                    held = self._held[cls] = HeldStream()
                fields["text"] = held.take(redactor, fields["text"])
                if not fields["text"]:
                    return None
            else:
                if self._held:
                    self._flush_streams()
                names = TEXT_FIELDS.get(cls)
                if names is None:
                    names = texts_of(cls)
                memo = self._memo
                for key in names:
                    value = fields.get(key)
                    if value:
                        if type(value) is str:
                            done = memo.get(value)
                            if done is None:
                                done = memo[value] = redactor.redact(value)
                            fields[key] = done
                        else:
                            assert self._scrubber is not None
                            fields[key] = self._scrubber.value(value)
        return self._publish(cls, fields)

    def _publish(self, cls: type[Any], fields: dict[str, Any]) -> RunEvent:
        """Sequence and make the event (`fields` is the caller's own dict: completed in place
        and made as is, see `EventFactory`), queue and publish it."""
        seq = self._seq = self._seq + 1
        fields["seq"] = seq
        fields["run_id"] = self._run_id
        fields["session_id"] = self._session_id
        fields["at"] = self._now()
        event = _EVENTS.build(cls, fields)
        self._events.append(event)
        self._emit(event)
        return event

    def _flush_streams(self) -> None:
        """Publish what the streams hold back: their piece of text has ended."""
        streams, self._held = self._held, {}
        for cls, held in streams.items():
            if held.pending:  # (most pieces were handed on whole)
                assert self._redactor is not None
                text = held.take(self._redactor, "", final=True)
                if text:
                    self._publish(cls, {"text": text})

    def add_message(self, message: Message) -> Message:
        """Append a message to the active path, giving it an id (when it has none) and its
        parent. The message itself is recorded, not a copy: the caller hands over a message
        it built for this, and must not change it afterwards."""
        # set as pydantic's own assignment would (a Message validates no assignment), without
        # its per-attribute dispatch: two of these a turn
        values, assigned = message.__dict__, message.__pydantic_fields_set__
        if not values["id"]:
            values["id"] = self._ids.new_id("msg")
            assigned.add("id")
        history = self.history
        values["parent_id"] = history[-1].id if history else None
        assigned.add("parent_id")
        for block in message.content:  # (frozen: nothing adds to a block's set afterwards)
            given = block.__pydantic_fields_set__
            key = (type(block), frozenset(given))
            shared = _FIELDS_SET.get(key)
            if shared is None:
                _FIELDS_SET[key] = given
            elif shared is not given:
                _set_attribute(block, "__pydantic_fields_set__", shared)
        history.append(message)
        self._messages.append(message)
        return message

    def replace_path(self, messages: list[Message]) -> None:
        """Make `messages` the active path (after a compaction), stored as new messages.

        The old messages stay in the store on their own branch; the new path starts at a new
        root, so resuming the session rebuilds exactly this context.
        """
        self.history = []
        self.rewritten = True
        for message in messages:
            self.add_message(message.model_copy(update={"id": ""}))

    def finish(self, status: RunStatus, reason: str | None) -> None:
        r = self.run_info  # written out, like the session header in `_take_batch`
        self.run_info = RunInfo(
            id=r.id,
            session_id=r.session_id,
            started_at=r.started_at,
            status=status,
            finished_at=self._now(),
            reason=reason,
            model=r.model,
        )

    async def save_end(self, status: RunStatus, reason: str | None) -> None:
        """Write the run's status and reason alone, straight to the store, with the session
        header of the last batch that was written (whose messages are all stored): for a run
        whose last batch could not be written. `RunError` when nothing of the run was."""
        self.finish(status, reason)
        session = self._writer.saved
        if session is None:
            raise RunError("nothing of this run was saved")
        run = self.run_info
        if self._scrubber is not None:
            session, run = self._scrubber.headers(session, run)
        await self._store.commit(
            TurnCommit(session=session, run=run, at=self._now(), fence=self.fence)
        )

    async def commit(self) -> None:
        """Write everything since the last boundary in one transaction."""
        await self._writer.write(self._take_batch())

    def commit_pipelined(self) -> Awaitable[None] | None:
        """Start writing the pending batch without waiting for it: None, or, when the store
        lags `max_lag` batches behind, what to await before going on.

        The writes overlap the next model call (group commit, see `batch_writer`); the first
        boundary of a run uses it so that opening the store overlaps the first request.
        """
        return self._writer.offer(self._take_batch())

    def _take_batch(self) -> TurnCommit:
        now = self._now()
        s = self.session  # written out: dataclasses.replace costs as much again, every turn
        self.session = SessionInfo(
            id=s.id,
            project_dir=s.project_dir,
            created_at=s.created_at,
            updated_at=now,
            title=s.title,
            agent=s.agent,
            active_leaf_id=self.leaf_id,
            parent_session_id=s.parent_session_id,
        )
        session, run, messages = self.session, self.run_info, self._messages
        scrubber = self._scrubber
        if scrubber is not None:
            if self._held:
                self._flush_streams()
            session, run = scrubber.headers(session, run)
            messages = [scrubber.message(m) for m in messages]
            self._memo.clear()
        batch = TurnCommit(
            session=session,
            run=run,
            messages=messages,
            events=self._events,
            at=now,
            fence=self.fence,
        )
        self._messages, self._events = [], []
        return batch


def _to_both(
    first: Callable[[RunEvent], None], second: Callable[[RunEvent], None]
) -> Callable[[RunEvent], None]:
    """Publish to the run's handle, then to an observer (telemetry, OBS-1), which sees each
    event as published: scrubbed of secrets."""

    def emit(event: RunEvent) -> None:
        first(event)
        second(event)

    return emit
