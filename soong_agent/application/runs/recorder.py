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

import dataclasses
import types
import typing
from collections.abc import Awaitable
from typing import Any

from pydantic import BaseModel

from soong_agent.application.runs.batch_writer import GroupCommitWriter
from soong_agent.application.runs.event_factory import EventFactory
from soong_agent.application.runs.handle import Run
from soong_agent.ports.artifacts import ArtifactInfo, ArtifactStore
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
from soong_agent.ports.storage import RunInfo, SessionInfo, SessionStore, TurnCommit
from soong_agent.ports.system import Clock, IdGenerator

_PLAIN = frozenset(
    {
        # event fields that are identifiers, names or enumerations: never scrubbed
        "seq",
        "run_id",
        "session_id",
        "at",
        "type",
        "call_id",
        "name",
        "tool",
        "kind",
        "model",
        "decision",
        "status",
        "strategy",
        "trigger",
        "action",
        "budget",
        "project_dir",
        "child_session_id",
        "child_run_id",
        # content block fields: ids, and provider data that must go back unchanged
        "id",
        "signature",
        "redacted",
    }
)
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
_TEXT_FIELDS: dict[type[Any], tuple[str, ...]] = {}


def _texts_of(cls: type[Any]) -> tuple[str, ...]:
    """The fields of an event or content block class that may carry text: every field but
    identifiers, names, numbers and enumerations (strings, lists and dicts)."""
    found = _TEXT_FIELDS.get(cls)
    if found is None:
        fields = getattr(cls, "model_fields", {})
        found = _TEXT_FIELDS[cls] = tuple(
            name
            for name, info in fields.items()
            if name not in _PLAIN and not _plain_annotation(info.annotation)
        )
    return found


def _plain_annotation(annotation: Any) -> bool:
    """Whether a field of this type can hold no text (numbers, booleans, usage, literals)."""
    if annotation in (int, float, bool, type(None)):
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return True
    args = typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        return all(_plain_annotation(a) for a in args)
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


LINE_CONTEXT = 256
"""How much of the line being streamed the redactor sees as context for each piece."""


