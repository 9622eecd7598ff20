"""What the system prompt is built from: instruction files and the environment, as data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class InstructionDoc:
    """One instruction file (CLAUDE.md, AGENTS.md, a rule); `source` is where it came from."""

    source: str
    text: str


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

    def environment(self) -> EnvironmentInfo:
        """The working directory, platform, date and git state."""
        ...
