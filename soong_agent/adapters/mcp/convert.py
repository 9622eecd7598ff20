"""The `mcp` SDK's types turned into the port's plain data; nothing of the SDK goes further."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types as types

from soong_agent.ports.mcp import McpCallResult, McpContent, McpResource, McpTool


def tool(server: str, sdk_tool: types.Tool) -> McpTool:
    """One listed tool; `read_only` is the server's `readOnlyHint` when it gave one."""
    annotations = sdk_tool.annotations
    return McpTool(
        server=server,
        name=sdk_tool.name,
        description=sdk_tool.description or "",
        input_schema=dict(sdk_tool.input_schema),
        read_only=annotations.read_only_hint if annotations is not None else None,
    )


def content(block: object) -> McpContent:
    """One block of a tool result: text, image, audio, an embedded resource or a link to one.

    A block of a kind this version does not know becomes a text block saying so, never an
    exception (the call itself succeeded).
    """
    if isinstance(block, types.TextContent):
        return McpContent(kind="text", text=block.text)
    if isinstance(block, types.ImageContent):
        return McpContent(kind="image", data=block.data, mime_type=block.mime_type)
    if isinstance(block, types.AudioContent):
        return McpContent(kind="audio", data=block.data, mime_type=block.mime_type)
    if isinstance(block, types.EmbeddedResource):
        return resource_contents(block.resource)
    if isinstance(block, types.ResourceLink):
        return McpContent(kind="resource", uri=str(block.uri), mime_type=block.mime_type)
    kind = getattr(block, "type", type(block).__name__)
    return McpContent(kind="text", text=f"[content of type {kind!r} is not supported]")


def resource_contents(item: object) -> McpContent:
    """A resource's contents: its text when it is text, else its base64 `data`."""
    if isinstance(item, types.TextResourceContents):
        return McpContent(
            kind="resource", uri=str(item.uri), text=item.text, mime_type=item.mime_type
        )
    if isinstance(item, types.BlobResourceContents):
        return McpContent(
            kind="resource", uri=str(item.uri), data=item.blob, mime_type=item.mime_type
        )
    uri = getattr(item, "uri", None)
    return McpContent(kind="resource", uri=None if uri is None else str(uri))


def call_result(result: types.CallToolResult) -> McpCallResult:
    """A tool's result; `is_error` is the server's `isError`."""
    structured: Mapping[str, Any] | None = result.structured_content
    return McpCallResult(
        content=tuple(content(block) for block in result.content),
        is_error=bool(result.is_error),
        structured=dict(structured) if structured is not None else None,
    )


def read_result(result: types.ReadResourceResult) -> McpCallResult:
    """A read resource, as a result of resource blocks."""
    return McpCallResult(content=tuple(resource_contents(item) for item in result.contents))


def resource(server: str, sdk_resource: types.Resource) -> McpResource:
    """One listed resource."""
    return McpResource(
        server=server,
        uri=str(sdk_resource.uri),
        name=sdk_resource.name,
        description=sdk_resource.description or "",
        mime_type=sdk_resource.mime_type,
    )
