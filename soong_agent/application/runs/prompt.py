"""What a run sends before its messages (PROMPT-1, PROMPT-2): its system prompt, put together
from the tools, instruction files, environment, memories, the agent's section and the task
board; the text that prompt and the tool schemas make (what the context budget counts); and
`RunPrompt`, those pieces of one run as the assembler hands them to the loop."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from soong_agent.application.context.compaction_requests import CompactionRequests
from soong_agent.application.context.instructions import FolderInstructions
from soong_agent.application.context.summarizer import Summarizer, tools_text
from soong_agent.application.context.window import ContextWindow
from soong_agent.application.mcp.run_link import McpRunLink
from soong_agent.application.mcp.server_tools import McpTools
from soong_agent.application.mcp.tools import RunTools
from soong_agent.application.runs.spec import RunPolicies, RunPorts
from soong_agent.application.tools.base import Tool, ToolRegistry
from soong_agent.application.tools.skills import skills_catalogue_text
from soong_agent.domain.budget import ContextBudget
from soong_agent.domain.compaction import approx_tokens
from soong_agent.domain.config.schema import CompactConfig, McpToolsConfig
from soong_agent.domain.prompt import assemble_system_prompt, fit_instructions
from soong_agent.domain.skills import DEFAULT_CATALOGUE_TOKENS
from soong_agent.domain.token_estimate import ProviderCalibration
from soong_agent.ports.mcp import McpHub
from soong_agent.ports.model import SystemPart, ToolSpec
from soong_agent.ports.prompt import ContextSource, InstructionDoc
from soong_agent.ports.skills import SkillSource
from soong_agent.ports.system import TokenCounter

__all__ = [
    "RunPrompt",
    "ToolSets",
    "build_system_prompt",
    "context_window",
    "instruction_chain",
    "system_text",
]


@dataclass(frozen=True, slots=True)
class RunPrompt:
    """What one run sends before its messages, and what keeps it current."""

    compaction: CompactionRequests
    tools: ToolRegistry
    run_tools: RunTools
    link: McpRunLink | None
    folders: FolderInstructions
    system: list[SystemPart]
    system_of: Callable[[], list[SystemPart]]
    """The system prompt again (when the run's tools, instruction files or tasks changed)."""
    context: ContextWindow


class ToolSets:
    """Each run's tool set: optional tools deferred past `tools.defer_threshold`, over the
    MCP hub when there is one. The MCP tools of the last runs are kept with the hub,
    configuration and reserved names they were made for: runs with the same ones share them."""

    def __init__(self) -> None:
        self._held: tuple[McpHub, McpToolsConfig, tuple[str, ...], McpTools] | None = None

    def of(
        self,
        tools: ToolRegistry,
        loaded: Iterable[str],
        *,
        hub: McpHub | None,
        policies: RunPolicies,
        adjust: Callable[[list[Tool]], list[Tool]],
    ) -> tuple[RunTools, McpRunLink | None]:
        """The run's tool set (`loaded`: the deferred tools its session loaded before;
        `adjust`: what applies `tools.*` to tools made for one run) and its link to the hub
        (None without MCP servers)."""
        if hub is None:
            return RunTools(
                tools,
                None,
                defer_threshold=policies.defer_threshold,
                loaded=loaded,
                adjust=adjust,
            ), None
        reserved = tuple(tools.names())
        held = self._held
        if held is not None and held[0] is hub and held[1] is policies.mcp and held[2] == reserved:
            mcp = held[3]  # its tools are rebuilt only when the hub's set changed
        else:
            mcp = McpTools(hub, policies.mcp, reserved=reserved)
            self._held = (hub, policies.mcp, reserved, mcp)
        run_tools = RunTools(
            tools, mcp, defer_threshold=policies.defer_threshold, loaded=loaded, adjust=adjust
        )
        link = McpRunLink(hub, run_tools, startup_timeout_s=policies.mcp.startup_timeout_ms / 1000)
        return run_tools, link


def build_system_prompt(
    tools: ToolRegistry | RunTools,
    *,
    skills: SkillSource | None,
    source: ContextSource,
    instructions: list[InstructionDoc],
    memory: str,
    persona: str,
    board: str,
) -> list[SystemPart]:
    """The system prompt of a run with these tools (PROMPT-1); deferred MCP tools are listed
    by name and one line; the skills' catalogue joins it when the run may load a skill,
    `persona` (the agent definition's section) after the tools and `board` (the session's
    task graphs) before the environment."""
    registry = tools.registry if isinstance(tools, RunTools) else tools
    catalogue = ""
    if skills is not None and registry.get("load_skill") is not None:
        catalogue = skills_catalogue_text(skills, DEFAULT_CATALOGUE_TOKENS)
    parts = assemble_system_prompt(
        skills=catalogue,
        tools=tools.catalogue() if isinstance(tools, RunTools) else tools.specs(),
        instructions=instructions,
        environment=source.environment(),
        memory=memory,
    )
    if persona:  # the agent definition's section, in the stable prefix (AGT-1)
        at = next((i for i, p in enumerate(parts) if p.label == "tools"), 0) + 1
        parts.insert(at, SystemPart(label="agent", text=persona))
    if board:  # the session's task graphs (TASK-2), before the environment
        parts.insert(len(parts) - 1, SystemPart(label="tasks", text=board, stable=False))
    return parts


def instruction_chain(
    source: ContextSource,
    folders: FolderInstructions | None,
    *,
    budget: int,
    counter: TokenCounter | None,
) -> list[InstructionDoc]:
    """Home, project, then the loaded folders' files (PROMPT-2), cut to fit `budget` tokens,
    least specific first."""
    docs = [*source.instructions(), *(folders.docs if folders else ())]
    count = counter.count if counter is not None else approx_tokens
    return fit_instructions(docs, budget, count)


_SYSTEM_TEXTS_MAX = 16
_SYSTEM_TEXTS: dict[
    tuple[tuple[int, ...], int], tuple[tuple[SystemPart, ...], list[ToolSpec], str]
] = {}
"""`system_text` by the ids of the parts and of the request's spec list (kept alive with the
text, so the ids stay theirs; both are frozen or never changed): runs of one runtime share
their stable parts and, without memories or tasks, the whole prompt."""


def system_text(system: Sequence[SystemPart], tools: RunTools) -> str:
    """What the model is sent before the messages: the system parts and the tool schemas the
    request carries (deferred tools only by their line in the system prompt)."""
    specs = tools.request_specs()
    key = (tuple(map(id, system)), id(specs))
    hit = _SYSTEM_TEXTS.get(key)
    if hit is not None:
        return hit[2]
    text = "\n\n".join([p.text for p in system]) + tools_text(specs)
    if len(_SYSTEM_TEXTS) >= _SYSTEM_TEXTS_MAX:
        _SYSTEM_TEXTS.clear()
    _SYSTEM_TEXTS[key] = (tuple(system), specs, text)
    return text


def context_window(
    ports: RunPorts,
    compact: CompactConfig,
    budget: ContextBudget,
    calibration: ProviderCalibration,
    *,
    system: list[SystemPart],
    tools: RunTools,
    todos: Callable[[], str],
) -> ContextWindow:
    """The context window of a run whose system prompt is `system` and tools `tools`: it
    counts them against `budget` and compacts with the compaction model (or the run's)."""
    return ContextWindow(
        counter=ports.token_counter,
        budget=budget,
        compact=compact,
        summarizer=Summarizer(
            ports.compact_provider or ports.provider, max_summary_tokens=budget.max_summary
        ),
        calibration=calibration,
        system_text=system_text(system, tools),
        instructions="\n\n".join([p.text for p in system if p.label == "instructions"]),
        todos=todos,
        new_id=lambda: ports.ids.new_id("msg"),
    )
