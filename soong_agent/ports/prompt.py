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
        none, and for a folder that is not inside the project (``..``, absolute, a symlink
        leading out of it)."""
        ...

    def environment(self) -> EnvironmentInfo:
        """The working directory, platform, date and git state."""
        ...
