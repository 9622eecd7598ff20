"""MCP tools in a run (MCP-1): each server tool as a `Tool`, and the run's changing tool set.

`McpTools` turns the hub's tools into `Tool`s named ``mcp__<server>__<tool>``: the server's
input schema is what the model sees (made acceptable to every provider: an object schema), the
server checks the arguments, the result's text, images and resources become the tool result,
and `isError` makes it an error result. `tools.mcp.disabled_tools` (with ``*`` globs) and
`tool_overrides` (rename, description, permission class, per-call timeout) apply; a server
with resources gets ``mcp__<server>__list_resources`` and ``…__read_resource``. MCP calls go
through the same permission gate and hooks as every tool: they are ordinary `Tool`s. An MCP
tool asks before it runs (class ``exec``) unless an override says otherwise: the server's own
read-only hint is not trusted for permissions.

`RunTools` is one run's tool set. Before each model call `refresh` picks up servers that
became ready and lists that changed (the hub's generation). Past `tools.defer_threshold` tools
in all, MCP tools are deferred: the system prompt lists them by name and one line, the request
carries only the ones loaded through the `tool_search` tool (and every tool that is not MCP);
loaded names are kept for the rest of the run and found again on resume (every `tool_search`
and MCP call of the session's stored messages, compacted ones included).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from soong_agent.application.tools.base import Tool, ToolContext, ToolOutput, ToolRegistry
from soong_agent.domain.config.schema import McpToolsConfig
from soong_agent.domain.prompt import DEFERRED
from soong_agent.ports.defaults import no_items
from soong_agent.ports.mcp import McpCallResult, McpError, McpHub, McpTool
from soong_agent.ports.messages import Message
from soong_agent.ports.model import ToolSpec

PREFIX = "mcp__"
TOOL_SEARCH = "tool_search"
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
_NAME_MAX = 64
_LISTING_MAX = 100


def mcp_tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>`` with every character a provider refuses replaced by ``_``
    and cut to 64 characters."""
    return _UNSAFE.sub("_", f"{PREFIX}{server}__{tool}")[:_NAME_MAX]


