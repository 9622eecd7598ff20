"""OAuth 2.1 for HTTP and SSE MCP servers (MCP-3), over the `mcp` SDK's client auth: the token
file of each server (`store.py`), the loopback redirect listener (`listener.py`) and the
`httpx2.Auth` a server's transport sends its requests through (`provider.py`)."""
