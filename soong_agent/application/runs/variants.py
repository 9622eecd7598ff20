"""How a run of each agent definition is put together (AGT-1, AGT-3, TEAM-4): the root of
`--agent` (SDK `agent=`), every child and every teammate alike, from values and the ports the
entrypoints supply — the definitions (`AgentSource`), a model per profile (`ProfileModels`),
the skills (`SkillSource`) and a teammate's worktree (`Workspaces`) — never a callback into
the composition root.

A run of a definition gets the root's tools within the definition's `tools` ceiling (never one
`tools.disabled` names; `compact` too only when the ceiling lists it), its prompt section and
`max_turns`, the model of its `model_profile` (the main model without one), its
`permission_mode` when that is stricter than `permissions.mode`, and only the skills its
`skills:` lists (all without it). A root run keeps the spawning tools its ceiling allows; a
child never gets one, and a worker's tools are also within its `allowed_tools`. A teammate is
a child with `send_message`, working in its worktree when it has one: its file tools, commands
and declarative tools are rooted there.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Protocol

from soong_agent.application.runs.assembler import RunAssembler, RunSpec
from soong_agent.application.tools.agents import SPAWNING_TOOLS
from soong_agent.application.tools.base import Tool, ToolRegistry
from soong_agent.application.tools.catalog import apply_tool_config
from soong_agent.domain.agents import allowed_tools, tool_listed, unknown_agent_message
from soong_agent.domain.config.resolve import ResolvedProfile, resolve_profile
from soong_agent.domain.config.schema import SoongConfig
from soong_agent.domain.permissions import PermissionMode, strictest_mode
from soong_agent.ports.agents import AgentDefinition, AgentSource
from soong_agent.ports.errors import UsageError
from soong_agent.ports.filesystem import FileSystem
from soong_agent.ports.model import ModelProvider
from soong_agent.ports.skills import SkillSource

__all__ = ["AgentVariants", "ProfileModels", "Setup", "Workspaces", "definition_spec"]

Setup = tuple[RunAssembler, RunSpec]
"""A run's assembler (its model, permissions, skills, files) and its spec (tools, prompt)."""


class ProfileModels(Protocol):
    """The model provider of a resolved model profile (CFG-7)."""

    def provider(self, profile: ResolvedProfile) -> ModelProvider:
        """A provider for `profile`; nothing is sent yet."""
        ...


class Workspaces(Protocol):
    """A teammate's working folder — its git worktree — as the tools see it (TEAM-4)."""

    def root(self, worktree: str) -> str:
        """The folder a teammate works in inside its worktree (the project's place in it)."""
        ...

    def filesystem(self, root: str) -> FileSystem:
        """The file system of a run that reads and writes only below `root`."""
        ...

    def command_tools(self, root: str) -> list[Tool]:
        """`run_command` and the declarative tools, run in `root` with an OS sandbox whose
        only write root is `root` (`tools.disabled` / `overrides` applied)."""
        ...


