"""Rewinding a session (RWD-1): every file changed since a user message put back as it was
before that turn, and the conversation continued from before that message.

`RewindService.rewind` reads the session's checkpoints (`history`), works out what each file
held before the turn (`plan`), refuses when a file was changed outside the agent since (unless
forced), writes through the sandboxed file system (write roots, sensitive paths and symlink
rules apply; nothing outside the project is written), and records the rewind as a run of the
session: its `FileChanged` events (what the agent now left in each file) and a `SessionRewound`
event, with the session's active path moved to before the message. The messages after it stay
stored, as another branch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from soong_agent.application.checkpoints.history import SessionHistory, load_history
from soong_agent.application.checkpoints.keeper import snapshot_exclusions
from soong_agent.application.checkpoints.plan import (
    FileTarget,
    RewindPlan,
    Source,
    file_source,
    first_checkpoints,
    first_tree,
    inside_project,
    tree_source,
)
from soong_agent.application.checkpoints.restore import Restorer
from soong_agent.application.checkpoints.turns import is_turn_message
from soong_agent.application.permissions.plan_mode import stored_plan_mode
from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.errors import SoongAgentError, UsageError
from soong_agent.ports.events import (
    FileChanged,
    FileCheckpoint,
    PlanModeChanged,
    RunEvent,
    SessionRewound,
    WorkTreeSnapshot,
)
from soong_agent.ports.filesystem import FileSystem
from soong_agent.ports.messages import Message
from soong_agent.ports.secrets import SecretRedactor, redaction_mark
from soong_agent.ports.snapshots import WorkTreeSnapshots
from soong_agent.ports.storage import RunInfo, SessionStore, TurnCommit
from soong_agent.ports.system import Clock, IdGenerator

__all__ = ["RewindReport", "RewindService", "TurnSummary"]

SECRET_MARK = redaction_mark("")[:-1]
"""What a stored text holds where a secret was scrubbed out of it (``[redacted:``)."""
REWIND_MODEL = "rewind"
"""The model label of the run a rewind is recorded as."""


@dataclass(frozen=True, slots=True)
class RewindReport:
    """What a rewind did, or, refused, would have done.

    Attributes:
        session_id: the session rewound.
        to_message_id: the user message it was rewound to (the state before it).
        files: whether files were put back; conversation: whether the conversation was.
        applied: False when it was refused (`changed_outside` names why); nothing was changed.
        restored: files given back their earlier bytes; removed: files created since, removed.
        not_restored: what cannot be restored, each ``(what, why)``.
        changed_outside: files changed outside the agent since it last left them: the refusal,
            or (forced) the files overwritten anyway.
        continues_after: with the conversation rewound, the message the next one follows (None:
            the next message starts the conversation anew).
        message: the text of the message rewound to (to send it again, or changed).
    """

    session_id: str
    to_message_id: str
    files: bool
    conversation: bool
    applied: bool
    restored: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    not_restored: tuple[tuple[str, str], ...] = ()
    changed_outside: tuple[str, ...] = ()
    continues_after: str | None = None
    message: str = ""

    @property
    def refused(self) -> bool:
        """Whether nothing was done because files were changed outside the agent."""
        return not self.applied and bool(self.changed_outside)


@dataclass(frozen=True, slots=True)
class TurnSummary:
    """A turn of a session's active path: its user message, what its calls changed."""

    message_id: str
    text: str
    files: int
    commands: int


class RewindService:
    """Rewinds sessions of one project (the file system's)."""

    def __init__(
        self,
        *,
        store: SessionStore,
        fs: FileSystem,
        artifacts: ArtifactStore | None,
        snapshots: WorkTreeSnapshots | None,
        clock: Clock,
        ids: IdGenerator,
        redactor: SecretRedactor | None = None,
    ) -> None:
        self._redactor = redactor
        self._store = store
        self._fs = fs
        self._artifacts = artifacts
        self._snapshots = snapshots
        self._clock = clock
        self._ids = ids

    async def turns(self, session_id: str) -> list[TurnSummary]:
        """The turns of the session's active path, oldest first (SessionNotFound)."""
        history = await load_history(self._store, session_id)
        path = await self._store.active_path(session_id)
        files = history.changes_by_turn()
        commands: dict[str, int] = {}
        for mark in history.marks:
            turn = history.turns[mark.run]
            event = mark.event
            if turn is not None and isinstance(event, WorkTreeSnapshot) and event.stage == "after":
                commands[turn] = commands.get(turn, 0) + 1
        out: list[TurnSummary] = []
        for message in history.path_turns(path):
            turn = history.original(message.id)
            out.append(
                TurnSummary(message.id, message.text, files.get(turn, 0), commands.get(turn, 0))
            )
        return out

    async def rewind(
        self,
        session_id: str,
        *,
        to: str,
        files: bool = True,
        conversation: bool = True,
        force: bool = False,
    ) -> RewindReport:
        """Rewind the session to before the user message `to` (see the module docstring).

        UsageError for a session of another project or with a run in progress, a message that
        is not one the user wrote in this session, or neither files nor conversation asked
        for; SessionNotFound for an unknown session."""
        if not (files or conversation):
            raise UsageError("a rewind puts back the files, the conversation or both")
        history = await load_history(self._store, session_id)
        self._check(history)
        target = _target(history, to)
        run = history.run_of(target.id)
        if run is None:
            raise UsageError(
                f"message {to} did not start a turn of session {session_id} that its record "
                "names; rewind to another of its messages"
            )
        plan = await self._plan(history, run) if files else RewindPlan()
        restorer = Restorer(self._fs, self._artifacts, self._snapshots)
        outcome = await restorer.prepare(history, plan)
        report = RewindReport(
            session_id=session_id,
            to_message_id=target.id,
            files=files,
            conversation=conversation,
            applied=False,
            not_restored=tuple(plan.not_restorable),
            changed_outside=tuple(outcome.changed_outside),
            continues_after=target.parent_id if conversation else None,
            message=target.text,
        )
        if outcome.changed_outside and not force:
            return report
        await restorer.apply(outcome, plan)
        report = dataclasses.replace(
            report,
            applied=True,
            restored=tuple(outcome.restored),
            removed=tuple(outcome.removed),
            not_restored=tuple(plan.not_restorable),
        )
        await self._record(history, report, outcome.written)
        return report

    def _check(self, history: SessionHistory) -> None:
        session = history.session
        fs = self._fs
        if session.project_dir != fs.root and (
            fs.path_facts(session.project_dir).resolved != fs.path_facts(fs.root).resolved
        ):
            raise UsageError(
                f"session {session.id} belongs to the project {session.project_dir}, not "
                f"{fs.root}: rewind it there (the CLI: from that folder or with --path)"
            )
        if any(run.status == "running" for run in history.runs):
            raise UsageError(
                f"session {session.id} has a run in progress: rewind it once the run has ended"
            )

    async def _plan(self, history: SessionHistory, run: int) -> RewindPlan:
        """What to put back for the turns from run `run` on."""
        plan = RewindPlan()
        marks = history.since(run)
        checkpoints = first_checkpoints(marks)
        changed = {m.event.path for m in marks if isinstance(m.event, FileChanged)}
        tree = first_tree(marks, plan)
        sources: dict[str, Source] = {}
        left: set[str] = set()  # files a snapshot covers but cannot restore
        tracked: set[str] = set()
        if tree is not None and isinstance(tree.event, WorkTreeSnapshot) and tree.event.tree:
            plan.before_tree = tree.event.tree
            now = await self.current_tree(plan)
            if now is not None:
                assert self._snapshots is not None
                root = self._fs.root
                for change in await self._snapshots.changes(root, plan.before_tree, now):
                    first = checkpoints.get(change.path)
                    if first is not None and first.order < tree.order:
                        continue  # the file tool's checkpoint is the earlier state
                    source = tree_source(change.path, change.before, plan)
                    if source is None:
                        left.add(change.path)
                    else:
                        sources[change.path] = source
                later = [p for p, m in checkpoints.items() if m.order > tree.order]
                tracked = set(await self._snapshots.entries(root, plan.before_tree, later))
                tracked |= set(await self._snapshots.entries(root, now, later))
        for path, mark in checkpoints.items():
            if path in sources or path in left or path in tracked:
                continue  # (tracked: as it was before the turns; the snapshot says so)
            if SECRET_MARK in path:
                plan.cannot(path, "its name held a secret, which is never stored")
                continue
            assert isinstance(mark.event, FileCheckpoint)
            if not inside_project(path):
                plan.cannot(path, "it is outside the project, where a rewind never writes")
                continue
            if mark.event.problem and path not in changed:
                continue  # not kept, and not changed either (the sandbox kept the call off it)
            source = file_source(mark.event, plan)
            if source is not None:
                sources[path] = source
        plan.targets = [FileTarget(path, sources[path]) for path in sorted(sources)]
        return plan

    async def current_tree(self, plan: RewindPlan) -> str | None:
        """A snapshot of the work tree now (None, added to `plan`, when none can be taken)."""
        why = "no work-tree snapshots in this runtime"
        if self._snapshots is not None:
            try:
                taken = await self._snapshots.take(
                    self._fs.root, exclude=snapshot_exclusions(self._fs)
                )
            except (OSError, SoongAgentError) as exc:
                taken, why = None, f"the work tree could not be snapshotted now: {exc}"
            else:
                why = "the project is no longer in a git work tree"
            if taken is not None:
                plan.current_tree = taken.tree
                return taken.tree
        plan.cannot("what commands changed since", why)
        return None

    async def _record(
        self, history: SessionHistory, report: RewindReport, written: list[tuple[str, str | None]]
    ) -> None:
        """Store the rewind as a run of the session (see the module docstring)."""
        now = self._clock.now()
        session = history.session
        run_id = self._ids.new_id("run")
        base = {"run_id": run_id, "session_id": session.id, "at": now}
        events: list[RunEvent] = []
        for path, sha in written:
            events.append(
                FileChanged(
                    seq=len(events) + 1,
                    **base,
                    message_id=report.to_message_id,
                    path=path,
                    sha256=sha,
                )
            )
        events.append(
            SessionRewound(
                seq=len(events) + 1,
                **base,
                to_message_id=report.to_message_id,
                files=report.files,
                conversation=report.conversation,
                restored=list(report.restored),
                removed=list(report.removed),
                not_restored=[self._clean(f"{what}: {why}") for what, why in report.not_restored],
                overwritten=list(report.changed_outside),
            )
        )
        if await stored_plan_mode(self._store, session.id):  # a rewind leaves the mode as it is
            events.append(
                PlanModeChanged(
                    seq=len(events) + 1,
                    **base,
                    active=True,
                    source="resume",
                    reason="kept across a rewind",
                )
            )
        leaf = report.continues_after if report.conversation else session.active_leaf_id
        await self._store.commit(
            TurnCommit(
                session=dataclasses.replace(session, active_leaf_id=leaf, updated_at=now),
                run=RunInfo(
                    id=run_id,
                    session_id=session.id,
                    started_at=now,
                    status="completed",
                    finished_at=now,
                    reason=self._clean(_summary(report)),
                    model=REWIND_MODEL,
                ),
                events=events,
                at=now,
            )
        )

    def _clean(self, text: str) -> str:
        """`text` as it may be stored: no secret in it (a reason quoting a path, an error)."""
        return self._redactor.redact(text) if self._redactor is not None else text


def _target(history: SessionHistory, message_id: str) -> Message:
    """The user message a rewind goes back to; UsageError for another kind or an unknown id."""
    for message in history.messages:
        if message.id == message_id:
            if not is_turn_message(message):
                what = message.role if message.kind == "normal" else message.kind
                raise UsageError(
                    f"message {message_id} is a {what} message, not one the user wrote; a "
                    "rewind goes back to before a user message"
                )
            return message
    raise UsageError(f"session {history.session.id} has no message {message_id!r}")


def _summary(report: RewindReport) -> str:
    parts = [f"rewound to before {report.to_message_id}"]
    if report.files:
        parts.append(f"{len(report.restored)} file(s) restored, {len(report.removed)} removed")
    if report.not_restored:
        parts.append(f"{len(report.not_restored)} not restorable")
    if report.conversation:
        parts.append("the conversation continues from there")
    return "; ".join(parts)
