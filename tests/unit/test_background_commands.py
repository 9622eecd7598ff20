"""Background commands with fakes (BG-1): run_command(background=true), command_output,
command_kill, the limit, the session a command belongs to, the exit notice and closing."""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Iterator
from typing import Any

import pytest

from soong_agent.application.runs.loop import AgentLoop
from soong_agent.application.tools.background import (
    BackgroundCommands,
    BackgroundLimit,
    background_tools,
)
from soong_agent.application.tools.base import Tool, ToolContext, ToolOutput
from soong_agent.application.tools.shell import run_command_tool
from soong_agent.domain.config.schema import ToolsConfig
from soong_agent.ports.messages import Message
from soong_agent.ports.model import ModelRequest
from soong_agent.testing import (
    InMemoryFileSystem,
    RecordingApprover,
    ScriptedBackground,
    ScriptedModel,
    ScriptedProcess,
    ScriptedProcessRunner,
    ScriptedResponse,
)
from tests.support.harness import Harness, assert_every_call_answered

SERVE = "python -m http.server 8000"
FOREVER = math.inf
ENV = {"PATH": "/usr/bin:/bin", "HOME": "/home/u", "LANG": "C.UTF-8"}


def ctx(session_id: str = "s1") -> ToolContext:
    return ToolContext(fs=InMemoryFileSystem(), session_id=session_id, run_id="r1")


def kit(limit: int = 4, **config: Any) -> tuple[ScriptedProcessRunner, BackgroundCommands, Tool]:
    runner = ScriptedProcessRunner()
    commands = BackgroundCommands(limit=limit)
    tool = run_command_tool(
        runner=runner,
        project="/p",
        tools=ToolsConfig(max_background_commands=limit, **config),
        base_env=ENV,
        background=commands,
    )
    return runner, commands, tool


async def call(tool: Tool, session: str = "s1", **args: Any) -> ToolOutput:
    return await tool.handler(tool.args_model.model_validate(args), ctx(session))


def tools_of(commands: BackgroundCommands) -> dict[str, Tool]:
    return {t.name: t for t in background_tools(commands)}


# --- starting ----------------------------------------------------------------------------------


async def test_a_background_call_returns_an_id_at_once_with_the_foreground_environment() -> None:
    runner, commands, tool = kit()
    runner.on_command(SERVE, ScriptedProcess(stdout="Serving\n", delay_s=FOREVER))
    runner.on_command("echo hi", ScriptedProcess(stdout="hi\n"))
    started = await call(tool, command=SERVE, background=True)
    assert not started.is_error
    assert started.content.startswith("started in the background as bg-1 (killed after 600 s")
    assert 'command_output(id="bg-1")' in started.content
    await call(tool, command="echo hi")  # the same command line, in the foreground
    background, foreground = runner.calls
    assert background.background and not foreground.background
    assert background.argv == ("/bin/bash", "-c", SERVE)
    assert (background.cwd, background.env) == (foreground.cwd, foreground.env)
    assert background.timeout_s == 600  # tools.max_timeout_ms: a server is meant to run long
    assert runner.started[0].state == "running"
    await commands.close()


async def test_a_background_timeout_is_the_one_asked_for_and_never_above_the_maximum() -> None:
    runner, commands, tool = kit(max_timeout_ms=60_000)
    runner.on_command("a", ScriptedProcess(delay_s=FOREVER))
    runner.on_command("b", ScriptedProcess(delay_s=FOREVER))
    await call(tool, command="a", background=True, timeout_ms=5_000)
    over = await call(tool, command="b", background=True, timeout_ms=900_000)
    assert [c.timeout_s for c in runner.calls] == [5, 60]
    assert "[timeout_ms 900000 is above the maximum of 60000; the timeout was 60 s]" in (
        over.content
    )
    await commands.close()


