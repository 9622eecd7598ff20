"""Putting a rewind's files back (RWD-1): each file's earlier bytes read from where they were
kept, a file changed outside the agent since told apart, and the writes made through the
sandboxed file system, every one checked before any is made."""

from __future__ import annotations

from dataclasses import dataclass, field

from soong_agent.application.checkpoints.history import SessionHistory
from soong_agent.application.checkpoints.keeper import current_sha, sha256_of
from soong_agent.application.checkpoints.plan import FileTarget, RewindPlan, last_known
from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.errors import SoongAgentError
from soong_agent.ports.filesystem import FileSystem
from soong_agent.ports.snapshots import WorkTreeSnapshots


@dataclass(frozen=True, slots=True)
class Restore:
    """One file to write: its earlier bytes (None: no file then) and their sha256."""

    path: str
    data: bytes | None
    sha256: str | None


@dataclass(slots=True)
class Outcome:
    """The writes a rewind makes, the files changed outside the agent among them, and (once
    applied) what was restored, removed, and written (path, sha256 now)."""

    writes: list[Restore] = field(default_factory=list)
    changed_outside: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    written: list[tuple[str, str | None]] = field(default_factory=list)


class Restorer:
    """Reads a plan's earlier states and writes them back."""

    def __init__(
        self,
        fs: FileSystem,
        artifacts: ArtifactStore | None,
        snapshots: WorkTreeSnapshots | None,
    ) -> None:
        self._fs = fs
        self._artifacts = artifacts
        self._snapshots = snapshots
        self._diffs: dict[str, set[str]] = {}

    async def prepare(self, history: SessionHistory, plan: RewindPlan) -> Outcome:
        """What to write for `plan`'s targets (those already as they were left out); what
        cannot be read is added to `plan`."""
        outcome = Outcome()
        for target in plan.targets:
            try:
                now = await current_sha(self._fs, target.path)
            except (OSError, SoongAgentError) as exc:
                plan.cannot(target.path, f"it cannot be read now: {exc}")
                continue
            found, wanted = await self._earlier(target, plan)
            if not found:
                continue
            sha = None if wanted is None else sha256_of(wanted)
            if sha == now:
                continue  # it already holds what it held then
            if await self._changed_outside(history, plan, target.path, now):
                outcome.changed_outside.append(target.path)
            outcome.writes.append(Restore(target.path, wanted, sha))
        return outcome

    async def apply(self, outcome: Outcome, plan: RewindPlan) -> None:
        """Make the writes; one the sandbox refuses is added to `plan` (checked for all before
        any is made)."""
        ready: list[Restore] = []
        for item in outcome.writes:
            try:
                self._fs.check_write(item.path)
            except SoongAgentError as exc:
                plan.cannot(item.path, str(exc))
                continue
            ready.append(item)
        for item in ready:
            try:
                if item.data is None:
                    await self._fs.remove_file(item.path)
                else:
                    await self._fs.write_bytes(item.path, item.data)
            except FileNotFoundError:
                pass  # already gone: as it was
            except (OSError, SoongAgentError) as exc:
                plan.cannot(item.path, f"it could not be written: {exc}")
                continue
            (outcome.removed if item.data is None else outcome.restored).append(item.path)
            outcome.written.append((item.path, item.sha256))

    async def _earlier(self, target: FileTarget, plan: RewindPlan) -> tuple[bool, bytes | None]:
        """(True, the file's earlier bytes, None when there was no file), or (False, None)
        when they cannot be read (added to `plan`)."""
        source = target.source
        if source.absent:
            return True, None
        try:
            if source.blob is not None:
                assert self._snapshots is not None  # (a blob comes from a snapshot)
                return True, await self._snapshots.read(self._fs.root, source.blob)
            assert source.artifact_id is not None
            if self._artifacts is None:
                plan.cannot(target.path, "no artifact store holds its earlier content here")
                return False, None
            info = await self._artifacts.get(source.session_id, source.artifact_id)
            if info is None:
                plan.cannot(target.path, f"its kept content ({source.artifact_id}) is gone")
                return False, None
            data = await self._artifacts.read(
                source.session_id, source.artifact_id, offset=0, length=info.size
            )
        except (OSError, SoongAgentError) as exc:
            plan.cannot(target.path, f"its earlier content could not be read: {exc}")
            return False, None
        if sha256_of(data) != source.sha256:
            plan.cannot(target.path, f"its kept content ({source.artifact_id}) was altered")
            return False, None
        return True, data

    async def _changed_outside(
        self, history: SessionHistory, plan: RewindPlan, path: str, now: str | None
    ) -> bool:
        """Whether the file differs from what the agent last left there."""
        known = last_known(history, path)
        current_tree = plan.current_tree
        if known.tree is not None and known.tree_is_later and current_tree is not None:
            assert self._snapshots is not None
            tree = known.tree[1]
            if tree not in self._diffs:
                changes = await self._snapshots.changes(self._fs.root, tree, current_tree)
                self._diffs[tree] = {change.path for change in changes}
            if path in self._diffs[tree]:
                return True
            if await self._snapshots.entries(self._fs.root, current_tree, [path]):
                return False  # as the agent left it
            # not a file git keeps (ignored): the file tools' record says
        if known.sha is not None:
            return now != known.sha[1]
        return False