class _Held:
    """The text of one stream (answer or reasoning) not yet handed on: pieces are cut where no
    secret can span the cut (`SecretRedactor.settled`), so a key the model writes across several
    deltas is still recognised whole."""

    __slots__ = ("line", "pending")

    def __init__(self) -> None:
        self.pending = ""
        self.line = ""  # raw text of the current line already handed on (context)

    def take(self, redactor: SecretRedactor, text: str, *, final: bool = False) -> str:
        buf = self.pending + text if self.pending else text
        cut = len(buf) if final else redactor.settled(buf, before=self.line)
        if cut <= 0:
            self.pending = buf
            return ""
        ready, self.pending = buf[:cut], buf[cut:]
        out = redactor.redact(ready, before=self.line)
        newline = ready.rfind("\n")
        line = ready[newline + 1 :] if newline >= 0 else self.line + ready
        self.line = line[-LINE_CONTEXT:]
        return out


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
    ) -> None:
        self._run = run
        self._emit = run.emit
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
        self._held: dict[type[Any], _Held] = {}
        self._memo: dict[str, str] = {}
        """Texts scrubbed since the last batch: most are both an event field and a message
        block (a tool result, the call's arguments, the answer), and are scrubbed once."""
        self._title: tuple[str, str] = ("", "")  # (raw, scrubbed)
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
                    held = self._held[cls] = _Held()
                fields["text"] = held.take(redactor, fields["text"])
                if not fields["text"]:
                    return None
            else:
                if self._held:
                    self._flush_streams()
                names = _TEXT_FIELDS.get(cls)
                if names is None:
                    names = _texts_of(cls)
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
                            fields[key] = self._scrub(value)
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
        if self._redactor is not None:
            session, run = self._scrubbed_headers(session, run)
        await self._store.commit(TurnCommit(session=session, run=run, at=self._now()))

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
        if self._redactor is not None:
            if self._held:
                self._flush_streams()
            session, run = self._scrubbed_headers(session, run)
            messages = [self._scrub_message(m) for m in messages]
            self._memo.clear()
        batch = TurnCommit(session=session, run=run, messages=messages, events=self._events, at=now)
        self._messages, self._events = [], []
        return batch

    # --- scrubbing (CFG-6) -------------------------------------------------------------------

    def _scrub(self, value: Any) -> Any:
        """`value` (a text, or lists and dicts of them) with its secrets replaced; a text that
        holds none is returned as the same object."""
        redactor = self._redactor
        assert redactor is not None
        if isinstance(value, str):
            done = self._memo.get(value)
            if done is None:
                done = self._memo[value] = redactor.redact(value)
            return done
        if isinstance(value, list):
            return [self._scrub(v) for v in value]
        if isinstance(value, dict):
            return {k: v if k in _PLAIN else self._scrub(v) for k, v in value.items()}
        return value

    def _scrub_message(self, message: Message) -> Message:
        """The message as it may be stored: the same object when it holds no secret."""
        blocks: list[Any] | None = None
        for index, block in enumerate(message.content):
            clean = self._scrub_block(block)
            if clean is not block and blocks is None:
                blocks = list(message.content[:index])
            if blocks is not None:
                blocks.append(clean)
        if blocks is None:
            return message
        return message.model_copy(update={"content": blocks})

    def _scrub_block(self, block: BaseModel) -> BaseModel:
        update: dict[str, Any] | None = None
        names = _TEXT_FIELDS.get(type(block))
        values = block.__dict__
        memo = self._memo
        for key in names if names is not None else _texts_of(type(block)):
            value = values[key]
            if value:
                if type(value) is str:  # most were scrubbed already, as an event's field
                    clean = memo.get(value)
                    if clean is None:
                        clean = self._scrub(value)
                    elif clean is not value and clean == value:
                        continue  # the event's equal text (another object): nothing to replace
                else:
                    clean = self._scrub(value)
                if clean is not value:
                    if update is None:
                        update = {}
                    update[key] = clean
        return block.model_copy(update=update) if update else block

    def _scrubbed_headers(self, session: SessionInfo, run: RunInfo) -> tuple[SessionInfo, RunInfo]:
        if session.title:
            raw, clean = self._title
            if raw != session.title:
                raw, clean = session.title, self._scrub(session.title)
                self._title = (raw, clean)
            if clean is not raw:
                session = dataclasses.replace(session, title=clean)
        if run.reason:
            reason = self._scrub(run.reason)
            if reason is not run.reason:
                run = dataclasses.replace(run, reason=reason)
        return session, run


class RedactingArtifacts:
    """An `ArtifactStore` that scrubs each artifact of secrets before its bytes are written
    (CFG-6); reading is passed through. The model's preview of a stored result is made by the
    tool pipeline from the result itself, like every tool result it receives."""

    def __init__(self, inner: ArtifactStore, redactor: SecretRedactor) -> None:
        self._inner = inner
        self._redactor = redactor

    async def save(
        self, *, session_id: str, run_id: str, filename: str, data: bytes, preview_chars: int
    ) -> ArtifactInfo:
        text = data.decode("utf-8", "surrogateescape")
        clean = self._redactor.redact(text)
        if clean is not text:
            data = clean.encode("utf-8", "surrogateescape")
        return await self._inner.save(
            session_id=session_id,
            run_id=run_id,
            filename=filename,
            data=data,
            preview_chars=preview_chars,
        )

    async def get(self, session_id: str, artifact_id: str) -> ArtifactInfo | None:
        return await self._inner.get(session_id, artifact_id)

    async def read(self, session_id: str, artifact_id: str, *, offset: int, length: int) -> bytes:
        return await self._inner.read(session_id, artifact_id, offset=offset, length=length)


def redacting_artifacts(
    artifacts: ArtifactStore | None, redactor: SecretRedactor | None
) -> ArtifactStore | None:
    """`artifacts` behind the redactor (as is when either is None)."""
    if artifacts is None or redactor is None:
        return artifacts
    return RedactingArtifacts(artifacts, redactor)