async def test_at_the_limit_a_further_command_is_refused_and_nothing_starts() -> None:
    runner, commands, tool = kit(limit=2)
    runner.on_command("s", ScriptedProcess(delay_s=FOREVER))
    outputs = await asyncio.gather(*(call(tool, command="s", background=True) for _ in range(3)))
    refused = [o for o in outputs if o.is_error]
    assert len(refused) == 1 and len(runner.started) == 2
    assert "2 background commands are running" in refused[0].content
    assert "tools.max_background_commands = 2" in refused[0].content
    runner.started[0].exit(0)  # one ended: there is room again
    assert not (await call(tool, command="s", background=True)).is_error
    await commands.close()


async def test_a_command_that_cannot_start_takes_no_place() -> None:
    runner, commands, tool = kit(limit=1)
    runner.on_command("nope", ScriptedProcess.missing())
    runner.on_command("s", ScriptedProcess(delay_s=FOREVER))
    failed = await call(tool, command="nope", background=True)
    assert failed.is_error and "could not be started" in failed.content
    assert not (await call(tool, command="s", background=True)).is_error
    await commands.close()


async def test_with_a_limit_of_zero_there_is_no_background_argument_nor_tools() -> None:
    tool = kit(limit=0)[2]
    assert "background" not in tool.spec.parameters["properties"]
    with pytest.raises(ValueError, match="background"):
        tool.args_model.model_validate({"command": "s", "background": True})
    on = kit(limit=1)[2]
    assert "background" in on.spec.parameters["properties"]
    assert "background=true" in on.description and "background=true" not in tool.description


# --- reading and killing -----------------------------------------------------------------------


async def test_command_output_gives_what_came_since_the_last_read_and_the_status() -> None:
    runner, commands, tool = kit()
    runner.on_command(SERVE, ScriptedProcess(stdout="Serving\n", delay_s=FOREVER))
    await call(tool, command=SERVE, background=True)
    output = tools_of(commands)["command_output"]
    first = await call(output, id="bg-1")
    assert first.content == f"bg-1 is running: {SERVE}\n--- stdout ---\nServing"
    assert (await call(output, id="bg-1")).content.endswith("(no new output since the last read)")
    process = runner.started[0]
    process.write(stdout="GET /\n", stderr="warn\n")
    process.exit(3)
    last = await call(output, id="bg-1")
    assert last.content.splitlines() == [
        f"bg-1 ended (exit code 3): {SERVE}",
        "--- stdout ---",
        "GET /",
        "--- stderr ---",
        "warn",
    ]
    assert not last.is_error


async def test_what_piled_up_unread_past_the_limit_is_said_to_be_dropped() -> None:
    runner, commands, tool = kit(stdout_limit_bytes=4)
    runner.on_command("chatty", ScriptedProcess(stdout="0123456789", delay_s=FOREVER))
    await call(tool, command="chatty", background=True)
    got = await call(tools_of(commands)["command_output"], id="bg-1")
    assert "[6 earlier bytes of stdout were dropped unread]\n6789" in got.content
    await commands.close()


async def test_command_kill_ends_it_and_a_second_kill_says_it_had_ended() -> None:
    runner, commands, tool = kit()
    runner.on_command(SERVE, ScriptedProcess(stdout="Serving\n", delay_s=FOREVER))
    await call(tool, command=SERVE, background=True)
    kill = tools_of(commands)["command_kill"]
    killed = await call(kill, id="bg-1")
    assert killed.content.startswith(f"bg-1 ended (killed): {SERVE}\n--- stdout ---\nServing")
    assert runner.started[0].kills == 1
    again = await call(kill, id="bg-1")
    assert again.content.startswith("bg-1 had already ended. bg-1 ended (killed)")
    assert runner.started[0].kills == 1


async def test_a_command_belongs_to_the_session_that_started_it() -> None:
    runner, commands, tool = kit()
    runner.on_command("s", ScriptedProcess(stdout="mine", delay_s=FOREVER))
    await call(tool, "s1", command="s", background=True)
    named = tools_of(commands)
    other = await call(named["command_output"], "s2", id="bg-1")
    assert (
        other.is_error and other.content == "no background command 'bg-1' (this session has none)"
    )
    assert (await call(named["command_kill"], "s2", id="bg-1")).is_error
    assert runner.started[0].state == "running"
    unknown = await call(named["command_output"], "s1", id="bg-7")
    assert unknown.content == "no background command 'bg-7' (this session's: bg-1)"
    assert commands.notices("s2") == ""
    runner.started[0].exit(0)
    assert commands.notices("s2") == ""
    assert "bg-1" in commands.notices("s1")


