"""System prompt assembly (PROMPT-1): stable sections first so provider caches hit."""

from __future__ import annotations

from collections.abc import Sequence

from soong_agent.ports.model import SystemPart, ToolSpec
from soong_agent.ports.prompt import EnvironmentInfo, InstructionDoc

IDENTITY = """You are soong-agent, an autonomous coding and automation agent working in the user's \
project folder. Work step by step: read before you change, make the smallest change that does \
the job, and check your work. Use the tools to look at and change files; never guess file \
contents. Paths are relative to the project folder. When a tool call is denied, do not retry it \
unchanged: adapt or explain what you needed. When the task is done, answer briefly with what you \
did."""


def tools_section(tools: Sequence[ToolSpec]) -> str:
    """A one-line catalogue of the available tools."""
    if not tools:
        return "No tools are available in this run."
    lines = ["Available tools:"]
    lines += [f"- {t.name}: {t.description.splitlines()[0]}" for t in tools]
    return "\n".join(lines)


def instructions_section(docs: Sequence[InstructionDoc]) -> str | None:
    """The instruction chain, each part labelled with its source."""
    if not docs:
        return None
    parts = ["Instructions from the user and the project (later ones are more specific):"]
    parts += [f'<instructions source="{d.source}">\n{d.text}\n</instructions>' for d in docs]
    return "\n\n".join(parts)


def environment_section(env: EnvironmentInfo) -> str:
    """The dynamic facts, last in the prompt."""
    lines = [
        "Environment:",
        f"- project folder (cwd): {env.cwd}",
        f"- platform: {env.platform}",
        f"- date: {env.date}",
        f"- git: {env.git or 'not a git repository'}",
    ]
    return "\n".join(lines)


def assemble_system_prompt(
    *,
    tools: Sequence[ToolSpec],
    instructions: Sequence[InstructionDoc],
    environment: EnvironmentInfo,
    identity: str = IDENTITY,
    skills: str = "",
) -> list[SystemPart]:
    """Identity, tools, the skills catalogue (SKILL-1), instruction chain, then the dynamic
    environment."""
    parts = [
        SystemPart(label="identity", text=identity),
        SystemPart(label="tools", text=tools_section(tools)),
    ]
    if skills:
        parts.append(SystemPart(label="skills", text=skills))
    chain = instructions_section(instructions)
    if chain:
        parts.append(SystemPart(label="instructions", text=chain))
    parts.append(
        SystemPart(label="environment", text=environment_section(environment), stable=False)
    )
    return parts
