"""What the system prompt is built from: instruction files and the environment, as data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class InstructionDoc:
    """One instruction file (CLAUDE.md, AGENTS.md, a rule); `source` is where it came from.

    `folder`: for the file of a folder inside the project (PROMPT-2), that folder, relative to
    the project and in posix form (``pkg/sub``); None for the home's and the project's own.
    """

    source: str
    text: str
    folder: str | None = None


@dataclass(frozen=True, slots=True)
class SkippedInstruction:
    """An instruction file of the project that was left out of the chain, and why.

    `source` is labelled as its `InstructionDoc` would be (``<project>/AGENTS.md``); `reason`
    says why in words (a symbolic link leading outside the project, a sensitive path); `folder`
    is the folder it belongs to, as in `InstructionDoc` (None for the project's own files).
    """

    source: str
    reason: str
    folder: str | None = None

    @property
    def message(self) -> str:
        """One line for the run's warning event."""
        return f"{self.source} was left out of the instructions: {self.reason}"


@dataclass(frozen=True, slots=True)
class EnvironmentInfo:
    """Facts about where the agent runs, rendered into the dynamic end of the system prompt."""

    cwd: str
    platform: str
    date: str
    git: str | None = None


@runtime_checkable
class ContextSource(Protocol):
    """Reads the instruction chain (PROMPT-2) and the environment facts (PROMPT-1)."""

    def instructions(self) -> list[InstructionDoc]:
        """Home instructions first, then the project's."""
        ...

    def folder_instructions(self, folder: str) -> list[InstructionDoc]:
        """The `CLAUDE.md` then `AGENTS.md` of `folder`, a folder inside the project given
        relative to it in posix form (``pkg/sub``), each with `folder` set; empty when it has
        none, and for a folder that is not inside the project (``..``, absolute). A file that
        leads out of the project or to a sensitive path is left out (see `skipped`)."""
        ...

    def skipped(self, folder: str | None = None) -> list[SkippedInstruction]:
        """The project's instruction files the last read left out, and why: by `instructions`
        (`folder` None) or by `folder_instructions(folder)`; empty before that read.

        A project file is read only when it resolves inside the project and is not a sensitive
        path (`tools.sensitive_paths`): a `CLAUDE.md` that is a symbolic link to
        ``~/.ssh/id_rsa``, or an `AGENTS.md` linked to ``.env``, is left out and named here,
        and the rest of the chain is read as usual. The home's files are the user's own and
        are read wherever they lead.
        """
        ...

    def environment(self) -> EnvironmentInfo:
        """The working directory, platform, date and git state."""
        ...
