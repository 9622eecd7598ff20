"""The instruction files of the folders a run works in (PROMPT-2).

A folder's `CLAUDE.md` / `AGENTS.md` joins the instruction chain the first time a file tool
call reads, writes or lists something under that folder (every folder between the project
root and the path named counts). `FolderInstructions` is the per-run tracker: the loop tells it
about every finished batch of tool calls; it reads the new folders' files through the
`ContextSource`, records an `InstructionsLoaded` event for each, and says the system prompt
must be rebuilt (`changed`). A resumed session replays its stored messages through the same
rule (`replay`), so the new run's first request carries the same files.

An instruction file of the project that the source left out (a symbolic link leading outside
the project or to a sensitive path, see `ContextSource.skipped`) is told once per run: one
non-fatal `ErrorEvent` of kind ``instructions_skipped`` naming it (`warn_skipped`), the
project's own files when the run is assembled, a folder's when its files are first looked at.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence

from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.domain.compaction.carry_over import call_path as path_argument
from soong_agent.ports.events import ErrorEvent, InstructionsLoaded
from soong_agent.ports.messages import Message, ToolCallBlock, ToolResultBlock
from soong_agent.ports.prompt import ContextSource, InstructionDoc, SkippedInstruction

SKIPPED_KIND = "instructions_skipped"
"""The `ErrorEvent.kind` of the warning that an instruction file was left out."""

FOLDER_TOOLS = frozenset({"read_file", "write_file", "edit_file", "list_dir", "glob", "grep"})
"""Tools whose `path` / `file_path` argument says which folders the agent works in."""


def call_path(call: ToolCallBlock) -> str | None:
    """The path a folder tool call names (None for other tools and unreadable arguments).

    `list_dir`, `glob` and `grep` without a path work in the project folder itself."""
    if call.name not in FOLDER_TOOLS:
        return None
    return path_argument(call)


def folders_of(path: str, root: str) -> list[str]:
    """The folders inside the project from its root down to `path` (`path` itself last, in case
    it is a folder), relative and in posix form; empty for the project itself and for a path
    outside it. A relative `path` is taken from `root`, as the file tools take it."""
    if not path or path.startswith("~") or "\x00" in path:
        return []
    root = posixpath.normpath(root)
    full = posixpath.normpath(path if path.startswith("/") else posixpath.join(root, path))
    if full == root or not full.startswith(root.rstrip("/") + "/"):
        return []
    parts = posixpath.relpath(full, root).split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


class FolderInstructions:
    """The folder instruction files one run has loaded, in load order (a folder's parents'
    before its own, so later ones are more specific)."""

    def __init__(self, source: ContextSource, *, root: str) -> None:
        self._source = source
        self._root = root
        self._loaded: dict[str, list[InstructionDoc]] = {}  # folder -> its files
        self._changed = False
        self._skipped: list[SkippedInstruction] = []  # left out, not warned of yet
        self._warned: set[str] = set()  # the sources warned of in this run

    @property
    def docs(self) -> list[InstructionDoc]:
        """Every folder file loaded so far, in load order."""
        return [doc for docs in self._loaded.values() for doc in docs]

    @property
    def changed(self) -> bool:
        """Whether files were loaded since the last `take_changed`."""
        return self._changed

    def take_changed(self) -> bool:
        """`changed`, then reset: the caller rebuilds the system prompt when True."""
        changed, self._changed = self._changed, False
        return changed

    def observe(
        self, calls: Sequence[ToolCallBlock], results: Iterable[ToolResultBlock]
    ) -> list[InstructionDoc]:
        """Load the files of the folders these finished calls worked in (a call whose result is
        an error read, wrote and listed nothing); returns the files newly loaded."""
        calls = [c for c in calls if c.name in FOLDER_TOOLS]
        if not calls:  # the usual turn: no folder tool was called
            return []
        ok = {r.call_id for r in results if not r.is_error}
        new: list[InstructionDoc] = []
        for call in calls:
            path = call_path(call) if call.id in ok else None
            if path is None:
                continue
            for folder in folders_of(path, self._root):
                if folder in self._loaded:
                    continue
                docs = self._source.folder_instructions(folder)
                self._skipped += self._source.skipped(folder)
                if docs:  # a folder without files is looked at again next time: one may appear
                    self._loaded[folder] = docs
                    new += docs
        if new:
            self._changed = True
        return new

    def after_tools(
        self, calls: Sequence[ToolCallBlock], results: Iterable[ToolResultBlock], rec: RunRecorder
    ) -> None:
        """`observe`, recording an `InstructionsLoaded` event per file loaded and a warning per
        file it left out (`warn_skipped`)."""
        for doc in self.observe(calls, results):
            folder = doc.folder or ""
            rec.event(
                InstructionsLoaded,
                path=f"{folder}/{posixpath.basename(doc.source)}",
                folder=folder,
                bytes=len(doc.text.encode("utf-8")),
            )
        if self._skipped:
            self.warn_skipped(rec)

    def warn_skipped(self, rec: RunRecorder) -> None:
        """One warning (`ErrorEvent`, kind ``instructions_skipped``, not fatal) for each
        instruction file left out that this run has not been told of: the project's own (as
        the source last read them: called when the run is assembled) and those of the folders
        looked at so far."""
        for skip in [*self._source.skipped(), *self._skipped]:
            if skip.source not in self._warned:
                self._warned.add(skip.source)
                rec.event(ErrorEvent, kind=SKIPPED_KIND, message=skip.message, fatal=False)
        self._skipped.clear()

    def replay(self, messages: Sequence[Message]) -> None:
        """Load what `messages` (a session's stored messages, every branch) loaded, by the same
        rule, without events: the prompt a resumed session starts with."""
        calls: list[ToolCallBlock] = []
        for message in messages:  # each tool message answers the calls just before it (call
            if message.tool_calls:  # ids are unique in a turn, not across a session)
                calls = message.tool_calls
            elif message.tool_results:
                self.observe(calls, message.tool_results)
                calls = []
        self._changed = False
