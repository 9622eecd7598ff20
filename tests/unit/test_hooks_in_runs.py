"""Hooks fired by real runs (HOOK-1): the loop, the tool pipeline and the permission gate go
through the one pipeline; each type's decision is applied where it belongs. Scripted model,
scripted process runner (the real subprocess cases are in tests/integration/test_hooks_real.py).
"""

from __future__ import annotations

import json
from typing import Any

from soong_agent.application.hooks import HookPipeline
from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.domain.hooks import parse_hooks
from soong_agent.domain.permissions import PermissionRequest, parse_rule, suggested_rule
from soong_agent.ports.events import (
    ErrorEvent,
    HookRan,
    PermissionSuggestion,
    RunEvent,
)
from soong_agent.ports.shell import ShellAnalysis, SimpleCommand
from soong_agent.testing import (
    ProcessCall,
    RecordingApprover,
    ScriptedModel,
    ScriptedProcess,
    ScriptedProcessRunner,
    ScriptedResponse,
)
from tests.support.harness import Harness


def hooks(spec: dict[str, Any], runner: ScriptedProcessRunner) -> HookPipeline:
    return HookPipeline(
        parse_hooks({"hooks": spec}),
        runner,
        base_env={"PATH": "/usr/bin"},
        cwd="/p",
        default_timeout_s=5,
    )


def write(path: str, content: str = "x") -> ScriptedResponse:
    return ScriptedResponse.tool_calls(("write_file", {"path": path, "content": content}))


async def run_all(h: Harness, message: str = "go") -> tuple[Any, list[RunEvent]]:
    run = await h.service.start(message)
    events = [e async for e in run.events()]
    return await run.wait(), events


def tool_result(h: Harness, call: int) -> str:
    return str(h.model.calls[call].messages[-1].tool_results[0].content)


async def test_a_pre_tool_use_hook_exiting_2_blocks_the_call_and_the_model_is_told_why() -> None:
    runner = ScriptedProcessRunner().on_command(
        "guard", ScriptedProcess(exit_code=2, stderr="no writes on Fridays")
    )
    model = ScriptedModel([write("a.txt"), ScriptedResponse.text("ok")])
    h = Harness(model, approver=RecordingApprover(default="allow_once"))
    h.hooks = hooks({"pre_tool_use": [{"command": "guard", "matcher": "write_.*"}]}, runner)
    result, _ = await run_all(h)
    assert result.status == "completed"
    assert "a.txt" not in h.fs.files
    assert "no writes on Fridays" in tool_result(h, 1)
    assert h.approver is not None and not h.approver.requests  # never asked: blocked before
    (call,) = runner.calls
    data = json.loads(call.stdin or b"{}")
    assert data["tool_input"] == {"path": "a.txt", "content": "x"}
    assert call.env["TOOL_NAME"] == "write_file"


async def test_the_matcher_limits_a_tool_hook_to_the_tools_it_names() -> None:
    runner = ScriptedProcessRunner().on_command("guard", ScriptedProcess(exit_code=2))
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(("read_file", {"path": "r.txt"})), ScriptedResponse.text("")]
    )
    h = Harness(model)
    h.fs.files["r.txt"] = b"read me"
    h.hooks = hooks({"pre_tool_use": [{"command": "guard", "matcher": "^write_"}]}, runner)
    await run_all(h)
    assert runner.calls == []
    assert "read me" in tool_result(h, 1)


async def test_updated_input_is_validated_again() -> None:
    bad = json.dumps({"updated_input": {"path": 7}})
    runner = ScriptedProcessRunner().on_command("rewrite", ScriptedProcess(stdout=bad))
    model = ScriptedModel([write("a.txt"), ScriptedResponse.text("ok")])
    h = Harness(model, approver=RecordingApprover(default="allow_once"))
    h.hooks = hooks({"pre_tool_use": [{"command": "rewrite"}]}, runner)
    await run_all(h)
    assert "a.txt" not in h.fs.files
    assert "replaced the arguments with invalid ones" in tool_result(h, 1)


