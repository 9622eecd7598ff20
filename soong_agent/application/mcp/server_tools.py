"""Each MCP server tool as a `Tool` (MCP-1): `McpTools` turns the hub's tools into `Tool`s
named ``mcp__<server>__<tool>``.

The server's input schema is what the model sees (made acceptable to every provider: an object
schema), the server checks the arguments, the result's text, images and resources become the
tool result, and `isError` makes it an error result. `tools.mcp.disabled_tools` (with ``*``
globs) and `tool_overrides` (rename, description, permission class, per-call timeout) apply; a
server with resources gets ``mcp__<server>__list_resources`` and ``…__read_resource``. MCP calls
go through the same permission gate and hooks as every tool: they are ordinary `Tool`s. An MCP
tool asks before it runs (class ``exec``) unless an override says otherwise: the server's own
read-only hint is not trusted for permissions.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from soong_agent.application.tools.base import Tool, ToolContext, ToolOutput
from soong_agent.domain.config.schema import McpToolsConfig
from soong_agent.ports.mcp import McpCallResult, McpError, McpHub, McpTool

__all__ = [
    "PREFIX",
    "McpArguments",
    "McpTools",
    "mcp_tool_name",
    "provider_schema",
    "result_text",
]

PREFIX = "mcp__"
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


def _failed(server: str, exc: Exception) -> str:
    """An MCP failure as the model reads it: naming the server once."""
    text = str(exc)
    named = f"mcp server {server!r}"
    if text.lower().startswith(named):
        return f"MCP server {server!r}{text[len(named) :]}"
    return f"MCP server {server!r}: {text}"