def test_both_tools_are_read_only_for_permissions() -> None:
    named = tools_of(BackgroundCommands(limit=1))
    assert sorted(named) == ["command_kill", "command_output"]
    assert {t.permission_class for t in named.values()} == {"read_only"}
    assert named["command_kill"].describe(
        named["command_kill"].args_model.model_validate({"id": " bg-2 "}), ctx()
    ) == ("bg-2", "background command bg-2")


# --- the exit notice ---------------------------------------------------------------------------


async def test_an_exit_is_told_once_with_its_id_code_and_last_lines() -> None:
    runner, commands, tool = kit()
    lines = "".join(f"line {i}\n" for i in range(1, 13))
    runner.on_command("make test", ScriptedProcess(stdout=lines, delay_s=FOREVER))
    await call(tool, command="make test", background=True)
    assert commands.notices("s1") == ""  # still running
    runner.started[0].exit(2)
    notice = commands.notices("s1")
    assert notice.splitlines() == [
        "[background command bg-1 ended (exit code 2): make test]",
        "Its last lines of output:",
        *(f"line {i}" for i in range(5, 13)),
        '(its unread output: command_output(id="bg-1"))',
    ]
    assert commands.notices("s1") == ""  # told once


async def test_an_end_the_model_already_saw_is_not_told_again() -> None:
    runner, commands, tool = kit()
    runner.on_command("a", ScriptedProcess(delay_s=FOREVER))
    runner.on_command("b", ScriptedProcess(delay_s=FOREVER))
    await call(tool, command="a", background=True)
    await call(tool, command="b", background=True)
    runner.started[0].exit(0)
    await call(tools_of(commands)["command_output"], id="bg-1")  # shows it ended
    await call(tools_of(commands)["command_kill"], id="bg-2")
    assert commands.notices("s1") == ""


async def test_a_timed_out_command_is_told_as_killed_after_its_timeout() -> None:
    runner, commands, tool = kit()
    runner.on_command("slow", ScriptedProcess(stdout="partial", delay_s=FOREVER))
    await call(tool, command="slow", background=True, timeout_ms=1)
    await asyncio.wait_for(runner.started[0].wait(), 10)
    assert commands.notices("s1").startswith(
        "[background command bg-1 ended (killed after its timeout of 0.001 s): slow]"
    )


# --- closing -------------------------------------------------------------------------------------


async def test_close_kills_every_running_command_and_refuses_new_ones() -> None:
    runner, commands, tool = kit()
    runner.on_command("s", ScriptedProcess(delay_s=FOREVER))
    runner.on_command("quick", ScriptedProcess())
    await call(tool, command="s", background=True)
    await call(tool, command="s", background=True)
    await call(tool, command="quick", background=True)
    await asyncio.wait_for(runner.started[2].wait(), 10)
    await commands.close()
    assert [p.state for p in runner.started] == ["killed", "killed", "exited"]
    assert [p.kills for p in runner.started] == [1, 1, 0]
    refused = await call(tool, command="s", background=True)
    assert refused.is_error and "the runtime is closing" in refused.content
    assert len(runner.started) == 3


async def test_a_command_that_started_while_the_runtime_closed_is_killed() -> None:
    commands = BackgroundCommands(limit=2)
    process = ScriptedBackground(ScriptedProcess(delay_s=FOREVER))
    gate = asyncio.Event()

    async def start() -> ScriptedBackground:
        await gate.wait()
        return process

    launching = asyncio.create_task(
        commands.launch(start, session_id="s1", command="s", timeout_ms=1000)
    )
    await asyncio.sleep(0)
    await commands.close()
    gate.set()
    with pytest.raises(BackgroundLimit, match="closing"):
        await launching
    assert process.state == "killed"


# --- through the run loop ------------------------------------------------------------------------


