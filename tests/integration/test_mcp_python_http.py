"""The streamable-HTTP and SSE transports (MCP-1) against a Python MCP server: the `mcp` SDK's
own MCPServer app served by uvicorn on loopback, in a subprocess (`http_server.py`). Nothing
here needs Node.js, so the network transports are verified wherever the Python dependencies
are installed, not only where npm's reference server happens to be.

The hub lists the server's tools, calls one, hands back a result the server marks as an error,
and, when the server goes away in the middle of a call, reports that call and every later one
as an `McpError` naming the server (never a hang or a crash). Through the SDK the same failure
is an error result of the run, and the run goes on.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest

from soong_agent import AgentRuntime, ApprovalRequest
from soong_agent.adapters.mcp import RestartPolicy, SdkMcpHub
from soong_agent.ports.approval import Decision
from soong_agent.ports.mcp import McpError, McpServerSpec, ServerHealth
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config
from tests.support.mcp_servers.python_http import (
    START_TIMEOUT_S,
    PythonServer,
    Transport,
    python_server,
)

TRANSPORTS: list[Transport] = ["http", "sse"]


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> Transport:
    chosen: Transport = request.param
    return chosen


@pytest.fixture
def server(transport: Transport) -> Iterator[PythonServer]:
    with python_server(transport) as running:
        yield running


@pytest.fixture
async def hub(server: PythonServer, transport: Transport) -> AsyncIterator[SdkMcpHub]:
    made = SdkMcpHub(
        [McpServerSpec("py", transport, url=server.url, headers={"X-Token": "never-shown-7c1"})],
        startup_timeout_s=START_TIMEOUT_S,
        restart=RestartPolicy(max_attempts=2, initial_backoff_s=0.1),
    )
    try:
        yield made
    finally:
        with anyio.fail_after(30):
            await made.aclose()


def _health(hub: SdkMcpHub) -> ServerHealth:
    (health,) = hub.health()
    return health


async def _ready(hub: SdkMcpHub) -> None:
    hub.start()
    await hub.wait_ready(START_TIMEOUT_S)
    health = _health(hub)
    assert health.state == "ready", health


async def test_the_tools_are_listed_and_called(
    hub: SdkMcpHub, transport: Transport, server: PythonServer
) -> None:
    await _ready(hub)
    health = _health(hub)
    assert (health.transport, health.tool_count, health.version) == (transport, 10, "1.2.3")
    tools = {tool.name: tool for tool in hub.tools()}
    assert {"echo", "add", "fail", "slow", "crash"} <= set(tools)
    assert all(tool.server == "py" for tool in tools.values())
    assert tools["add"].read_only is True and tools["echo"].read_only is not True
    assert set(tools["add"].input_schema["properties"]) == {"a", "b"}

    echo = await hub.call_tool("py", "echo", {"text": "over the wire ✓"}, timeout_s=10)
    assert not echo.is_error and echo.content[0].text == "over the wire ✓"
    added = await hub.call_tool("py", "add", {"a": 2, "b": 40}, timeout_s=10)
    assert not added.is_error and added.structured == {"sum": 42}
    with pytest.raises(McpError, match="mcp server 'py' has no tool 'nope'"):
        await hub.call_tool("py", "nope", {}, timeout_s=10)
    assert server.process.poll() is None  # nothing of this hurt the server


async def test_a_result_the_server_marks_as_an_error_is_an_error_result(hub: SdkMcpHub) -> None:
    await _ready(hub)
    failed = await hub.call_tool("py", "fail", {}, timeout_s=10)
    assert failed.is_error and "it failed on purpose" in failed.content[0].text
    after = await hub.call_tool("py", "echo", {"text": "still here"}, timeout_s=10)
    assert not after.is_error and after.content[0].text == "still here"  # the session goes on


async def test_a_server_that_goes_away_mid_call_is_an_error_now_and_later(
    hub: SdkMcpHub, server: PythonServer
) -> None:
    heard: list[ServerHealth] = []
    hub.add_listener(heard.append)
    await _ready(hub)
    with anyio.fail_after(15), pytest.raises(McpError) as during:  # never waits out a timeout
        await hub.call_tool("py", "crash", {}, timeout_s=60)
    assert "mcp server 'py'" in str(during.value) and "'crash'" in str(during.value)
    assert server.process.wait(timeout=10) == 5  # it died in the middle of the request
    for _ in range(3):  # whether the hub is still noticing, restarting, or gave up
        with anyio.fail_after(15), pytest.raises(McpError, match="'py'"):
            await hub.call_tool("py", "echo", {"text": "anyone?"}, timeout_s=60)
    with anyio.fail_after(15):
        while _health(hub).state != "failed":
            await anyio.sleep(0.05)
    states = [h.state for h in heard]
    assert states[:3] == ["starting", "ready", "crashed"], states
    assert "restarting" in states  # it tried to come back before it gave up
    assert _health(hub).detail.startswith("gave up after 2 restarts: cannot reach http://127.0.0.1")
    assert hub.tools() == []
    shown = [repr(h) for h in heard] + [str(during.value)]
    assert not [text for text in shown if "never-shown-7c1" in text]


def _allow(request: ApprovalRequest) -> Decision:
    return "allow_once"


async def test_in_a_run_a_server_that_went_away_is_an_error_result_and_the_run_goes_on(
    tmp_path: Path, transport: Transport, server: PythonServer
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    write_minimal_config(home)
    servers = {"py": {"transport": transport, "url": server.url}}
    (home / "mcp.json").write_text(json.dumps({"mcp_servers": servers}), encoding="utf-8")
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("mcp__py__add", {"a": 1, "b": 2})),
            ScriptedResponse.tool_calls(("mcp__py__crash", {})),
            ScriptedResponse.tool_calls(("mcp__py__echo", {"text": "after"})),
            ScriptedResponse.text("the server is gone; carried on without it"),
        ]
    )
    async with AgentRuntime(project, home, _allow, model=model) as runtime:
        run = await runtime.run("use the python server")
        with anyio.fail_after(60):
            result = await run.wait()
        events = [e async for e in run.events()]
    assert result.status == "completed", result.reason
    assert result.output == "the server is gone; carried on without it"
    results = [e for e in events if e.type == "tool_result"]
    assert [(r.name, r.is_error) for r in results] == [
        ("mcp__py__add", False),
        ("mcp__py__crash", True),
        ("mcp__py__echo", True),
    ]
    assert '"sum": 3' in results[0].content
    assert "'py' stopped during call tool 'crash'" in results[1].content
    assert "MCP server 'py'" in results[2].content  # down, restarting or given up: said so
    assert server.process.wait(timeout=10) == 5
