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


_SECTIONS_MAX = 256
_SECTIONS: dict[tuple[int, ...], tuple[tuple[ToolSpec, ...], SystemPart]] = {}
"""The tools part of the prompt by the ids of its specs (kept alive with the part, so the ids
stay theirs: a spec is frozen, its name and description never change)."""


def tools_section(tools: Sequence[ToolSpec]) -> str:
    """A one-line catalogue of the available tools; those offered by name only (their
    description starts with `DEFERRED`) under a heading of their own."""
    return _tools_part(tools).text


def _tools_part(tools: Sequence[ToolSpec]) -> SystemPart:
    """The tools part, remembered per set of spec objects: a runtime's runs list the same."""
    key = tuple(map(id, tools))
    hit = _SECTIONS.get(key)
    if hit is not None:
        return hit[1]
    part = SystemPart(label="tools", text=_render_tools(tools))
    if len(_SECTIONS) >= _SECTIONS_MAX:
        _SECTIONS.clear()
    _SECTIONS[key] = (tuple(tools), part)
    return part


def _render_tools(tools: Sequence[ToolSpec]) -> str:
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


_CHAINS_MAX = 64
_CHAINS: dict[tuple[int, ...], tuple[tuple[InstructionDoc, ...], str, int]] = {}
"""`_chain` by the ids of its documents (kept alive with the text, so the ids stay theirs: a
document is frozen). The context source hands out the same documents while their files are
unchanged."""


def instructions_section(docs: Sequence[InstructionDoc]) -> str | None:
    """The instruction chain, each part labelled with its source."""
    if not docs:
        return None
    return _chain(docs)[0]


def _chain(docs: Sequence[InstructionDoc]) -> tuple[str, int]:
    """The chain's text and its size in UTF-8 bytes, remembered per set of documents."""
    key = tuple(map(id, docs))
    hit = _CHAINS.get(key)
    if hit is not None:
        return hit[1], hit[2]
    text = "\n\n".join([_CHAIN_HEADER, *(instruction_part(d) for d in docs)])
    size = len(text.encode("utf-8"))
    if len(_CHAINS) >= _CHAINS_MAX:
        _CHAINS.clear()
    _CHAINS[key] = (tuple(docs), text, size)
    return text, size


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
    if not docs or _chain(docs)[1] <= budget:
        return list(docs)
    key = (tuple(map(id, docs)), budget, count)
    try:
        hit = _FITTED.get(key)
    except TypeError:  # a counter that cannot be a key: cut afresh
        return _fit(docs, budget, count)
    if hit is None:
        if len(_FITTED) >= _FITTED_MAX:
            _FITTED.clear()
        hit = _FITTED[key] = (tuple(docs), _fit(docs, budget, count))
    return list(hit[1])


_FITTED_MAX = 16
_FITTED: dict[
    tuple[tuple[int, ...], int, Callable[[str], int]],
    tuple[tuple[InstructionDoc, ...], list[InstructionDoc]],
] = {}
"""`_fit` by the ids of the documents (kept alive with the result), the budget and the
counter: the same chain is cut the same way, into the same documents, run after run."""


def _fit(
    docs: Sequence[InstructionDoc], budget: int, count: Callable[[str], int]
) -> list[InstructionDoc]:
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


_IDENTITY_PART = SystemPart(label="identity", text=IDENTITY)
_ENVIRONMENTS: dict[EnvironmentInfo, SystemPart] = {}
_ENVIRONMENTS_MAX = 64


def _environment_part(env: EnvironmentInfo) -> SystemPart:
    """The environment part, remembered per facts (they change rarely: the date, a branch)."""
    part = _ENVIRONMENTS.get(env)
    if part is None:
        if len(_ENVIRONMENTS) >= _ENVIRONMENTS_MAX:
            _ENVIRONMENTS.clear()
        part = _ENVIRONMENTS[env] = SystemPart(
            label="environment", text=environment_section(env), stable=False
        )
    return part


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
        _IDENTITY_PART if identity == IDENTITY else SystemPart(label="identity", text=identity),
        _tools_part(tools),
    ]
    if skills:
        parts.append(SystemPart(label="skills", text=skills))
    chain = instructions_section(instructions)
    if chain:
        parts.append(SystemPart(label="instructions", text=chain))
    if memory:
        parts.append(SystemPart(label="memory", text=memory, stable=False))
    parts.append(_environment_part(environment))
    return parts