@pytest.fixture
def notices_in_loops(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[BackgroundCommands]]:
    """Runs built by the harness get the notices of `commands[0]` (what the runtime wires)."""
    commands: list[BackgroundCommands] = []
    original = AgentLoop.__init__

    @functools.wraps(original)
    def init(self: AgentLoop, *args: Any, **kwargs: Any) -> None:
        kwargs["notices"] = commands[0].notices
        original(self, *args, **kwargs)

    monkeypatch.setattr(AgentLoop, "__init__", init)
    yield commands


def reminders(request: ModelRequest) -> list[Message]:
    return [m for m in request.messages if m.kind == "reminder"]


async def test_the_next_model_request_after_an_exit_carries_the_notice(
    notices_in_loops: list[BackgroundCommands],
) -> None:
    runner, commands, tool = kit()
    notices_in_loops.append(commands)
    runner.on_command(SERVE, ScriptedProcess(stdout="ready\n", delay_s=FOREVER))

    def read_it(request: ModelRequest) -> ScriptedResponse:
        return ScriptedResponse.tool_calls(("command_output", {"id": "bg-1"}))

    def it_ends_meanwhile(request: ModelRequest) -> ScriptedResponse:
        runner.started[0].write(stdout="bye\n")
        runner.started[0].exit(3)
        return ScriptedResponse.tool_calls(("list_dir", {"path": "."}))

    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("run_command", {"command": SERVE, "background": True})),
            read_it,
            it_ends_meanwhile,
            ScriptedResponse.text("done"),
        ]
    )
    approver = RecordingApprover(default="allow_once")
    h = Harness(model, approver=approver, extra_tools=[tool, *background_tools(commands)])
    result = await (await h.service.start("serve it")).wait()
    assert result.status == "completed", result.reason
    (asked,) = approver.requests  # command_output is read-only: only the command was asked
    assert (asked.tool, asked.summary) == ("run_command", f"run: {SERVE}")
    first, second, third, fourth = model.calls
    assert "started in the background as bg-1" in second.messages[-1].tool_results[0].content
    assert "ready" in third.messages[-1].tool_results[0].content
    assert [reminders(r) for r in (first, second, third)] == [[], [], []]
    (notice,) = reminders(fourth)
    assert notice.role == "user" and notice is fourth.messages[-1]
    assert notice.text.startswith(f"[background command bg-1 ended (exit code 3): {SERVE}]")
    assert "ready\nbye" in notice.text
    assert_every_call_answered(model.calls)
    stored = await h.store.active_path(result.session_id)
    assert sum(1 for m in stored if m.kind == "reminder") == 1


async def test_a_turn_without_background_commands_adds_nothing(
    notices_in_loops: list[BackgroundCommands],
) -> None:
    commands = BackgroundCommands(limit=4)
    notices_in_loops.append(commands)
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(("list_dir", {"path": "."}))] * 3
        + [ScriptedResponse.text("done")]
    )
    h = Harness(model)
    await (await h.service.start("look")).wait()
    assert all(reminders(r) == [] for r in model.calls)


async def test_the_permission_gate_decides_a_background_call_as_a_foreground_one(
    notices_in_loops: list[BackgroundCommands],
) -> None:
    runner, commands, tool = kit()
    notices_in_loops.append(commands)
    runner.on_command(SERVE, ScriptedProcess(delay_s=FOREVER))
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("run_command", {"command": SERVE, "background": True})),
            ScriptedResponse.tool_calls(("run_command", {"command": SERVE})),
            ScriptedResponse.text("done"),
        ]
    )
    approver = RecordingApprover(default="deny")
    h = Harness(model, approver=approver, extra_tools=[tool, *background_tools(commands)])
    await (await h.service.start("serve it")).wait()
    background, foreground = approver.requests
    assert (background.tool, background.session_scope, background.summary) == (
        foreground.tool,
        foreground.session_scope,
        foreground.summary,
    )
    assert runner.started == [] and runner.calls == []
    refused = model.calls[1].messages[-1].tool_results[0]
    assert refused.is_error
