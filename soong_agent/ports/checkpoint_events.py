"""The run events of checkpoints and rewinds (RWD-1): what a user turn's tool calls changed,
kept before they changed it, and what a rewind put back. They are imported from
`soong_agent.ports.events` with the rest; a session's checkpoints are these events of its runs,
so every session store keeps them as it keeps any event."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from soong_agent.ports.defaults import no_items
from soong_agent.ports.event_base import EventBase


class FileCheckpoint(EventBase):
    """What a file held before the first change a user turn made to it (once per file and
    turn): a file tool's target, or a Python tool's declared path."""

    type: Literal["file_checkpoint"] = "file_checkpoint"
    message_id: str
    """The user message whose turn changed the file."""
    path: str
    """The file as the user sees it: relative to the project when inside it."""
    sha256: str | None
    """The sha256 of what it held; None when there was no file (or it could not be read:
    then `problem` says so)."""
    artifact_id: str | None = None
    """The artifact of the event's session that holds those bytes; None when there was no file
    or they could not be kept."""
    problem: str = ""
    """Why what the file held could not be kept (too big, unreadable, holds a secret the store
    scrubs); a rewind lists such a file as one it cannot restore."""


class FileChanged(EventBase):
    """What a file held after a call that may change it, or after a rewind put it back: what the
    agent last left there. A rewind refuses to overwrite a file that differs from it (changed
    outside the agent) unless forced."""

    type: Literal["file_changed"] = "file_changed"
    message_id: str
    """The user turn (for a rewind: the message it rewound to)."""
    path: str
    sha256: str | None
    """None: there is no file."""
    call_id: str = ""


class WorkTreeSnapshot(EventBase):
    """The git work tree as a tree object, around a call that may change any file (a command,
    a tool without a path target): ``before`` the first such call of a user turn, ``after``
    each of them. Made from a temporary index: the user's index, branches and stash are left
    alone; the objects stay in the repository's object store, referenced by nothing."""

    type: Literal["worktree_snapshot"] = "worktree_snapshot"
    message_id: str
    call_id: str
    tool: str
    stage: Literal["before", "after"]
    tree: str | None
    """The tree's object id; None when there is no snapshot (`problem` says why: not a git
    work tree, git failed)."""
    summary: str = ""
    """What the call does (a command line), named when its changes cannot be restored."""
    skipped: list[str] = Field(default_factory=no_items)
    """Untracked files left out of the snapshot (too big)."""
    problem: str = ""


class SessionRewound(EventBase):
    """A rewind of the session to before the user message `to_message_id` (RWD-1): the files it
    put back (`restored`; `removed`: created since, so removed), what it could not (each
    ``path: why``), the files changed outside the agent it overwrote because it was forced
    (`overwritten`), and whether the conversation now continues from before that message."""

    type: Literal["session_rewound"] = "session_rewound"
    to_message_id: str
    files: bool
    conversation: bool
    restored: list[str] = Field(default_factory=no_items)
    removed: list[str] = Field(default_factory=no_items)
    not_restored: list[str] = Field(default_factory=no_items)
    overwritten: list[str] = Field(default_factory=no_items)


__all__ = ["FileChanged", "FileCheckpoint", "SessionRewound", "WorkTreeSnapshot"]
