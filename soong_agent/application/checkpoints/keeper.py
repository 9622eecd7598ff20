"""Keeps what a user turn's tool calls change, before they change it (RWD-1).

The tool pipeline asks `TurnCheckpoints.before` for every call the permission gate let through
and `after` once it ran. A call of a writing tool (``write`` or ``exec``) that names a path
(`write_file`, `edit_file`, a Python tool with a path target) gets the file's bytes kept as an
artifact of the session, once per file and turn (`FileCheckpoint`); a call that may change any
file (a command, a tool without a path target) gets the git work tree snapshotted before the
turn's first such call and after each (`WorkTreeSnapshot`). After every such call, what the
agent left in the file is recorded (`FileChanged`), so that a rewind can tell a file changed
outside the agent since. Every event names the turn's user message.

Nothing here fails a call: what cannot be kept is recorded with the reason, and a rewind lists
it as something it cannot restore.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from soong_agent.application.permissions.gate import WRITING_CLASSES, target_of
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.tools.base import Tool, ToolContext
from soong_agent.domain.permissions.git_exclusions import exclusions
from soong_agent.domain.permissions.sensitive import SensitivePaths
from soong_agent.ports.artifacts import ArtifactStore
from soong_agent.ports.errors import SoongAgentError
from soong_agent.ports.events import FileChanged, FileCheckpoint, WorkTreeSnapshot
from soong_agent.ports.filesystem import FileSystem
from soong_agent.ports.snapshots import WorkTreeSnapshots

CHECKPOINT_MAX_BYTES = 16 * 1024 * 1024
"""The biggest file whose bytes a checkpoint keeps; a bigger one is named as not kept."""
NOT_A_WORK_TREE = "the project is not in a git work tree"
NO_SNAPSHOTS = "no work-tree snapshots in this runtime"
FILES_ONLY = 'tools.checkpoints is "files": what commands change is not kept'


@dataclass(frozen=True, slots=True)
class Pending:
    """What to record once a call has run: the file it names, or a snapshot of the tree."""

    kind: Literal["file", "tree"]
    turn: str
    call_id: str
    path: str = ""
    tool: str = ""
    summary: str = ""


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def current_sha(fs: FileSystem, path: str) -> str | None:
    """The sha256 of the file at `path` now; None when there is none."""
    try:
        return sha256_of(await fs.read_bytes(path))
    except (FileNotFoundError, NotADirectoryError):
        return None


def snapshot_exclusions(fs: FileSystem) -> tuple[str, ...]:
    """The pathspecs that keep the sandbox's sensitive files out of a snapshot."""
    rules = SensitivePaths(fs.sensitive_patterns, project=fs.root, home=fs.home).rules
    return exclusions(rules, fs.root)