class AgentVariants:
    """The set-up of every agent definition of a runtime, built once per definition and
    kind (see the module docstring)."""

    def __init__(
        self,
        config: SoongConfig,
        assembler: RunAssembler,
        root: RunSpec,
        *,
        agents: AgentSource,
        models: ProfileModels,
        skills: SkillSource | None = None,
        workspaces: Workspaces | None = None,
        member_tools: Callable[[], list[Tool]] = list,
    ) -> None:
        self._config = config
        self._assembler = assembler
        self._root = root
        self.source = agents
        self._models = models
        self._skills = skills
        self._workspaces = workspaces
        self._member_tools = member_tools
        self._built: dict[tuple[str, str, tuple[str, ...] | str | None], Setup] = {}

    def definition(self, agent_id: str, *, flag: str = "") -> AgentDefinition:
        """The definition `agent_id`; UsageError listing the known ids for an unknown one
        (`flag` prefixes the message, e.g. ``--agent: ``), and UsageError saying why when the
        home's file of that name was refused (a broken file, or one that takes a shipped
        preset's id: the user meant theirs, not the preset)."""
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
        return self._once(("root", agent_id, None), lambda: self._setup(agent_id, True, None))

    def child(self, agent_id: str, allowed: tuple[str, ...] | None = None) -> Setup:
        """The set-up of a child run of `agent_id`; `allowed`: a worker's `allowed_tools`."""
        return self._once(
            ("child", agent_id, allowed), lambda: self._setup(agent_id, False, allowed)
        )

    def member(self, role: str, worktree: str | None) -> Setup:
        """The set-up of a teammate of definition `role`, working in `worktree` (its git
        worktree) or in the project (None)."""
        return self._once(("member", role, worktree), lambda: self._member(role, worktree))

    def _once(
        self, key: tuple[str, str, tuple[str, ...] | str | None], make: Callable[[], Setup]
    ) -> Setup:
        built = self._built.get(key)
        if built is None:
            built = self._built[key] = make()
        return built

    def _setup(self, agent_id: str, root: bool, allowed: tuple[str, ...] | None) -> Setup:
        definition = self.definition(agent_id, flag="--agent: " if root else "")

        def keep(name: str) -> bool:
            if not root and name in SPAWNING_TOOLS:
                return False
            return allowed is None or tool_listed(name, allowed)

        spec = definition_spec(self._config, self._root, definition, keep)
        setup = self._with_mode(definition, (self._assembler, spec))
        setup = self._with_model(definition, setup)
        return self._with_skills(definition, setup)

    def _member(self, role: str, worktree: str | None) -> Setup:
        assembler, spec = self.child(role)
        tools = [*spec.tools.tools(), *self._member_tools()]
        workspaces = self._workspaces
        if worktree is not None and workspaces is not None:
            where = workspaces.root(worktree)
            rooted = {t.name: t for t in workspaces.command_tools(where)}
            tools = [rooted.get(t.name, t) for t in tools]
            ports = dataclasses.replace(assembler.ports, fs=workspaces.filesystem(where))
            assembler = assembler.derived(ports)
        return assembler, dataclasses.replace(spec, tools=ToolRegistry(tools))

    def _with_mode(self, definition: AgentDefinition, setup: Setup) -> Setup:
        """A definition's `permission_mode`, when stricter than the configured one."""
        assembler, spec = setup
        wanted: PermissionMode | None = definition.permission_mode  # type: ignore[assignment]
        policies = assembler.policies
        mode = strictest_mode(policies.permissions.mode, wanted)
        if mode == policies.permissions.mode:
            return setup
        permissions = policies.permissions.model_copy(update={"mode": mode})
        policies = dataclasses.replace(policies, permissions=permissions)
        return assembler.derived(policies=policies), spec

    def _with_model(self, definition: AgentDefinition, setup: Setup) -> Setup:
        """A definition's `model_profile`: its provider, window and output settings."""
        if definition.model_profile is None:
            return setup
        assembler, spec = setup
        profile = resolve_profile(
            self._config,
            definition.model_profile,
            purpose=f"agent {definition.id}",
            source=f"{definition.source}: model_profile",
        )
        provider = self._models.provider(profile)
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

    def _with_skills(self, definition: AgentDefinition, setup: Setup) -> Setup:
        """A definition's `skills:`: only those skills in the catalogue and for `load_skill`
        (the tool is left out when none of them exists)."""
        if not definition.skills or self._skills is None:
            return setup
        from soong_agent.application.tools.skills import LOAD_SKILL, OnlySkills, skills_tool

        assembler, spec = setup
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
    config: SoongConfig,
    root: RunSpec,
    definition: AgentDefinition,
    keep: Callable[[str], bool] = lambda name: True,
) -> RunSpec:
    """The root's spec as agent definition `definition` shapes it (AGT-1): the root's tools
    within its ceiling (never one `tools.disabled` names) that `keep` also keeps, its prompt
    section, its `max_turns` and its content hash."""
    names = set(allowed_tools(definition, [*root.tools.names(), "compact"], config.tools.disabled))
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


def late_tools(tools: list[Tool], config: SoongConfig) -> list[Tool]:
    """`tools.disabled` / `tools.overrides` applied to tools a run kind adds to its own."""
    return apply_tool_config(tools, config.tools)[0]
