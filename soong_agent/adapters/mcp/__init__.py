"""MCP servers over the `mcp` SDK (MCP-1): `load_mcp_servers` reads `${home}/mcp.json`,
`SdkMcpHub` runs the servers behind the `McpHub` port.

Nothing of the SDK leaves this package. `SdkMcpHub` is imported lazily, so reading the config
does not import the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from soong_agent.adapters.mcp.config import load_mcp_servers, parse_mcp_servers

if TYPE_CHECKING:
    from soong_agent.adapters.mcp.hub import SdkMcpHub
    from soong_agent.adapters.mcp.state import RestartPolicy

__all__ = ["RestartPolicy", "SdkMcpHub", "load_mcp_servers", "parse_mcp_servers"]


def __getattr__(name: str) -> Any:
    if name == "SdkMcpHub":
        from soong_agent.adapters.mcp.hub import SdkMcpHub

        return SdkMcpHub
    if name == "RestartPolicy":
        from soong_agent.adapters.mcp.state import RestartPolicy

        return RestartPolicy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
