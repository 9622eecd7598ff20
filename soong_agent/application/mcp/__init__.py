"""MCP servers in runs (MCP-1, MCP-2): their tools, deferral behind tool_search, health."""
