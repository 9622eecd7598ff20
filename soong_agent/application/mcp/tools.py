"""MCP tools in a run (MCP-1): `RunTools`, one run's changing tool set; each server tool as a
`Tool` is `McpTools`'s work (`mcp.server_tools`).

Before each model call `RunTools.refresh` picks up servers that became ready and lists that
changed (the hub's generation). Past `tools.defer_threshold` tools in all, MCP tools are
deferred: the system prompt lists them by name and one line, the request carries only the ones
loaded through the `tool_search` tool (and every tool that is not MCP); loaded names are kept
for the rest of the run and found again on resume (every `tool_search` and MCP call of the
session's stored messages, compacted ones included).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from soong_agent.application.mcp.server_tools import PREFIX, McpTools, mcp_tool_name
from soong_agent.application.tools.base import Tool, ToolContext, ToolOutput, ToolRegistry
from soong_agent.domain.prompt import DEFERRED
from soong_agent.ports.defaults import no_items
from soong_agent.ports.messages import Message
from soong_agent.ports.model import ToolSpec

__all__ = ["PREFIX", "TOOL_SEARCH", "McpTools", "RunTools", "loaded_in", "mcp_tool_name"]

TOOL_SEARCH = "tool_search"


class _SearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    names: list[str] = Field(
        default_factory=no_items, description="Exact tool names to load (from the catalogue)."
    )
    query: str = Field(default="", description="Words to look for in tool names and descriptions.")


def loaded_in(messages: Sequence[Message]) -> set[str]:
    """Tool names a session already loaded: those `tool_search` returned, and every MCP tool
    it called."""
    names: set[str] = set()
    for message in messages:
        for call in message.tool_calls:
            if call.name.startswith(PREFIX):
                names.add(call.name)
        for result in message.tool_results:
            if result.name == TOOL_SEARCH and not result.is_error:
                names.update(_LOADED_LINE.findall(result.content))
    return names


_LOADED_LINE = re.compile(r"^## (\S+)$", re.MULTILINE)


_VIEWS_MAX = 256
_VIEWS: dict[tuple[int, frozenset[str]], tuple[list[ToolSpec], list[ToolSpec], list[ToolSpec]]] = {}
"""`_views` by the id of a run's spec list and the names hidden (the list is kept alive with
them, so its id stays its own)."""


def _views(specs: list[ToolSpec], hidden: frozenset[str]) -> tuple[list[ToolSpec], list[ToolSpec]]:
    """What the system prompt lists (every tool, the `hidden` ones marked deferred) and what
    the request carries (every tool but the hidden ones), remembered per spec list: the specs
    of a runtime's runs are the same list (`ToolRegistry.specs`), so both are built once per
    tool set, not per run. Nobody may change the lists."""
    key = (id(specs), hidden)
    hit = _VIEWS.get(key)
    if hit is not None:
        return hit[1], hit[2]
    catalogue = [
        ToolSpec(s.name, DEFERRED + s.description, {}) if s.name in hidden else s for s in specs
    ]
    request = [s for s in specs if s.name not in hidden] if hidden else specs
    if len(_VIEWS) >= _VIEWS_MAX:
        _VIEWS.clear()
    _VIEWS[key] = (specs, catalogue, request)
    return catalogue, request


class RunTools:
    """One run's tools: the fixed ones, the MCP ones as they come and go, deferral."""

    def __init__(
        self,
        registry: ToolRegistry,
        mcp: McpTools | None,
        *,
        defer_threshold: int,
        loaded: Iterable[str] = (),
        adjust: Callable[[list[Tool]], list[Tool]] | None = None,
    ) -> None:
        """`adjust`: `tools.disabled` / `tools.overrides` for the tools made here
        (`tool_search`): without `tool_search` nothing is deferred."""
        self.registry = registry
        self._fixed = registry.extended(())  # a copy: `registry` gets the arranged set
        self._mcp = mcp
        self._threshold = defer_threshold
        self._seen = -2
        self.loaded: set[str] = set(loaded)
        self.deferred: set[str] = set()
        self._hidden_kept: tuple[object, int, frozenset[str]] = (None, 0, frozenset())
        made = self._search_tool()
        self._search = made if adjust is None else next(iter(adjust([made])), None)
        self._arrange([])

    def refresh(self) -> bool:
        """Take in what changed on the hub since the last call; True when the set changed."""
        if self._mcp is None or self._mcp.generation == self._seen:
            return False
        self._seen = self._mcp.generation
        self._arrange(self._mcp.tools())
        return True

    def _arrange(self, mcp_tools: list[Tool]) -> None:
        """The registry: the fixed tools, `tool_search` when some are deferred, the MCP ones.
        Past the threshold, every deferrable tool is deferred."""
        fixed = self._fixed
        optional = fixed.deferrable_names()
        if mcp_tools:
            optional = optional.union(t.name for t in mcp_tools)
        search = self._search
        defer = (
            search is not None
            and bool(optional)
            and len(fixed.names()) + len(mcp_tools) > self._threshold
        )
        self.deferred = set(optional) if defer else set()
        extra = [search] if defer and search is not None else []
        self.registry.replace_all(fixed.extended([*extra, *mcp_tools]))

    @property
    def warnings(self) -> list[str]:
        return self._mcp.warnings if self._mcp is not None else []

    def _hidden(self) -> frozenset[str]:
        """The deferred tools not loaded (yet): asked before every model call, so the last
        answer is kept while the deferred set is the same and nothing more was loaded
        (`loaded` only grows; `_arrange` makes a new deferred set)."""
        if not self.deferred:
            return frozenset()
        deferred, count, hidden = self._hidden_kept
        if deferred is not self.deferred or count != len(self.loaded):
            hidden = frozenset(self.deferred - self.loaded)
            self._hidden_kept = (self.deferred, len(self.loaded), hidden)
        return hidden

    def request_specs(self) -> list[ToolSpec]:
        """What the model request carries: every tool but the deferred ones not loaded."""
        return _views(self.registry.specs(), self._hidden())[1]

    def catalogue(self) -> list[ToolSpec]:
        """What the system prompt lists: every tool, deferred ones marked."""
        return _views(self.registry.specs(), self._hidden())[0]

    def _search_tool(self) -> Tool:
        async def search(args: BaseModel, ctx: ToolContext) -> ToolOutput:
            assert isinstance(args, _SearchArgs)
            specs = {s.name: s for s in self.registry.specs() if s.name in self.deferred}
            wanted = [n for n in args.names if n in specs]
            unknown = [n for n in args.names if n not in specs]
            words = args.query.lower().split()
            if words:
                for name, spec in specs.items():
                    text = f"{name} {spec.description}".lower()
                    if all(w in text for w in words) and name not in wanted:
                        wanted.append(name)
            if not wanted:
                known = ", ".join(sorted(specs)[:50]) or "none"
                return ToolOutput(
                    "no deferred tool matches"
                    + (f" (unknown: {', '.join(unknown)})" if unknown else "")
                    + f"; deferred tools: {known}",
                    is_error=True,
                )
            self.loaded.update(wanted)
            blocks = [
                f"## {name}\n{specs[name].description}\n"
                + json.dumps(specs[name].parameters, ensure_ascii=False)
                for name in wanted
            ]
            note = f"\n(not deferred tools: {', '.join(unknown)})" if unknown else ""
            return ToolOutput(
                "Loaded; these tools can be called from your next step:\n\n"
                + "\n\n".join(blocks)
                + note
            )

        return Tool(
            TOOL_SEARCH,
            "Load deferred tools (listed in the system prompt by name only) so they can be "
            "called: give exact `names`, or a `query` to look for in names and descriptions. "
            "Returns their full schemas.",
            _SearchArgs,
            search,
        )
