"""An agent source holding given definitions over the built-ins, as strict as the home's
loader (AGT-1)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePath

from soong_agent.domain.agents import BUILTINS, check_definition, merge_definitions
from soong_agent.ports.agents import AgentDefinition


class InMemoryAgentSource:
    """An `AgentSource` of the built-ins with the given definitions over them.

    It refuses (ValueError) a definition the real loader would never produce: one breaking a
    rule of `soong_agent.domain.agents`, a source that is not an absolute `<id>.md` path, a
    content hash that is not a sha256 hex digest, a definition claiming the source of a
    built-in, and two definitions of one id. `builtins=False` leaves the built-ins out.
    `warnings` are returned as given.
    """

    def __init__(
        self,
        definitions: Iterable[AgentDefinition] = (),
        *,
        warnings: Iterable[str] = (),
        builtins: bool = True,
    ) -> None:
        given: dict[str, AgentDefinition] = {}
        for definition in definitions:
            _check(definition)
            if definition.id in given:
                raise ValueError(f"two agent definitions have the id {definition.id!r}")
            given[definition.id] = definition
        self._definitions = merge_definitions(BUILTINS if builtins else (), given.values())
        self._warnings = list(warnings)
        self.asked: list[str] = []
        """The ids `get` was asked for, in order."""

    def definitions(self) -> list[AgentDefinition]:
        return list(self._definitions)

    def warnings(self) -> list[str]:
        return list(self._warnings)

    def get(self, agent_id: str) -> AgentDefinition | None:
        self.asked.append(agent_id)
        return next((d for d in self._definitions if d.id == agent_id), None)


def _check(definition: AgentDefinition) -> None:
    if definition.builtin:
        raise ValueError(
            f"agent {definition.id!r}: a given definition comes from a file, not built in"
        )
    check_definition(definition)
    source = PurePath(definition.source)
    if not source.is_absolute() or source.name != f"{definition.id}.md":
        raise ValueError(
            f"agent {definition.id!r}: source must be an absolute path ending in "
            f"{definition.id}.md, found {definition.source!r}"
        )
    digest = definition.content_hash
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValueError(f"agent {definition.id!r}: content_hash must be a sha256 hex digest")
    if definition.prompt != definition.prompt.strip("\n"):
        raise ValueError(f"agent {definition.id!r}: the prompt must not start or end with a blank")