async def test_updated_input_is_permission_checked_again_so_a_hook_cannot_launder_a_call() -> None:
    moved = json.dumps({"updated_input": {"path": "secret/key.txt", "content": "x"}})
    runner = ScriptedProcessRunner().on_command("rewrite", ScriptedProcess(stdout=moved))
    model = ScriptedModel([write("a.txt"), ScriptedResponse.text("ok")])
    h = Harness(
        model,
        approver=RecordingApprover(default="allow_once"),
        permissions=PermissionsConfig(mode="accept_edits", deny=["write_file(/secret/**)"]),
    )
    h.hooks = hooks({"pre_tool_use": [{"command": "rewrite"}]}, runner)
    await run_all(h)
    assert "secret/key.txt" not in h.fs.files and "a.txt" not in h.fs.files
    assert "Permission denied" in tool_result(h, 1)


async def test_updated_input_that_is_allowed_runs_instead_of_the_original() -> None:
    moved = json.dumps({"updated_input": {"path": "b.txt", "content": "from hook"}})
    runner = ScriptedProcessRunner().on_command("rewrite", ScriptedProcess(stdout=moved))
    model = ScriptedModel([write("a.txt"), ScriptedResponse.text("ok")])
    h = Harness(model, permissions=PermissionsConfig(mode="accept_edits"))
    h.hooks = hooks({"pre_tool_use": [{"command": "rewrite"}]}, runner)
    await run_all(h)
    assert h.fs.files.get("b.txt") == b"from hook"
    assert "a.txt" not in h.fs.files


async def test_a_permission_request_hook_answers_instead_of_the_user() -> None:
    runner = ScriptedProcessRunner()
    runner.on_command("answer", ScriptedProcess(stdout='{"decision": "allow", "reason": "ci"}'))
    model = ScriptedModel([write("a.txt"), ScriptedResponse.text("ok")])
    approver = RecordingApprover(default="deny")
    h = Harness(model, approver=approver)
    h.hooks = hooks({"permission_request": [{"command": "answer"}]}, runner)
    await run_all(h)
    assert h.fs.files.get("a.txt") == b"x"
    assert approver.requests == []  # nobody was asked


async def test_a_permission_request_hook_that_says_nothing_leaves_the_user_to_answer() -> None:
    runner = ScriptedProcessRunner().on_command("quiet", ScriptedProcess(stdout="not json"))
    model = ScriptedModel([write("a.txt"), ScriptedResponse.text("ok")])
    approver = RecordingApprover(default="deny")
    h = Harness(model, approver=approver)
    denied = ScriptedProcessRunner()
    h.hooks = hooks(
        {
            "permission_request": [{"command": "quiet"}],
            "permission_denied": [{"command": "told"}],
            "notification": [{"command": "told"}],
        },
        runner,
    )
    runner.on_command("told", ScriptedProcess())
    await run_all(h)
    assert len(approver.requests) == 1
    assert "a.txt" not in h.fs.files
    fired = [c.env.get("MESSAGE") or c.env.get("REASON") for c in runner.calls[1:]]
    assert fired[0] is not None and "approve write_file" in fired[0]  # notification
    assert fired[1] == "user denied it"  # permission_denied
    assert denied.calls == []


async def test_a_stop_hook_makes_the_agent_go_on_at_most_max_stop_continuations_times() -> None:
    runner = ScriptedProcessRunner().on_command(
        "more", ScriptedProcess(exit_code=1, stdout="run the tests too")
    )
    model = ScriptedModel([ScriptedResponse.text(f"answer {i}") for i in range(5)])
    h = Harness(model, max_stop_continuations=2)
    h.hooks = hooks({"stop": [{"command": "more"}]}, runner)
    result, _ = await run_all(h)
    assert result.status == "completed"
    assert len(model.calls) == 3
    assert result.final_text == "answer 2"
    reminder = model.calls[1].messages[-1]
    assert reminder.role == "user" and reminder.kind == "reminder"
    assert "run the tests too" in reminder.text


