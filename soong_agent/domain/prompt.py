"""System prompt assembly (PROMPT-1): stable sections first so provider caches hit."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

from soong_agent.ports.model import SystemPart, ToolSpec
from soong_agent.ports.prompt import EnvironmentInfo, InstructionDoc

IDENTITY = """You are soong-agent, an autonomous coding and automation agent working in the user's \
project folder. Work step by step: read before you change, make the smallest change that does \
the job, and check your work. Use the tools to look at and change files; never guess file \
contents. Paths are relative to the project folder. When a tool call is denied, do not retry it \
unchanged: adapt or explain what you needed. When the task is done, answer briefly with what you \
did."""


DEFERRED = "[deferred] "
"""Starts the description of a tool offered by name only (load it with tool_search first)."""
CATALOGUE_LINE_MAX = 100


@functools.lru_cache(maxsize=2048)
def _gist(description: str) -> str:
    """A tool's description cut to its first sentence, at most `CATALOGUE_LINE_MAX`
    characters (the whole description goes with the tool's schema)."""
    text = description.strip().splitlines()[0] if description.strip() else ""
    end = text.find(". ")
    if end > 0:
        text = text[: end + 1]
    if len(text) > CATALOGUE_LINE_MAX:
        text = text[: CATALOGUE_LINE_MAX - 1].rstrip() + "…"
    return text


def tools_section(tools: Sequence[ToolSpec]) -> str:
    """A one-line catalogue of the available tools; those offered by name only (their
    description starts with `DEFERRED`) under a heading of their own."""
    if not tools:
        return "No tools are available in this run."
    ready = [t for t in tools if not t.description.startswith(DEFERRED)]
    deferred = [t for t in tools if t.description.startswith(DEFERRED)]
    lines = ["Available tools:"]
    lines += [f"- {t.name}: {_gist(t.description)}" for t in ready]
    if deferred:
        lines.append("More tools, to load with tool_search before calling them:")
        lines += [f"- {t.name}: {_gist(t.description[len(DEFERRED) :])}" for t in deferred]
    return "\n".join(lines)


_CHAIN_HEADER = "Instructions from the user and the project (later ones are more specific):"


def instruction_part(doc: InstructionDoc) -> str:
    """One part of the chain, labelled with its source (and, for a folder's file, the folder
    it applies to)."""
    folder = f' folder="{doc.folder}"' if doc.folder is not None else ""
    return f'<instructions source="{doc.source}"{folder}>\n{doc.text}\n</instructions>'


def instructions_section(docs: Sequence[InstructionDoc]) -> str | None:
    """The instruction chain, each part labelled with its source."""
    if not docs:
        return None
    return "\n\n".join([_CHAIN_HEADER, *(instruction_part(d) for d in docs)])


def truncation_marker(source: str) -> str:
    """What stands where a part of the chain was cut (PROMPT-2)."""
    return f"[truncated: {source} cut to fit the instruction budget]"


def fit_instructions(
    docs: Sequence[InstructionDoc], budget: int, count: Callable[[str], int]
) -> list[InstructionDoc]:
    """The chain cut to fit `budget` tokens as `instructions_section` renders it (PROMPT-2).

    Later (more specific) parts win the space: the least specific part is cut first, from its
    end, and a part with no room left keeps only the marker naming it, so every cut is visible.
    `count` is called only when the chain's UTF-8 size is over `budget` (a token is never
    shorter than one byte), so a short chain never loads a tokenizer. Markers are kept even
    when the budget cannot hold them.
    """
    section = instructions_section(docs)
    if section is None or len(section.encode("utf-8")) <= budget:
        return list(docs)
    joint = count("\n\n")
    left = budget - count(_CHAIN_HEADER)
    stubs = [dataclasses.replace(d, text=truncation_marker(d.source)) for d in docs]
    stub_costs = [count(instruction_part(s)) + joint for s in stubs]
    fitted = list(stubs)
    for i in range(len(docs) - 1, -1, -1):
        cost = count(instruction_part(docs[i])) + joint
        room = left - sum(stub_costs[:i])
        if cost <= room:
            fitted[i] = docs[i]
            left -= cost
            continue
        fitted[i] = _cut_doc(docs[i], room - joint, count) or stubs[i]
        break
    return fitted


def _cut_doc(doc: InstructionDoc, room: int, count: Callable[[str], int]) -> InstructionDoc | None:
    """The longest head of `doc`, with the marker, whose part fits `room` tokens; None when not
    even a line of it does."""

    def cut(chars: int) -> InstructionDoc:
        head = doc.text[:chars].rstrip()
        return dataclasses.replace(doc, text=f"{head}\n{truncation_marker(doc.source)}")

    low, high = 0, len(doc.text)
    while low < high:  # the largest `chars` whose cut fits
        mid = (low + high + 1) // 2
        if count(instruction_part(cut(mid))) <= room:
            low = mid
        else:
            high = mid - 1
    return cut(low) if doc.text[:low].strip() else None


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
    memory: str = "",
) -> list[SystemPart]:
    """Identity, tools, the skills catalogue (SKILL-1), instruction chain, then the dynamic
    parts: the memories recalled for this run (MEM-4) and the environment."""
    parts = [
        SystemPart(label="identity", text=identity),
        SystemPart(label="tools", text=tools_section(tools)),
    ]
    if skills:
        parts.append(SystemPart(label="skills", text=skills))
    chain = instructions_section(instructions)
    if chain:
        parts.append(SystemPart(label="instructions", text=chain))
    if memory:
        parts.append(SystemPart(label="memory", text=memory, stable=False))
    parts.append(
        SystemPart(label="environment", text=environment_section(environment), stable=False)
    )
    return parts
