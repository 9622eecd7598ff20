"""MCP tools inside runs (MCP-1), over the scripted hub: names, permissions, results, health
events, start-up waiting, list changes, deferral behind tool_search, and resume."""

from __future__ import annotations

import asyncio
from typing import Any

from soong_agent.domain.config.schema import McpToolOverride, McpToolsConfig, PermissionsConfig
from soong_agent.ports.events import McpServerEvent, PermissionAsked, RunEvent
from soong_agent.ports.mcp import McpCallResult, McpContent, McpError, McpTool
from soong_agent.testing import (
    RecordingApprover,
    ScriptedMcpHub,
    ScriptedMcpServer,
    ScriptedModel,
    ScriptedResponse,
)
from tests.support.harness import Harness

CLOCK = McpTool(
    "time",
    "get_current_time",
    "Get the current time in a timezone.\nMore detail.",
    {"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]},
)


def text(value: str, *, error: bool = False) -> McpCallResult:
    return McpCallResult((McpContent("text", value),), is_error=error)


def time_server(**kw: Any) -> ScriptedMcpServer:
    results = {"get_current_time": lambda args: text(f"12:00 in {args['timezone']}")}
    return ScriptedMcpServer("time", tools=[CLOCK], results=results, **kw)


def call(name: str, args: dict[str, Any]) -> ScriptedResponse:
    return ScriptedResponse.tool_calls((name, args))


async def run_all(h: Harness, message: str = "go", **kw: Any) -> tuple[Any, list[RunEvent]]:
    run = await h.service.start(message, **kw)
    events = [e async for e in run.events()]
    return await run.wait(), events


def sent_tools(h: Harness, request: int) -> list[str]:
    return [t.name for t in h.model.calls[request].tools]


def result_of(h: Harness, request: int) -> Any:
    return h.model.calls[request].messages[-1].tool_results[0]


async def test_a_server_tool_is_offered_asked_about_and_called() -> None:
    hub = ScriptedMcpHub([time_server()])
    model = ScriptedModel(
        [call("mcp__time__get_current_time", {"timezone": "UTC"}), ScriptedResponse.text("ok")]
    )
    approver = RecordingApprover(default="allow_once")
    h = Harness(model, approver=approver, mcp=hub)
    result, events = await run_all(h)
    assert result.status == "completed"
    assert "mcp__time__get_current_time" in sent_tools(h, 0)
    spec = next(t for t in model.calls[0].tools if t.name == "mcp__time__get_current_time")
    assert spec.parameters["required"] == ["timezone"]
    assert result_of(h, 1).content == "12:00 in UTC"
    asked = [e for e in events if isinstance(e, PermissionAsked)]
    assert [e.tool for e in asked] == ["mcp__time__get_current_time"]  # exec: asks by default
    assert hub.calls[0].arguments == {"timezone": "UTC"}
    states = [(e.server, e.state) for e in events if isinstance(e, McpServerEvent)]
    assert ("time", "ready") in states


async def test_rules_and_overrides_apply_to_server_tools() -> None:
    hub = ScriptedMcpHub([time_server()])
    config = McpToolsConfig(
        tool_overrides={
            "mcp__time__get_current_time": McpToolOverride(
                name="clock", description="What time is it", permission_class="read_only"
            )
        }
    )
    model = ScriptedModel([call("clock", {"timezone": "CET"}), ScriptedResponse.text("ok")])
    approver = RecordingApprover(default="deny")
    h = Harness(model, approver=approver, mcp=hub, mcp_config=config)
    await run_all(h)
    spec = next(t for t in model.calls[0].tools if t.name == "clock")
    assert spec.description == "What time is it"
    assert approver.requests == []  # read_only by override: not asked
    assert result_of(h, 1).content == "12:00 in CET"


async def test_a_deny_rule_on_the_mcp_name_stops_the_call() -> None:
    hub = ScriptedMcpHub([time_server()])
    model = ScriptedModel(
        [call("mcp__time__get_current_time", {"timezone": "UTC"}), ScriptedResponse.text("ok")]
    )
    h = Harness(
        model,
        mcp=hub,
        permissions=PermissionsConfig(mode="bypass", deny=["mcp__time__*"]),
    )
    await run_all(h)
    assert hub.calls == []
    assert "Permission denied" in result_of(h, 1).content


async def test_disabled_tools_are_not_offered() -> None:
    hub = ScriptedMcpHub([time_server()])
    model = ScriptedModel([ScriptedResponse.text("ok")])
    config = McpToolsConfig(disabled_tools=["mcp__time__*"])
    h = Harness(model, mcp=hub, mcp_config=config)
    await run_all(h)
    assert not [n for n in sent_tools(h, 0) if n.startswith("mcp__")]


async def test_error_results_a_down_server_and_a_hung_call_become_error_results() -> None:
    async def hang(args: Any) -> McpCallResult:
        await asyncio.sleep(30)
        return text("never")

    server = ScriptedMcpServer(
        "box",
        tools=["fails", "broken", "hangs"],
        results={
            "fails": text("no such thing", error=True),
            "broken": McpError("the server crashed (exit code 1)"),
            "hangs": hang,
        },
    )
    hub = ScriptedMcpHub([server])
    model = ScriptedModel(
        [
            call("mcp__box__fails", {}),
            call("mcp__box__broken", {}),
            call("mcp__box__hangs", {}),
            ScriptedResponse.text("ok"),
        ]
    )
    config = McpToolsConfig(tool_overrides={"mcp__box__hangs": McpToolOverride(timeout_ms=50)})
    h = Harness(model, mcp=hub, mcp_config=config, permissions=PermissionsConfig(mode="bypass"))
    result, _ = await run_all(h)
    assert result.status == "completed"
    first, second, third = (result_of(h, i) for i in (1, 2, 3))
    assert first.is_error and first.content == "no such thing"
    assert second.is_error and "crashed" in second.content
    assert third.is_error and "box" in third.content


async def test_the_first_request_waits_for_a_server_still_starting() -> None:
    hub = ScriptedMcpHub([time_server(delay_s=0.2)], startup_timeout_s=5)
    model = ScriptedModel([ScriptedResponse.text("ok")])
    h = Harness(model, mcp=hub)
    await run_all(h)
    assert "mcp__time__get_current_time" in sent_tools(h, 0)


async def test_a_failed_server_does_not_stop_the_run_and_is_an_event() -> None:
    hub = ScriptedMcpHub([time_server(state="failed", detail="exited at start (code 3)")])
    model = ScriptedModel([ScriptedResponse.text("ok")])
    h = Harness(model, mcp=hub)
    result, events = await run_all(h)
    assert result.status == "completed"
    failed = [e for e in events if isinstance(e, McpServerEvent) and e.state == "failed"]
    assert failed and "exited at start" in failed[-1].detail
    assert not [n for n in sent_tools(h, 0) if n.startswith("mcp__")]


async def test_a_changed_tool_list_is_picked_up_at_the_next_model_call() -> None:
    hub = ScriptedMcpHub([time_server()])
    extra = McpTool("time", "convert_time", "Convert a time.", {"type": "object"})

    def grow(args: Any) -> McpCallResult:
        hub.set_tools("time", [CLOCK, extra])
        return text("12:00")

    hub_server = ScriptedMcpServer("time", tools=[CLOCK], results={"get_current_time": grow})
    hub = ScriptedMcpHub([hub_server])
    model = ScriptedModel(
        [call("mcp__time__get_current_time", {"timezone": "UTC"}), ScriptedResponse.text("ok")]
    )
    h = Harness(model, mcp=hub, permissions=PermissionsConfig(mode="bypass"))
    await run_all(h)
    assert "mcp__time__convert_time" not in sent_tools(h, 0)
    assert "mcp__time__convert_time" in sent_tools(h, 1)
    system = "\n".join(p.text for p in model.calls[1].system)
    assert "mcp__time__convert_time" in system


def many_tools(n: int) -> ScriptedMcpServer:
    tools = [McpTool("big", f"tool_{i}", f"Tool number {i}.", {"type": "object"}) for i in range(n)]
    return ScriptedMcpServer("big", tools=tools, results={"tool_7": text("seven")})


async def test_past_the_threshold_mcp_tools_are_deferred_behind_tool_search() -> None:
    hub = ScriptedMcpHub([many_tools(30)])
    model = ScriptedModel(
        [
            call("tool_search", {"names": ["mcp__big__tool_7"]}),
            call("mcp__big__tool_7", {}),
            ScriptedResponse.text("ok"),
        ]
    )
    h = Harness(model, mcp=hub, permissions=PermissionsConfig(mode="bypass"))
    result, _ = await run_all(h)
    assert result.status == "completed"
    first = sent_tools(h, 0)
    assert "tool_search" in first and not [n for n in first if n.startswith("mcp__")]
    system = "\n".join(p.text for p in model.calls[0].system)
    assert "mcp__big__tool_29" in system and "load with tool_search" in system  # by name
    assert "mcp__big__tool_7" in sent_tools(h, 1)  # loaded from the next request on
    assert "mcp__big__tool_8" not in sent_tools(h, 1)
    assert result_of(h, 2).content == "seven"


async def test_loaded_tools_are_still_loaded_after_resume() -> None:
    hub = ScriptedMcpHub([many_tools(30)])
    model = ScriptedModel(
        [
            call("tool_search", {"query": "number 7"}),
            ScriptedResponse.text("loaded"),
            ScriptedResponse.text("again"),
        ]
    )
    h = Harness(model, mcp=hub, permissions=PermissionsConfig(mode="bypass"))
    first, _ = await run_all(h)
    assert "mcp__big__tool_7" in sent_tools(h, 1)
    await run_all(h, "more", session_id=first.session_id)
    assert "mcp__big__tool_7" in sent_tools(h, 2)
    assert "mcp__big__tool_9" not in sent_tools(h, 2)


async def test_a_server_with_resources_gets_list_and_read_tools() -> None:
    from soong_agent.ports.mcp import McpResource

    server = ScriptedMcpServer(
        "docs",
        tools=[],
        resources=[McpResource("docs", "file:///readme", "readme", "The readme")],
        contents={"file:///readme": text("# Hello")},
    )
    hub = ScriptedMcpHub([server])
    model = ScriptedModel(
        [
            call("mcp__docs__list_resources", {}),
            call("mcp__docs__read_resource", {"uri": "file:///readme"}),
            ScriptedResponse.text("ok"),
        ]
    )
    h = Harness(model, mcp=hub, permissions=PermissionsConfig(mode="bypass"))
    await run_all(h)
    assert "file:///readme" in result_of(h, 1).content
    assert result_of(h, 2).content == "# Hello"