async def test_a_pre_sampling_hook_that_fails_blocks_the_call_and_ends_the_run() -> None:
    runner = ScriptedProcessRunner().on_command(
        "budget", ScriptedProcess(exit_code=1, stderr="over the team budget")
    )
    model = ScriptedModel([ScriptedResponse.text("never")])
    h = Harness(model)
    h.hooks = hooks({"pre_sampling": [{"command": "budget"}]}, runner)
    result, events = await run_all(h)
    assert result.status == "blocked"
    assert "over the team budget" in (result.reason or "")
    assert model.calls == []
    warned = [e for e in events if isinstance(e, ErrorEvent)]
    assert [e.kind for e in warned] == ["pre_sampling_blocked"] and not warned[0].fatal
    assert (await h.store.get_session(result.session_id)) is not None  # resumable


async def test_every_run_fires_session_start_post_sampling_and_session_end_in_order() -> None:
    runner = ScriptedProcessRunner()
    for name in ("start", "sampled", "used", "end"):
        runner.on_command(name, ScriptedProcess())
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(("read_file", {"path": "r.txt"})), ScriptedResponse.text("")]
    )
    h = Harness(model)
    h.fs.files["r.txt"] = b"hello"
    h.hooks = hooks(
        {
            "session_start": [{"command": "start"}],
            "post_sampling": [{"command": "sampled"}],
            "post_tool_use": [{"command": "used"}],
            "session_end": [{"command": "end"}],
        },
        runner,
    )
    result, events = await run_all(h)
    order = [c.command for c in runner.calls]
    assert order == ["start", "sampled", "used", "sampled", "end"]
    assert runner.calls[0].env["SESSION_ID"] == result.session_id
    assert "hello" in runner.calls[2].env["TOOL_OUTPUT"]
    assert runner.calls[-1].env["TURN_COUNT"] == "2"
    ran = [e for e in events if isinstance(e, HookRan)]
    assert [e.hook for e in ran] == [
        "session_start",
        "post_sampling",
        "post_tool_use",
        "post_sampling",
        "session_end",
    ]


async def test_a_failing_tool_fires_post_tool_use_failure_not_post_tool_use() -> None:
    runner = ScriptedProcessRunner()
    seen: list[ProcessCall] = []

    def record(call: ProcessCall) -> ScriptedProcess:
        seen.append(call)
        return ScriptedProcess()

    runner.on_command("failed", record).on_command("used", record)
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("read_file", {"path": "nope.txt"})),
            ScriptedResponse.text(""),
        ]
    )
    h = Harness(model)
    h.hooks = hooks(
        {
            "post_tool_use": [{"command": "used"}],
            "post_tool_use_failure": [{"command": "failed"}],
        },
        runner,
    )
    await run_all(h)
    assert [c.command for c in seen] == ["failed"]
    assert "nope.txt" in seen[0].env["TOOL_ERROR"]


async def test_repeated_approvals_suggest_the_rule_that_would_allow_them_once() -> None:
    model = ScriptedModel([*(write(f"src/{n}.txt") for n in "abcd"), ScriptedResponse.text("")])
    h = Harness(model, approver=RecordingApprover(default="allow_once"))
    _, events = await run_all(h)
    (hint,) = [e for e in events if isinstance(e, PermissionSuggestion)]
    assert hint.rule == "write_file(/src/**)" and hint.approvals == 3
    rule = parse_rule(hint.rule)
    assert rule.tool == "write_file"


def test_suggested_rules_are_in_the_rule_syntax() -> None:
    def suggestion(tool: str, kind: Any, target: str) -> str | None:
        cls = "exec" if kind == "command" else "write"
        shell = None
        if kind == "command":  # as the shell analyser reads it: one simple command per part
            parts = [part.split() for part in target.split("&&")]
            shell = ShellAnalysis(commands=tuple(SimpleCommand(words=tuple(w)) for w in parts))
        request = PermissionRequest(tool, cls, "*", target=target, target_kind=kind, shell=shell)
        return suggested_rule(tool, request)

    assert (
        suggestion("run_command", "command", "npm test --watch") == "run_command(prefix:npm test)"
    )
    assert suggestion("run_command", "command", "npm test && rm -rf x") is None
    assert suggestion("write_file", "path", "notes.txt") == "write_file(/**)"
    assert suggestion("write_file", "path", "/etc/x.conf") == "write_file(//etc/**)"
    assert suggestion("web_fetch", "url", "https://Docs.Example.com/a") == (
        "web_fetch(domain:docs.example.com)"
    )
