"""What a rewind would put back (RWD-1): for every file changed since a turn began, the state
to restore and where it comes from, and what cannot be restored and why.

A file's state before the turn comes from the earliest record since then: its `FileCheckpoint`
(the bytes a file tool's first change found, or no file), or the work tree's snapshot taken
before the first command of those turns (for every file that differs between that snapshot
and the work tree now). A file differs from what the agent last left there (its last
`FileChanged`, or the last snapshot after a command) when it was changed outside the agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from soong_agent.application.checkpoints.history import Mark, SessionHistory
from soong_agent.ports.events import FileChanged, FileCheckpoint, WorkTreeSnapshot
from soong_agent.ports.snapshots import EXECUTABLE, REGULAR, TreeEntry

UNTRACKED_NOTE = (
    "what commands changed outside the project or in files git ignores",
    "a work-tree snapshot does not hold them",
)


@dataclass(frozen=True, slots=True)
class Source:
    """Where a file's earlier state comes from: an artifact of a session, a blob of the work
    tree's snapshot, or nothing (there was no file)."""

    session_id: str = ""
    artifact_id: str | None = None
    sha256: str | None = None
    blob: str | None = None

    @property
    def absent(self) -> bool:
        return self.artifact_id is None and self.blob is None


@dataclass(frozen=True, slots=True)
class FileTarget:
    """One file to put back, and where its earlier state comes from."""

    path: str
    source: Source


@dataclass(slots=True)
class RewindPlan:
    """The files to put back, and what cannot be (``(what, why)``)."""

    targets: list[FileTarget] = field(default_factory=list)
    not_restorable: list[tuple[str, str]] = field(default_factory=list)
    before_tree: str | None = None
    """The snapshot taken before the first command of the turns rewound."""
    current_tree: str | None = None
    """A snapshot of the work tree now (taken when commands ran in those turns)."""
    commands_ran: bool = False

    def cannot(self, what: str, why: str) -> None:
        if (what, why) not in self.not_restorable:
            self.not_restorable.append((what, why))


def inside_project(path: str) -> bool:
    """Whether a checkpoint's path (as shown) names a file inside the project."""
    return not (path.startswith(("/", "~")) or path == ".." or path.startswith("../"))


def first_checkpoints(marks: list[Mark]) -> dict[str, Mark]:
    """The earliest `FileCheckpoint` of each file among `marks`."""
    out: dict[str, Mark] = {}
    for mark in marks:
        if isinstance(mark.event, FileCheckpoint) and mark.event.path not in out:
            out[mark.event.path] = mark
    return out


def first_tree(marks: list[Mark], plan: RewindPlan) -> Mark | None:
    """The snapshot taken before the first command among `marks`; the commands whose changes
    no snapshot holds are added to `plan` as not restorable."""
    found: Mark | None = None
    failed: list[WorkTreeSnapshot] = []
    for mark in marks:
        event = mark.event
        if not isinstance(event, WorkTreeSnapshot):
            continue
        plan.commands_ran = True
        if event.tree is None:
            failed.append(event)
        elif event.stage == "before" and found is None:
            found = mark
        for name in event.skipped:
            plan.cannot(name, "it was too big for a work-tree snapshot")
    if found is None:
        for event in failed:
            what = f"the changes of {event.tool}" + (f" ({event.summary})" if event.summary else "")
            plan.cannot(what, event.problem or "no work-tree snapshot was taken")
    else:
        plan.cannot(*UNTRACKED_NOTE)
    return found


def file_source(checkpoint: FileCheckpoint, plan: RewindPlan) -> Source | None:
    """The source a file checkpoint gives, None (added to `plan`) when it cannot be used."""
    if checkpoint.problem:
        plan.cannot(checkpoint.path, f"its earlier content was not kept: {checkpoint.problem}")
        return None
    if checkpoint.sha256 is None:
        return Source(session_id=checkpoint.session_id)
    if checkpoint.artifact_id is None:
        plan.cannot(checkpoint.path, "its earlier content was not kept")
        return None
    return Source(
        session_id=checkpoint.session_id,
        artifact_id=checkpoint.artifact_id,
        sha256=checkpoint.sha256,
    )


def tree_source(path: str, entry: TreeEntry | None, plan: RewindPlan) -> Source | None:
    """The source a snapshot's entry gives (None: no file then), None when it cannot be used
    (a symlink, a submodule)."""
    if entry is None:
        return Source()
    if entry.mode not in (REGULAR, EXECUTABLE):
        plan.cannot(path, f"it was a {_kind(entry.mode)} in the snapshot, which a rewind leaves")
        return None
    return Source(blob=entry.blob)


def _kind(mode: str) -> str:
    return {"120000": "symbolic link", "160000": "submodule"}.get(mode, f"mode {mode} entry")


@dataclass(frozen=True, slots=True)
class Known:
    """What the agent last left at a path: the sha256 of its last `FileChanged` (`sha`, with
    its order; the digest None: no file) and the last snapshot taken after it (`tree`, with its
    order), which holds the file as the agent left it when git keeps that file at all."""

    sha: tuple[int, str | None] | None = None
    tree: tuple[int, str] | None = None

    @property
    def tree_is_later(self) -> bool:
        return self.tree is not None and (self.sha is None or self.tree[0] > self.sha[0])


def last_known(history: SessionHistory, path: str) -> Known:
    """What the agent last left at `path`, from every checkpoint of the session."""
    sha: tuple[int, str | None] | None = None
    tree: tuple[int, str] | None = None
    for mark in history.marks:
        event = mark.event
        if isinstance(event, FileChanged) and event.path == path:
            sha = (mark.order, event.sha256)
        elif (
            isinstance(event, WorkTreeSnapshot)
            and event.tree is not None
            and inside_project(path)
            and path not in event.skipped
        ):
            tree = (mark.order, event.tree)
    return Known(sha, tree)
