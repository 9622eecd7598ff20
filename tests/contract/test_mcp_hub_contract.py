"""The McpHub contract: the scripted fake (`ScriptedMcpHub`) and `SdkMcpHub` over real stdio
servers — an `mcp` SDK server (tests/support/mcp_servers/contract_server.py) and the tiny line
server in its misbehaving modes.

Each test names the servers it needs from one scenario; the fake is told what they do, the real
hub finds out by running them. Both must then behave the same through the port.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from soong_agent.adapters.mcp import SdkMcpHub
from soong_agent.ports.mcp import (
    McpCallResult,
    McpContent,
    McpError,
    McpHub,
    McpResource,
    McpTool,
    ServerHealth,
)
from soong_agent.testing import ScriptedMcpHub, ScriptedMcpServer
from tests.support.mcp_servers import contract_spec, line_spec

OBJECT = {"type": "object"}


def _fake_servers(hub_ref: list[ScriptedMcpHub]) -> dict[str, ScriptedMcpServer]:
    """What the real servers of the scenario do, declared."""

    async def slow(arguments: Mapping[str, Any]) -> McpCallResult:
        await anyio.sleep(float(arguments["seconds"]))
        return McpCallResult(content=(McpContent(kind="text", text="done"),))

    def grow(_arguments: Mapping[str, Any]) -> McpCallResult:
        hub_ref[0].set_tools(
            "contract", [*CONTRACT_TOOLS, McpTool("contract", "extra", "", OBJECT)]
        )
        return McpCallResult(content=(McpContent(kind="text", text="grown"),))

    return {
        "contract": ScriptedMcpServer(
            "contract",
            tools=CONTRACT_TOOLS,
            results={
                "echo": lambda arguments: McpCallResult(
                    content=(McpContent(kind="text", text=str(arguments["text"])),),
                    structured={"result": arguments["text"]},
                ),
                "add": McpCallResult(
                    content=(McpContent(kind="text", text='{\n  "sum": 3\n}'),),
                    structured={"sum": 3},
                ),
                "fail": McpCallResult(
                    content=(McpContent(kind="text", text="it failed on purpose"),), is_error=True
                ),
                "image": McpCallResult(
                    content=(McpContent(kind="image", data="iVBORw0K", mime_type="image/png"),)
                ),
                "slow": slow,
                "grow": grow,
            },
            resources=[
                McpResource("contract", "memo://greeting", "greeting", "A greeting", "text/plain"),
                McpResource(
                    "contract", "memo://blob", "blob", "Two bytes", "application/octet-stream"
                ),
            ],
            contents={
                "memo://greeting": McpCallResult(
                    content=(
                        McpContent(
                            kind="resource",
                            uri="memo://greeting",
                            text="hello",
                            mime_type="text/plain",
                        ),
                    )
                )
            },
        ),
        "plain": ScriptedMcpServer("plain", tools=["ping"]),
        "broken": ScriptedMcpServer(
            "broken", state="failed", detail="exited with code 3 during start-up: giving up"
        ),
        "slow": ScriptedMcpServer("slow", tools=["ping"], delay_s=5.0),
    }


CONTRACT_TOOLS = [
    McpTool("contract", "echo", "Echo the text back", OBJECT),
    McpTool("contract", "add", "Add two numbers", OBJECT, read_only=True),
    McpTool("contract", "slow", "Sleep, then answer", OBJECT),
    McpTool("contract", "fail", "Always fails", OBJECT),
    McpTool("contract", "image", "A tiny image", OBJECT),
    McpTool("contract", "audio", "A tiny sound", OBJECT),
    McpTool("contract", "embedded", "An embedded resource", OBJECT),
    McpTool("contract", "link", "A link to a resource", OBJECT),
    McpTool("contract", "grow", "Adds the tool `extra`", OBJECT),
    McpTool("contract", "crash", "Exits the server", OBJECT),
]


def _real_specs() -> dict[str, Any]:
    return {
        "contract": contract_spec("contract"),
        "plain": line_spec("plain", "ok"),
        "broken": line_spec("broken", "exit"),
        "slow": line_spec("slow", "slow-start", "5"),
    }


STARTUP_S = 10.0
"""Start-up timeout of the hubs of these tests: generous, a busy CI machine starts Python
servers slowly; the test of the timeout itself sets a short one."""


@dataclass
class Kit:
    make: Callable[..., McpHub]


@pytest.fixture(params=["scripted", "sdk"])
async def kit(request: pytest.FixtureRequest) -> AsyncIterator[Kit]:
    made: list[McpHub] = []

    def scripted(names: Sequence[str], startup_timeout_s: float = STARTUP_S) -> McpHub:
        ref: list[ScriptedMcpHub] = []
        declared = _fake_servers(ref)
        hub = ScriptedMcpHub(
            [declared[name] for name in names], startup_timeout_s=startup_timeout_s
        )
        ref.append(hub)
        made.append(hub)
        return hub

    def sdk(names: Sequence[str], startup_timeout_s: float = STARTUP_S) -> McpHub:
        specs = _real_specs()
        hub = SdkMcpHub([specs[name] for name in names], startup_timeout_s=startup_timeout_s)
        made.append(hub)
        return hub

    yield Kit(scripted if request.param == "scripted" else sdk)
    for hub in made:
        with anyio.fail_after(20):
            await hub.aclose()


async def _started(kit: Kit, *names: str, wait_s: float = 15.0) -> McpHub:
    hub = kit.make(names)
    hub.start()
    await hub.wait_ready(wait_s)
    return hub


def _state(hub: McpHub, server: str) -> ServerHealth:
    return next(h for h in hub.health() if h.server == server)


async def test_implements_the_port_and_nothing_runs_before_start(kit: Kit) -> None:
    hub = kit.make(["contract", "plain"])
    assert isinstance(hub, McpHub)
    assert list(hub.servers) == ["contract", "plain"]
    assert [(h.server, h.state) for h in hub.health()] == [
        ("contract", "stopped"),
        ("plain", "stopped"),
    ]
    assert hub.tools() == []
    with pytest.raises(McpError, match="not started"):
        await hub.call_tool("plain", "ping", {}, timeout_s=1)


async def test_ready_servers_list_their_tools_in_order(kit: Kit) -> None:
    hub = await _started(kit, "contract", "plain")
    assert [h.state for h in hub.health()] == ["ready", "ready"]
    contract = _state(hub, "contract")
    assert contract.tool_count == len(CONTRACT_TOOLS)
    assert contract.version is not None and not contract.from_cache
    tools = hub.tools()
    assert [(t.server, t.name) for t in tools] == [
        *(("contract", t.name) for t in CONTRACT_TOOLS),
        ("plain", "ping"),
    ]
    by_name = {t.name: t for t in tools}
    assert by_name["add"].read_only is True
    assert by_name["echo"].description == "Echo the text back"
    assert by_name["echo"].input_schema["type"] == "object"
    assert hub.generation > 0


async def test_calls_return_text_structured_errors_and_images(kit: Kit) -> None:
    hub = await _started(kit, "contract")
    echo = await hub.call_tool("contract", "echo", {"text": "hi"}, timeout_s=10)
    assert echo.content == (McpContent(kind="text", text="hi"),)
    assert not echo.is_error
    added = await hub.call_tool("contract", "add", {"a": 1, "b": 2}, timeout_s=10)
    assert added.structured == {"sum": 3}
    failed = await hub.call_tool("contract", "fail", {}, timeout_s=10)
    assert failed.is_error
    assert "it failed on purpose" in failed.content[0].text
    image = await hub.call_tool("contract", "image", {}, timeout_s=10)
    assert (image.content[0].kind, image.content[0].mime_type) == ("image", "image/png")
    assert image.content[0].data


async def test_unknown_server_and_unknown_tool_are_errors(kit: Kit) -> None:
    hub = await _started(kit, "plain")
    with pytest.raises(McpError, match="no mcp server 'nope'"):
        await hub.call_tool("nope", "ping", {}, timeout_s=1)
    with pytest.raises(McpError, match="has no tool 'nope'"):
        await hub.call_tool("plain", "nope", {}, timeout_s=1)


async def test_a_server_that_cannot_start_is_failed_and_its_calls_say_so(kit: Kit) -> None:
    hub = await _started(kit, "broken", "plain")
    broken = _state(hub, "broken")
    assert broken.state == "failed"
    assert "exited with code 3" in broken.detail
    assert [t.server for t in hub.tools()] == ["plain"]
    with pytest.raises(McpError, match="'broken' failed: exited with code 3"):
        await hub.call_tool("broken", "ping", {}, timeout_s=1)
    assert (await hub.call_tool("plain", "ping", {}, timeout_s=5)).content


async def test_a_call_that_hangs_times_out_and_the_server_stays_usable(kit: Kit) -> None:
    hub = await _started(kit, "contract")
    started = time.monotonic()
    with pytest.raises(McpError, match=r"did not finish within 0\.5 s"):
        await hub.call_tool("contract", "slow", {"seconds": 30}, timeout_s=0.5)
    assert time.monotonic() - started < 3
    again = await hub.call_tool("contract", "echo", {"text": "still here"}, timeout_s=10)
    assert again.content[0].text == "still here"
    assert _state(hub, "contract").state == "ready"


async def test_a_changed_tool_list_is_fetched_again(kit: Kit) -> None:
    hub = await _started(kit, "contract")
    before = hub.generation
    await hub.call_tool("contract", "grow", {}, timeout_s=10)
    with anyio.fail_after(5):
        while "extra" not in [t.name for t in hub.tools()]:
            await anyio.sleep(0.02)
    assert hub.generation > before
    assert _state(hub, "contract").tool_count == len(CONTRACT_TOOLS) + 1


async def test_listeners_hear_every_change_until_removed(kit: Kit) -> None:
    hub = kit.make(["plain"])
    heard: list[tuple[str, str]] = []
    remove = hub.add_listener(lambda h: heard.append((h.server, h.state)))
    hub.start()
    await hub.wait_ready(10)
    assert heard == [("plain", "starting"), ("plain", "ready")]
    remove()
    remove()
    await hub.aclose()
    assert heard == [("plain", "starting"), ("plain", "ready")]


async def test_resources_are_listed_and_read(kit: Kit) -> None:
    hub = await _started(kit, "contract", "plain")
    assert hub.has_resources("contract")
    assert not hub.has_resources("plain")
    assert not hub.has_resources("nope")
    listed = await hub.list_resources("contract", timeout_s=10)
    assert [r.uri for r in listed] == ["memo://greeting", "memo://blob"]
    assert listed[0] == McpResource(
        "contract", "memo://greeting", "greeting", "A greeting", "text/plain"
    )
    read = await hub.read_resource("contract", "memo://greeting", timeout_s=10)
    assert read.content == (
        McpContent(kind="resource", uri="memo://greeting", text="hello", mime_type="text/plain"),
    )
    with pytest.raises(McpError, match="offers no resources"):
        await hub.list_resources("plain", timeout_s=5)
    with pytest.raises(McpError, match="offers no resources"):
        await hub.read_resource("plain", "memo://x", timeout_s=5)


async def test_wait_ready_honours_its_timeout_and_a_slow_server_holds_nobody_back(
    kit: Kit,
) -> None:
    hub = kit.make(["slow", "plain"], startup_timeout_s=2.0)
    hub.start()
    hub.start()  # idempotent
    started = time.monotonic()
    await hub.wait_ready(0.5)
    assert time.monotonic() - started < 2
    while _state(hub, "plain").state == "starting" and time.monotonic() - started < 1.8:
        await asyncio.sleep(0.02)  # a busy machine starts even the small server slowly
    assert [h.state for h in hub.health()] == ["starting", "ready"]
    assert [t.server for t in hub.tools()] == ["plain"]
    # a call waits for a server still starting, up to the start-up timeout (2 s here)
    with pytest.raises(McpError, match="'slow' failed: no answer to initialize within 2 s"):
        await hub.call_tool("slow", "ping", {}, timeout_s=1)
    assert time.monotonic() - started < 4
    assert _state(hub, "slow").state == "failed"


async def test_aclose_stops_everything(kit: Kit) -> None:
    hub = await _started(kit, "plain", "broken")
    generation = hub.generation
    await hub.aclose()
    assert [(h.server, h.state) for h in hub.health()] == [
        ("plain", "stopped"),
        ("broken", "failed"),
    ]
    assert hub.tools() == []
    assert hub.generation > generation
    with pytest.raises(McpError, match="'plain' is stopped"):
        await hub.call_tool("plain", "ping", {}, timeout_s=1)


async def test_the_fake_plays_crashes_and_list_changes_it_is_told() -> None:
    hub = ScriptedMcpHub([ScriptedMcpServer("git", tools=["git_status"])])
    heard: list[ServerHealth] = []
    hub.add_listener(heard.append)
    hub.start()
    await hub.wait_ready(1)
    hub.set_state("git", "crashed", "exited with code 7", exit_code=7)
    hub.set_state("git", "restarting", "restart 1 of 3 in 0.5 s", attempt=1, backoff_s=0.5)
    assert [t.name for t in hub.tools()] == ["git_status"]  # kept while it restarts, as for real
    with pytest.raises(McpError, match="'git' is restarting after a crash"):
        await hub.call_tool("git", "git_status", {}, timeout_s=1)
    hub.set_state("git", "ready", "1 tool")
    generation = hub.generation
    hub.set_tools("git", ["git_status", "git_log"])
    assert hub.generation > generation
    assert (await hub.call_tool("git", "git_log", {}, timeout_s=1)).content[0].text == "git_log: ok"
    assert [c.tool for c in hub.calls] == ["git_log"]  # the refused call never reached it
    assert [h.state for h in heard] == [
        "starting",
        "ready",
        "crashed",
        "restarting",
        "ready",
        "ready",
    ]
    assert heard[2].exit_code == 7 and heard[-1].tool_count == 2
    await hub.aclose()
    assert hub.closed
