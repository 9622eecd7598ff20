"""MCP over streamable HTTP and SSE through the installed CLI (MCP-1, MCP-2), against the
Python MCP server of `tests/support/mcp_servers/http_server.py` (no Node.js): the model calls
a tool of it, then the server dies in the middle of a call; the run gets an error result that
names the server and finishes, and the user sees one line about it, never a traceback."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response, tool_call_response
from tests.support.mcp_servers.python_http import Transport, python_server

pytestmark = pytest.mark.e2e

@pytest.mark.parametrize("transport", ["http", "sse"])
def test_a_server_that_dies_mid_call_is_an_error_result_and_no_traceback(
    world: CliWorld, transport: Transport
) -> None:
    with python_server(transport) as server:
        servers = {"py": {"transport": transport, "url": server.url}}
        (world.home / "mcp.json").write_text(json.dumps({"mcp_servers": servers}), "utf-8")
        config = world.home / "config.toml"
        world.write_config(
            config.read_text(encoding="utf-8") + '[permissions]\nallow = ["mcp__py__*"]\n'
        )
        world.server.enqueue(
            tool_call_response([("c1", "mcp__py__echo", json.dumps({"text": "hello mcp"}))]),
            tool_call_response([("c2", "mcp__py__crash", "{}")]),
            text_response("the server went away"),
        )
        done = world.run("run", "use the server")
        assert server.process.wait(timeout=10) == 5  # it died in the middle of the call
    assert done.returncode == 0, done.stderr
    assert "the server went away" in done.stdout
    assert "mcp py: ready (10 tools" in done.stderr and "  ✓ hello mcp" in done.stderr
    assert "  ✗ MCP server 'py' stopped during call tool 'crash'" in done.stderr
    sent = world.server.requests[2].json["messages"]
    results = [m["content"] for m in sent if m["role"] == "tool"]
    assert results[0] == "hello mcp" and "'py' stopped during call tool 'crash'" in results[1]
    assert "Traceback" not in done.stderr + done.stdout
