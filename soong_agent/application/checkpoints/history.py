"""A session's checkpoints read back from its store (RWD-1): the runs, which user message
started each (its turn), and every checkpoint event in the order it happened.

The events of a sub-agent, fork or worker run (a session of its own) count as their parent's:
they are taken in where the parent's run records the child's start. A teammate's runs are not
(they run beside the lead's turns, in worktrees of their own).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from soong_agent.application.checkpoints.turns import is_turn_message, originals, turn_messages
from soong_agent.ports.errors import SessionNotFound
from soong_agent.ports.events import (
    ChildStarted,
    FileChanged,
    FileCheckpoint,
    RunEvent,
    RunStarted,
    WorkTreeSnapshot,
)
from soong_agent.ports.messages import Message
from soong_agent.ports.storage import RunInfo, SessionInfo, SessionStore

Checkpoint = FileCheckpoint | FileChanged | WorkTreeSnapshot
_CHECKPOINTS = (FileCheckpoint, FileChanged, WorkTreeSnapshot)
MAX_CHILD_DEPTH = 8


@dataclass(frozen=True, slots=True)
class Mark:
    """One checkpoint event: `order` its place in the session's history, `run` the index of
    the root run it belongs to (a child's events belong to the run that started the child)."""

    order: int
    run: int
    event: Checkpoint


@dataclass(slots=True)
class SessionHistory:
    """What a session's store says about its turns and checkpoints."""

    session: SessionInfo
    runs: list[RunInfo]
    messages: list[Message]
    copies: dict[str, str]
    """The id of each copied user message (a compaction's) to the message it copies."""
    turns: list[str | None]
    """By run: the user message it started with (None: a rewind's record, or not found)."""
    marks: list[Mark] = field(default_factory=list)

    def original(self, message_id: str) -> str:
        """The message a copy copies (`message_id` itself when it is no copy)."""
        return self.copies.get(message_id, message_id)

    def run_of(self, message_id: str) -> int | None:
        """The index of the run `message_id` (or the message it copies) started."""
        wanted = self.original(message_id)
        for index, turn in enumerate(self.turns):
            if turn == wanted:
                return index
        return None

    def since(self, run: int) -> list[Mark]:
        """The checkpoints of run `run` and every later one, in order."""
        return [mark for mark in self.marks if mark.run >= run]

    def changes_by_turn(self) -> dict[str, int]:
        """How many files each turn's calls changed (kept before the change), by message."""
        counts: dict[str, set[str]] = {}
        for mark in self.marks:
            turn = self.turns[mark.run]
            if turn is not None and isinstance(mark.event, FileCheckpoint):
                counts.setdefault(turn, set()).add(mark.event.path)
        return {turn: len(paths) for turn, paths in counts.items()}

    def path_turns(self, path: list[Message]) -> list[Message]:
        """The messages of `path` that started a turn (or copy one that did), in order."""
        started = {t for t in self.turns if t is not None}
        return [m for m in path if is_turn_message(m) and self.original(m.id) in started]


async def load_history(store: SessionStore, session_id: str) -> SessionHistory:
    """The session's history; SessionNotFound for an unknown session."""
    session = await store.get_session(session_id)
    if session is None:
        raise SessionNotFound(session_id)
    runs = await store.list_runs(session_id)
    messages = await store.all_messages(session_id)
    copies = originals(messages)
    events = [await store.run_events(run.id) for run in runs]
    started = [_started_text(of_run) for of_run in events]
    turns = turn_messages(started, messages, copies)
    history = SessionHistory(session, runs, messages, copies, turns)
    for index, (run, of_run) in enumerate(zip(runs, events, strict=True)):
        own = [e for e in of_run if isinstance(e, _CHECKPOINTS)]
        if own and started[index] is not None:  # the run's own record names its turn
            turns[index] = history.original(own[0].message_id)
        await _take_in(store, history, index, run.id, of_run, depth=0, seen=set())
    return history


def _started_text(events: Sequence[RunEvent]) -> str | None:
    for event in events:
        if isinstance(event, RunStarted):
            return event.message
    return None


async def _take_in(
    store: SessionStore,
    history: SessionHistory,
    index: int,
    run_id: str,
    events: Sequence[RunEvent],
    *,
    depth: int,
    seen: set[str],
) -> None:
    """Add the checkpoint events of `events` (a run's), a child's where it started, to the
    history as run `index`'s."""
    seen.add(run_id)
    for event in events:
        if isinstance(event, _CHECKPOINTS):
            history.marks.append(Mark(len(history.marks), index, event))
        elif (
            isinstance(event, ChildStarted)
            and event.parent_run_id == run_id
            and event.kind != "teammate"
            and event.child_run_id not in seen
            and depth < MAX_CHILD_DEPTH
        ):
            child = await store.run_events(event.child_run_id)
            await _take_in(
                store, history, index, event.child_run_id, child, depth=depth + 1, seen=seen
            )
