"""How a run of each agent definition is put together (AGT-1, AGT-3): the root of `--agent`
(SDK `agent=`) and every child alike, from one definition to one (assembler, spec) pair."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from soong_agent.ports.errors import UsageError

if TYPE_CHECKING:
    import httpx

    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.application.assembly import RunAssembler, RunSpec
    from soong_agent.application.tools.base import Tool
    from soong_agent.ports.agents import AgentDefinition, AgentSource
    from soong_agent.ports.skills import SkillSource
    from soong_agent.ports.system import SecretSource

Setup = tuple["RunAssembler", "RunSpec"]
"""A run's assembler (its model, permissions, skills) and its spec (tools, prompt, loop)."""


class AgentSetups:
    """The set-up of every agent definition of a runtime, built once per definition.

    A run of a definition gets the root's tools within the definition's `tools` ceiling
    (never one `tools.disabled` names), its prompt section and `max_turns`, the model of its
    `model_profile` (the main model without one), its `permission_mode` when that is stricter
    than `permissions.mode`, and only the skills its `skills:` lists (all without it). A root
    run keeps the spawning tools its ceiling allows; a child never gets one, and a worker's
    tools are also within its `allowed_tools`.
    """

    def __init__(
        self,
        loaded: LoadedConfig,
        assembler: RunAssembler,
        root: RunSpec,
        client: Callable[[], httpx.AsyncClient],
        secrets: SecretSource,
        skills: SkillSource | None = None,
    ) -> None:
        from soong_agent.adapters.agents import HomeAgentSource

        self._loaded = loaded
        self._assembler = assembler
        self._root = root
        self._client = client
        self._secrets = secrets
        self._skills = skills
        self.source: AgentSource = HomeAgentSource(loaded.home)
        self._built: dict[tuple[str, bool, tuple[str, ...] | None], Setup] = {}

    def definition(self, agent_id: str, *, flag: str = "") -> AgentDefinition:
        """The definition `agent_id`; UsageError listing the known ids for an unknown one
        (`flag` prefixes the message, e.g. ``--agent: ``), and UsageError saying why when the
        home's file of that name was refused (a broken file, or one that takes a shipped
        preset's id: the user meant theirs, not the preset)."""
        from soong_agent.domain.agents import unknown_agent_message

        refused = next((w for w in self.source.warnings() if f"{os.sep}{agent_id}.md: " in w), None)
        if refused is not None:
            raise UsageError(f"{flag}{refused}")
        definition = self.source.get(agent_id)
        if definition is None:
            known = [d.id for d in self.source.definitions()]
            raise UsageError(f"{flag}{unknown_agent_message(agent_id, known)}")
        return definition

    def root(self, agent_id: str) -> Setup:
        """The set-up of a root run that follows `agent_id` (`run --agent`, SDK `agent=`)."""
        return self._setup(agent_id, root=True, allowed=None)

    def child(self, agent_id: str, allowed: tuple[str, ...] | None = None) -> Setup:
        """The set-up of a child run of `agent_id`; `allowed`: a worker's `allowed_tools`."""
        return self._setup(agent_id, root=False, allowed=allowed)

    def _setup(self, agent_id: str, *, root: bool, allowed: tuple[str, ...] | None) -> Setup:
        key = (agent_id, root, allowed)
        built = self._built.get(key)
        if built is not None:
            return built
        from soong_agent.application.tools.agents import SPAWNING_TOOLS
        from soong_agent.domain.agents import tool_listed

        definition = self.definition(agent_id, flag="--agent: " if root else "")

        def keep(name: str) -> bool:
            if not root and name in SPAWNING_TOOLS:
                return False
            return allowed is None or tool_listed(name, allowed)

        spec = definition_spec(self._loaded, self._root, definition, keep)
        assembler = self._assembler
        assembler, spec = self._with_mode(definition, assembler, spec)
        assembler, spec = self._with_model(definition, assembler, spec)
        assembler, spec = self._with_skills(definition, assembler, spec)
        self._built[key] = (assembler, spec)
        return assembler, spec

    def _with_mode(
        self, definition: AgentDefinition, assembler: RunAssembler, spec: RunSpec
    ) -> Setup:
        """A definition's `permission_mode`, when stricter than the configured one."""
        from soong_agent.domain.permissions import PermissionMode, strictest_mode

        wanted: PermissionMode | None = definition.permission_mode  # type: ignore[assignment]
        policies = assembler.policies
        mode = strictest_mode(policies.permissions.mode, wanted)
        if mode == policies.permissions.mode:
            return assembler, spec
        permissions = policies.permissions.model_copy(update={"mode": mode})
        return assembler.derived(
            policies=dataclasses.replace(policies, permissions=permissions)
        ), spec

    def _with_model(
        self, definition: AgentDefinition, assembler: RunAssembler, spec: RunSpec
    ) -> Setup:
        """A definition's `model_profile`: its provider, window and output settings."""
        if definition.model_profile is None:
            return assembler, spec
        from soong_agent.domain.config.resolve import resolve_profile
        from soong_agent.entrypoints.factories import model_provider

        profile = resolve_profile(
            self._loaded.config,
            definition.model_profile,
            purpose=f"agent {definition.id}",
            source=f"{definition.source}: model_profile",
        )
        provider = model_provider(self._loaded, profile, self._client(), self._secrets)
        model = profile.model
        policies = dataclasses.replace(
            assembler.policies, context_window=model.context_window, provider_name=model.provider
        )
        settings = dataclasses.replace(
            spec.settings,
            model_label=provider.label,
            max_output_tokens=model.max_output_tokens,
            temperature=model.temperature,
            price=model.price,
        )
        assembler = assembler.derived(
            dataclasses.replace(assembler.ports, provider=provider), policies
        )
        return assembler, dataclasses.replace(spec, settings=settings)

    def _with_skills(
        self, definition: AgentDefinition, assembler: RunAssembler, spec: RunSpec
    ) -> Setup:
        """A definition's `skills:`: only those skills in the catalogue and for `load_skill`
        (the tool is left out when none of them exists)."""
        if not definition.skills or self._skills is None:
            return assembler, spec
        from soong_agent.application.tools.base import ToolRegistry
        from soong_agent.application.tools.skills import LOAD_SKILL, OnlySkills, skills_tool

        only = OnlySkills(self._skills, definition.skills)
        tools: list[Tool] = []
        for tool in spec.tools.tools():
            if tool.name != LOAD_SKILL:
                tools.append(tool)
            elif only.skills():
                tools.append(dataclasses.replace(skills_tool(only), deferrable=tool.deferrable))
        assembler = assembler.derived(dataclasses.replace(assembler.ports, skills=only))
        return assembler, dataclasses.replace(spec, tools=ToolRegistry(tools))


def definition_spec(
    loaded: LoadedConfig,
    root: RunSpec,
    definition: AgentDefinition,
    keep: Callable[[str], bool] = lambda name: True,
) -> RunSpec:
    """The root's spec as agent definition `definition` shapes it (AGT-1): the root's tools
    within its ceiling (never one `tools.disabled` names) that `keep` also keeps, its prompt
    section, its `max_turns` and its content hash."""
    from soong_agent.application.tools.base import ToolRegistry
    from soong_agent.domain.agents import allowed_tools

    names = set(
        allowed_tools(definition, [*root.tools.names(), "compact"], loaded.config.tools.disabled)
    )
    tools = ToolRegistry([t for t in root.tools.tools() if t.name in names and keep(t.name)])
    settings = dataclasses.replace(root.settings, agent_hash=definition.content_hash)
    if definition.max_turns is not None:
        settings = dataclasses.replace(settings, max_turns=definition.max_turns)
    return dataclasses.replace(
        root,
        tools=tools,
        settings=settings,
        agent=definition.id,
        persona=definition.prompt,
        compact="compact" in names and keep("compact"),
    )