class TurnCheckpoints:
    """The checkpoints of one run's user turn (a run is one turn: its pipeline has its own)."""

    def __init__(
        self,
        *,
        artifacts: ArtifactStore,
        snapshots: WorkTreeSnapshots | None = None,
        max_bytes: int = CHECKPOINT_MAX_BYTES,
        no_snapshots: str = NO_SNAPSHOTS,
    ) -> None:
        self._artifacts = artifacts
        self._snapshots = snapshots
        self._no_snapshots = no_snapshots
        self._max_bytes = max_bytes
        self._turn: str | None = None
        self._kept: set[str] = set()
        self._before_taken = False
        self._work_tree: bool | None = None
        self._exclude: tuple[str, ...] | None = None

    async def before(
        self, tool: Tool, args: BaseModel, ctx: ToolContext, rec: RunRecorder
    ) -> list[Pending]:
        """Keep what the call may change, before it runs; what to record after it."""
        if tool.permission_class not in WRITING_CLASSES:
            return []
        turn = self._turn_of(rec)
        if turn is None:
            return []
        pending: list[Pending] = []
        kind, shown = target_of(args, ctx.fs, tool)
        if kind == "path" and shown is not None:
            if shown not in self._kept:
                self._kept.add(shown)
                await self._keep(shown, turn, ctx, rec)
            pending.append(Pending("file", turn, ctx.call_id, path=shown))
        if kind != "path" or tool.permission_class == "exec":
            summary = tool.describe(args, ctx)[1]
            tree = Pending("tree", turn, ctx.call_id, tool=tool.name, summary=summary)
            if not self._before_taken:
                self._before_taken = True
                await self._snapshot("before", tree, ctx, rec)
            pending.append(tree)
        return pending

    async def after(
        self, pending: list[Pending], ctx: ToolContext, rec: RunRecorder, *, cancelled: bool
    ) -> None:
        """Record what the call left: each file's sha256, the tree after it (not for a call
        that was cancelled: a snapshot could take seconds; the next one covers it)."""
        for item in pending:
            if item.kind == "file":
                try:
                    sha = await current_sha(ctx.fs, item.path)
                except (OSError, SoongAgentError):
                    continue  # unreadable now: a rewind will say it cannot tell
                rec.event(
                    FileChanged,
                    message_id=item.turn,
                    path=item.path,
                    sha256=sha,
                    call_id=item.call_id,
                )
            elif not cancelled:
                await self._snapshot("after", item, ctx, rec)

    def _turn_of(self, rec: RunRecorder) -> str | None:
        """The run's user message (taken once: a compaction later copies it under a new id)."""
        if self._turn is None:
            for message in reversed(rec.history):
                if message.role == "user" and message.kind == "normal":
                    self._turn = message.id
                    break
        return self._turn

    async def _keep(self, path: str, turn: str, ctx: ToolContext, rec: RunRecorder) -> None:
        """Record the file's bytes before the turn's first change to it."""
        sha: str | None = None
        artifact: str | None = None
        problem = ""
        try:
            # A file with a second hard link is never written by the tools (its other name
            # may be outside the sandbox): its bytes are not kept either.
            data = await ctx.fs.read_bytes(path, max_bytes=self._max_bytes + 1, sole_link=True)
        except (FileNotFoundError, NotADirectoryError):
            data = None  # no file yet: a rewind removes what the turn creates
        except (OSError, SoongAgentError) as exc:
            data, problem = None, f"it could not be read: {exc}"
        if data is not None and len(data) > self._max_bytes:
            problem = f"it is bigger than the {self._max_bytes} bytes a checkpoint keeps"
        elif data is not None:
            sha = sha256_of(data)
            artifact, problem = await self._save(data, sha, path, ctx)
        rec.event(
            FileCheckpoint,
            message_id=turn,
            path=path,
            sha256=sha,
            artifact_id=artifact,
            problem=problem,
        )

    async def _save(
        self, data: bytes, sha: str, path: str, ctx: ToolContext
    ) -> tuple[str | None, str]:
        """The artifact holding `data`, or why it could not be kept."""
        name = "checkpoint-" + (posixpath.basename(path.rstrip("/")) or "file")
        try:
            info = await self._artifacts.save(
                session_id=ctx.session_id,
                run_id=ctx.run_id,
                filename=name,
                data=data,
                preview_chars=0,
            )
        except (OSError, SoongAgentError) as exc:
            return None, f"it could not be stored: {exc}"
        if info.sha256 != sha:  # the store scrubbed a secret out of it: not these bytes
            return None, "it holds a secret, which is never stored"
        return info.id, ""

    async def _snapshot(
        self, stage: Literal["before", "after"], item: Pending, ctx: ToolContext, rec: RunRecorder
    ) -> None:
        tree, skipped, problem = await self._take(ctx.fs)
        rec.event(
            WorkTreeSnapshot,
            message_id=item.turn,
            call_id=item.call_id,
            tool=item.tool,
            stage=stage,
            tree=tree,
            summary=item.summary,
            skipped=list(skipped),
            problem=problem,
        )

    async def _take(self, fs: FileSystem) -> tuple[str | None, tuple[str, ...], str]:
        """A snapshot of the project's work tree: (tree, files left out, problem)."""
        if self._snapshots is None:
            return None, (), self._no_snapshots
        if self._work_tree is False:
            return None, (), NOT_A_WORK_TREE
        if self._exclude is None:
            self._exclude = snapshot_exclusions(fs)
        try:
            taken = await self._snapshots.take(fs.root, exclude=self._exclude)
        except (OSError, SoongAgentError) as exc:
            return None, (), f"the snapshot failed: {exc}"
        self._work_tree = taken is not None
        if taken is None:
            return None, (), NOT_A_WORK_TREE
        return taken.tree, taken.skipped, ""
