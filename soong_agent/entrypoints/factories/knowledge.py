"""Skills and memory (SKILL-1, MEM-1..5): what the agent knows beyond the project."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from soong_agent.ports.memory import MemoryStore
from soong_agent.ports.model import ModelProvider
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.ports.skills import SkillSource

if TYPE_CHECKING:
    from soong_agent.adapters.config.toml_loader import LoadedConfig
    from soong_agent.application.memory.consolidation import MemoryConsolidation
    from soong_agent.application.memory.extraction import MemoryExtraction
    from soong_agent.application.memory.recall import MemoryRecall
    from soong_agent.application.tools.base import Tool
    from soong_agent.domain.config.resolve import ResolvedProfile
    from soong_agent.domain.memory import MemoryPolicy
    from soong_agent.ports.storage import SessionStore
    from soong_agent.ports.system import Clock


@dataclass(frozen=True)
class Knowledge:
    """What the agent knows beyond the project: the home's skills (SKILL-1) and its memory
    store (MEM-1), with the tools that reach them and what was wrong reading them."""

    skills: SkillSource | None
    memory: MemoryStore | None
    tools: list[Tool]
    warnings: list[str]
    policy: MemoryPolicy | None = None
    """The memory policy every writer goes through (None without memory)."""


def knowledge(loaded: LoadedConfig, redactor: SecretRedactor) -> Knowledge:
    """The skills of `${SOONG_AGENT_HOME}/skills` (never a project's) and, with
    `memory.enabled`, the memory store of `memory.memory_dir` behind the memory policy (a
    secret, a file listing or task progress is refused whatever the model says)."""

    from soong_agent.adapters.memory import FileMemoryStore
    from soong_agent.adapters.skills import HomeSkillSource
    from soong_agent.application.tools.memory import memory_tools
    from soong_agent.application.tools.skills import skills_tool
    from soong_agent.domain.memory import MemoryPolicy

    tools: list[Tool] = []
    source = HomeSkillSource(loaded.home)
    skills: SkillSource | None = None
    if source.skills():
        skills = source
        tools.append(skills_tool(source))
    warnings = [f"skills: {w}" for w in source.warnings()]
    memory: MemoryStore | None = None
    policy: MemoryPolicy | None = None
    config = loaded.config.memory
    if config.enabled:
        memory = FileMemoryStore(Path(config.memory_dir))
        policy = MemoryPolicy(redactor, categories=config.categories)
        tools += memory_tools(memory, policy)
    return Knowledge(skills, memory, tools, warnings, policy)


def memory_recall(
    loaded: LoadedConfig,
    known: Knowledge,
    provider: ModelProvider,
    profile: ResolvedProfile,
    redactor: SecretRedactor,
) -> MemoryRecall | None:
    """Recall (MEM-4) over the memory store; None without memory (`memory.enabled`)."""
    if known.memory is None:
        return None
    from soong_agent.application.memory.recall import MemoryRecall, RecallSettings

    config = loaded.config.memory
    settings = RecallSettings(
        top_k=config.recall_top_k,
        catalog_max_tokens=config.catalog_max_tokens,
        context_tokens=config.memory_context_token_budget,
        temperature=profile.model.temperature,
    )
    return MemoryRecall(known.memory, provider, settings, redactor=redactor)


def memory_extraction(
    loaded: LoadedConfig,
    known: Knowledge,
    sessions: SessionStore,
    provider: ModelProvider,
    profile: ResolvedProfile,
    clock: Clock,
    redactor: SecretRedactor,
    closables: list[Callable[[], Awaitable[None]]],
) -> MemoryExtraction | None:
    """The extraction job (MEM-3); None without memory. Closing the runtime gives a running
    extraction `CLOSE_TIMEOUT_S` to finish."""
    if known.memory is None or known.policy is None:
        return None
    from soong_agent.application.memory.extraction import ExtractionSettings, MemoryExtraction

    config = loaded.config.memory
    extraction = MemoryExtraction(
        sessions=sessions,
        memory=known.memory,
        policy=known.policy,
        provider=provider,
        clock=clock,
        settings=ExtractionSettings(
            every_messages=config.extract_every_messages,
            every_tokens=config.extract_every_tokens,
            idle_seconds=config.idle_seconds,
            catalog_max_tokens=config.catalog_max_tokens,
            temperature=profile.model.temperature,
        ),
        redactor=redactor,
    )
    closables.append(extraction.aclose)
    return extraction


def memory_consolidation(
    loaded: LoadedConfig,
    known: Knowledge,
    sessions: SessionStore,
    provider: ModelProvider,
    clock: Clock,
    redactor: SecretRedactor,
) -> MemoryConsolidation | None:
    """The consolidation pass (seed 002 "Dream"); None without memory. Due at most once per
    `memory.consolidate_min_hours`, after `consolidate_min_sessions` new sessions."""
    if known.memory is None or known.policy is None:
        return None
    from soong_agent.application.memory.consolidation import (
        ConsolidationSettings,
        MemoryConsolidation,
    )

    config = loaded.config.memory
    return MemoryConsolidation(
        memory=known.memory,
        policy=known.policy,
        provider=provider,
        clock=clock,
        sessions=sessions,
        settings=ConsolidationSettings(
            min_hours=config.consolidate_min_hours, min_sessions=config.consolidate_min_sessions
        ),
        redactor=redactor,
    )
