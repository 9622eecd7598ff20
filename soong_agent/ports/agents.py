"""Agent definitions (AGT-1): what an agent may use and the prompt section it adds.

The built-ins and the home's `${SOONG_AGENT_HOME}/agents/<id>.md` files, behind one
`AgentSource`. The rules a definition obeys and the built-ins themselves are in
`soong_agent.domain.agents`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

BUILTIN_SOURCE = "built-in"
"""The `source` of a definition shipped with soong-agent (a user file's is its path)."""


@dataclass(frozen=True, slots=True)
class AgentDefinition:
    """One checked agent definition.

    Attributes:
        id: what `--agent`, `create_sub_agent` and worker pools name it by.
        description: one line saying what the agent is for.
        tools: tool names or fnmatch patterns (`task_*`, `*`): a ceiling on the tools of a run
            of this agent, never a grant of a tool the user's config disables.
        model_profile: a `[model_overrides]` name, or None for the main model.
        max_turns: the turn limit of its runs, or None for the config's.
        permission_mode: a `permissions.mode` value for its runs, or None for the config's.
        skills: the names of the home's skills it is offered; empty means all of them.
        prompt: the prompt section it adds to the system prompt (the file's body); may be empty.
        source: the absolute path of the file it was read from, or `BUILTIN_SOURCE`.
        content_hash: the sha256 (hex) of the file's text (of its canonical text for a
            built-in), so a session can tell when the definition it started with changed.
    """

    id: str
    description: str
    tools: tuple[str, ...]
    prompt: str
    source: str
    content_hash: str
    model_profile: str | None = None
    max_turns: int | None = None
    permission_mode: str | None = None
    skills: tuple[str, ...] = ()

    @property
    def builtin(self) -> bool:
        """Whether it ships with soong-agent (rather than coming from a user file)."""
        return self.source == BUILTIN_SOURCE


@runtime_checkable
class AgentSource(Protocol):
    """The agent definitions: the built-ins and the home's files (never a project's)."""

    def definitions(self) -> list[AgentDefinition]:
        """Every usable definition, sorted by id; skipped files are in `warnings`."""
        ...

    def warnings(self) -> list[str]:
        """One line per agent file that was skipped, naming it and why."""
        ...

    def get(self, agent_id: str) -> AgentDefinition | None:
        """The definition with this id, or None."""
        ...