def provider_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` as an object schema every provider accepts: ``type: object`` with
    ``properties`` (a missing one is empty), ``required`` a list, no ``$schema``."""
    out = {k: v for k, v in schema.items() if k != "$schema"}
    if out.get("type") != "object":
        out["type"] = "object"
    if not isinstance(out.get("properties"), dict):
        out["properties"] = {}
    required = out.get("required")
    if required is not None and not isinstance(required, list):
        out.pop("required")
    return out


class McpArguments(BaseModel):
    """Any JSON object: an MCP server checks its own arguments."""

    model_config = ConfigDict(extra="allow")


class _SearchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    names: list[str] = Field(
        default_factory=no_items, description="Exact tool names to load (from the catalogue)."
    )
    query: str = Field(default="", description="Words to look for in tool names and descriptions.")


class _ReadResourceArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    uri: str = Field(description="The resource's URI, as list_resources gives it.")


class _NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


def result_text(result: McpCallResult) -> str:
    """The text the model gets for an MCP result: each piece on its own, images and other
    binary content described (the model cannot read base64), structured content as JSON
    when there is no text."""
    parts: list[str] = []
    for piece in result.content:
        match piece.kind:
            case "text":
                parts.append(piece.text)
            case "image" | "audio":
                size = len(piece.data or "") * 3 // 4
                parts.append(f"[{piece.kind}: {piece.mime_type or 'unknown type'}, {size} bytes]")
            case "resource":
                head = f"[resource {piece.uri or ''}" + (
                    f" ({piece.mime_type})]" if piece.mime_type else "]"
                )
                parts.append(f"{head}\n{piece.text}" if piece.text else head)
    if not any(p.strip() for p in parts) and result.structured is not None:
        parts.append(json.dumps(result.structured, ensure_ascii=False, default=str))
    return "\n".join(parts) if parts else "(no content)"


class McpTools:
    """The hub's tools as `Tool`s, with the `[tools.mcp]` configuration applied."""

    def __init__(
        self, hub: McpHub, config: McpToolsConfig, *, reserved: Iterable[str] = ()
    ) -> None:
        self._hub = hub
        self._config = config
        self._reserved = set(reserved)
        self._built_at = -1
        self._tools: list[Tool] = []
        self.warnings: list[str] = []

    @property
    def hub(self) -> McpHub:
        return self._hub

    @property
    def generation(self) -> int:
        return self._hub.generation

    def tools(self) -> list[Tool]:
        """The current MCP tools (rebuilt only when the hub's generation changed)."""
        generation = self._hub.generation
        if generation != self._built_at:
            self._tools, self.warnings = self._build()
            self._built_at = generation
        return self._tools

    def _disabled(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in self._config.disabled_tools)

    def _build(self) -> tuple[list[Tool], list[str]]:
        tools: list[Tool] = []
        warnings: list[str] = []
        taken = set(self._reserved)
        for info in self._hub.tools():
            tool = self._tool(info)
            if self._disabled(mcp_tool_name(info.server, info.name)) or self._disabled(tool.name):
                continue
            if tool.name in taken:
                warnings.append(
                    f"MCP tool {info.name!r} of server {info.server!r} is named {tool.name!r}, "
                    "which is taken; it is left out"
                )
                continue
            taken.add(tool.name)
            tools.append(tool)
        for server in self._hub.servers:
            if self._hub.has_resources(server):
                for extra in self._resource_tools(server):
                    if extra.name not in taken and not self._disabled(extra.name):
                        taken.add(extra.name)
                        tools.append(extra)
        return tools, warnings

    def _tool(self, info: McpTool) -> Tool:
        full = mcp_tool_name(info.server, info.name)
        override = self._config.tool_overrides.get(full)
        timeout_ms = self._config.call_timeout_ms
        description = info.description.strip() or f"{info.name} (MCP server {info.server})"
        permission: Any = "exec"
        name = full
        if override is not None:
            name = override.name or full
            description = override.description or description
            permission = override.permission_class or permission
            timeout_ms = override.timeout_ms or timeout_ms
        hub, server, tool = self._hub, info.server, info.name

        async def handler(args: BaseModel, ctx: ToolContext) -> ToolOutput:
            arguments = args.model_dump(mode="json")
            try:
                result = await hub.call_tool(server, tool, arguments, timeout_s=timeout_ms / 1000)
            except McpError as exc:
                return ToolOutput(_failed(server, exc), is_error=True)
            return ToolOutput(result_text(result), is_error=result.is_error)

        def describe(args: BaseModel, ctx: ToolContext) -> tuple[str, str]:
            shown = json.dumps(args.model_dump(mode="json"), ensure_ascii=False)
            return "*", f"{server}: {tool} {shown[:100]}"

        return Tool(
            name=name,
            description=description,
            args_model=McpArguments,
            handler=handler,
            permission_class=permission,
            describe=describe,
            timeout_ms=timeout_ms,
            parameters=provider_schema(info.input_schema),
        )

    def _resource_tools(self, server: str) -> list[Tool]:
        hub, timeout_s = self._hub, self._config.call_timeout_ms / 1000

        async def listing(args: BaseModel, ctx: ToolContext) -> ToolOutput:
            try:
                found = await hub.list_resources(server, timeout_s=timeout_s)
            except McpError as exc:
                return ToolOutput(_failed(server, exc), is_error=True)
            if not found:
                return ToolOutput("no resources")
            lines = [
                f"{r.uri}  {r.name}" + (f" — {r.description}" if r.description else "")
                for r in found[:_LISTING_MAX]
            ]
            if len(found) > _LISTING_MAX:
                lines.append(f"[… {len(found) - _LISTING_MAX} more]")
            return ToolOutput("\n".join(lines))

        async def reading(args: BaseModel, ctx: ToolContext) -> ToolOutput:
            assert isinstance(args, _ReadResourceArgs)
            try:
                result = await hub.read_resource(server, args.uri, timeout_s=timeout_s)
            except McpError as exc:
                return ToolOutput(_failed(server, exc), is_error=True)
            return ToolOutput(result_text(result), is_error=result.is_error)

        return [
            Tool(
                mcp_tool_name(server, "list_resources"),
                f"List the resources MCP server {server!r} offers (URI, name, description).",
                _NoArgs,
                listing,
            ),
            Tool(
                mcp_tool_name(server, "read_resource"),
                f"Read one resource of MCP server {server!r} by its URI.",
                _ReadResourceArgs,
                reading,
            ),
        ]


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


def _failed(server: str, exc: Exception) -> str:
    """An MCP failure as the model reads it: naming the server once."""
    text = str(exc)
    named = f"mcp server {server!r}"
    if text.lower().startswith(named):
        return f"MCP server {server!r}{text[len(named) :]}"
    return f"MCP server {server!r}: {text}"


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
