"""The hook pipeline with a scripted process runner: order, fail-open, each type's decisions."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from soong_agent.application.hooks import HookContext, HookPipeline
from soong_agent.application.runs.handle import Run
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.domain.hooks import HookSet, HooksFileError, parse_hooks, verdict
from soong_agent.ports.events import HookFailed, HookRan
from soong_agent.ports.storage import RunInfo, SessionInfo
from soong_agent.testing import (
    FixedClock,
    InMemorySessionStore,
    ScriptedProcess,
    ScriptedProcessRunner,
    SequentialIds,
)

CTX = HookContext(session_id="ses_1", run_id="run_1")


def recorder() -> tuple[RunRecorder, Run]:
    run = Run(session_id="ses_1", run_id="run_1", cancel_timeout_s=1)
    rec = RunRecorder(
        run=run,
        store=InMemorySessionStore(),
        clock=FixedClock(),
        ids=SequentialIds(),
        session=SessionInfo(id="ses_1", project_dir="/p", created_at=0, updated_at=0),
        run_info=RunInfo(id="run_1", session_id="ses_1", started_at=0),
        history=[],
    )
    return rec, run


def pipeline(hooks: dict[str, Any], runner: ScriptedProcessRunner) -> HookPipeline:
    return HookPipeline(
        parse_hooks({"hooks": hooks}),
        runner,
        base_env={"PATH": "/usr/bin", "PROJECT_ROOT": "/p"},
        cwd="/p",
        default_timeout_s=5,
    )


def events_of(run: Run) -> list[Any]:
    return list(run._events)


async def test_synchronous_hooks_run_in_order_each_to_its_end_even_after_a_failure() -> None:
    runner = ScriptedProcessRunner()
    runner.on_command("first", ScriptedProcess(exit_code=7, stderr="boom"))
    runner.on_command("second", ScriptedProcess(stdout="ok"))
    hooks = pipeline({"post_tool_use": [{"command": "first"}, {"command": "second"}]}, runner)
    rec, run = recorder()
    verdicts = await hooks.fire(
        "post_tool_use", {"tool_name": "grep", "tool_output": "x"}, rec, CTX, tool="grep"
    )
    assert [c.command for c in runner.calls] == ["first", "second"]
    assert [v.decision for v in verdicts] == ["none", "none"]
    failed = [e for e in events_of(run) if isinstance(e, HookFailed)]
    assert len(failed) == 1 and "boom" in failed[0].reason
    assert len([e for e in events_of(run) if isinstance(e, HookRan)]) == 2


async def test_the_hook_gets_its_variables_and_the_data_on_stdin() -> None:
    runner = ScriptedProcessRunner().on_command("check")
    hooks = pipeline({"pre_tool_use": [{"command": "check", "matcher": "write_.*"}]}, runner)
    rec, _ = recorder()
    data = {"tool_name": "write_file", "tool_input": {"path": "a.txt"}}
    await hooks.fire("pre_tool_use", data, rec, CTX, tool="write_file")
    await hooks.fire("pre_tool_use", {"tool_name": "read_file"}, rec, CTX, tool="read_file")
    assert len(runner.calls) == 1  # the matcher kept read_file out
    call = runner.calls[0]
    assert call.env["TOOL_NAME"] == "write_file"
    assert json.loads(call.env["TOOL_INPUT"]) == {"path": "a.txt"}
    assert call.env["PROJECT_ROOT"] == "/p" and call.env["PATH"] == "/usr/bin"
    stdin = json.loads(call.stdin or b"{}")
    assert stdin["hook"] == "pre_tool_use" and stdin["session_id"] == "ses_1"
    assert stdin["tool_input"] == {"path": "a.txt"} and stdin["depth"] == 0


@pytest.mark.parametrize(
    ("hook", "exit_code", "stdout", "decision"),
    [
        ("pre_tool_use", 2, "", "block"),
        ("pre_tool_use", 0, '{"decision": "block", "reason": "no writes"}', "block"),
        ("pre_tool_use", 0, '{"updated_input": {"path": "b.txt"}}', "update"),
        ("pre_tool_use", 1, "", "none"),  # only exit 2 blocks a tool call
        ("pre_sampling", 1, "", "block"),  # any non-zero exit blocks a model call
        ("permission_request", 0, '{"decision": "allow"}', "allow"),
        ("permission_request", 0, '{"decision": "deny"}', "deny"),
        ("permission_request", 0, '{"decision": "maybe"}', "none"),
        ("permission_request", 0, "garbage", "none"),
        ("stop", 1, "also run the tests", "continue"),
        ("stop", 0, "", "none"),
        ("post_tool_use", 2, '{"decision": "block"}', "none"),  # cannot block
    ],
)
def test_each_type_decides_only_what_it_may(
    hook: str, exit_code: int, stdout: str, decision: str
) -> None:
    assert verdict(hook, exit_code, stdout, "").decision == decision  # type: ignore[arg-type]


def test_a_killed_hook_decides_nothing() -> None:
    assert verdict("pre_tool_use", None, '{"decision": "block"}', "").decision == "none"


async def test_a_timed_out_hook_fails_open() -> None:
    runner = ScriptedProcessRunner().on_command("slow", ScriptedProcess(delay_s=2, exit_code=2))
    hooks = pipeline({"pre_tool_use": [{"command": "slow", "timeout": 0.05}]}, runner)
    rec, run = recorder()
    verdicts = await hooks.fire("pre_tool_use", {"tool_name": "x"}, rec, CTX, tool="x")
    assert [v.decision for v in verdicts] == ["none"]
    failed = [e for e in events_of(run) if isinstance(e, HookFailed)]
    assert failed and "timed out" in failed[0].reason


async def test_async_hooks_do_not_wait_and_are_ended_on_close() -> None:
    runner = ScriptedProcessRunner().on_command("background", ScriptedProcess(delay_s=30))
    hooks = pipeline({"session_start": [{"command": "background", "async": True}]}, runner)
    rec, run = recorder()
    verdicts = await hooks.fire("session_start", {"session_id": "ses_1"}, rec, CTX)
    assert verdicts == []
    assert [e.decision for e in events_of(run) if isinstance(e, HookRan)] == [
        "started in the background"
    ]
    await asyncio.sleep(0.01)  # the hook is running now
    await hooks.close(wait=False)
    assert runner.calls[0].cancelled


async def test_closing_lets_a_background_hook_finish_within_its_own_time() -> None:
    runner = ScriptedProcessRunner().on_command("brief", ScriptedProcess(delay_s=0.05))
    hooks = pipeline({"session_end": [{"command": "brief", "async": True}]}, runner)
    rec, _ = recorder()
    await hooks.fire("session_end", {"session_id": "ses_1"}, rec, CTX)
    await hooks.close()
    assert runner.calls[0].result is not None and not runner.calls[0].cancelled


def test_hooks_json_errors_name_the_entry() -> None:
    with pytest.raises(HooksFileError, match=r"hooks\.pre_tool_use\[1\]\.timeout"):
        parse_hooks({"hooks": {"pre_tool_use": [{"command": "a"}, {"command": "b", "timeout": 0}]}})
    with pytest.raises(HooksFileError, match="unknown hook type 'pre_tool'"):
        parse_hooks({"hooks": {"pre_tool": []}})
    with pytest.raises(HooksFileError, match="matcher"):
        parse_hooks({"hooks": {"post_tool_use": [{"command": "a", "matcher": "(["}]}})


def test_aliases_fold_into_the_seed_names() -> None:
    hooks = parse_hooks({"hooks": {"pre_model_request": [{"command": "a"}]}})
    assert hooks.entries("pre_sampling")[0].command == "a"
    assert not HookSet.empty()
