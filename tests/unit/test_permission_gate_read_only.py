"""The permission gate's short way for read-only calls: a read-only tool under
``readonly_default = "allow"`` is allowed without describing the call, with the policy's own
reason, only while nothing about the call could change that (no deny rule about the tool, no
command line for the sandbox to review, not in plan mode or bypass)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from soong_agent.application.permissions.gate import PermissionGate
from soong_agent.application.permissions.plan_mode import PlanModes
from soong_agent.application.runs.handle import Run
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput
from soong_agent.domain import permissions
from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.ports.events import PermissionDecided
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.ports.shell import ShellAnalysis
from soong_agent.ports.storage import RunInfo, SessionInfo
from soong_agent.testing import (
    FixedClock,
    InMemoryFileSystem,
    InMemorySessionStore,
    RecordingApprover,
    SequentialIds,
    SimpleShellAnalyzer,
)


class PathArgs(ToolArgs):
    path: str


class CommandArgs(ToolArgs):
    command: str


async def _nothing(args: BaseModel, ctx: ToolContext) -> ToolOutput:
    return ToolOutput("nothing")


described: list[str] = []


def _describe(args: Any, ctx: ToolContext) -> tuple[str, str]:
    described.append(json.dumps(args.model_dump()))
    return "*", f"look at {args.model_dump()}"


def look_tool() -> Tool:
    return Tool("look", "Looks at a path.", PathArgs, _nothing, describe=_describe)


def inspect_tool() -> Tool:
    return Tool("inspect", "Inspects with a command line.", CommandArgs, _nothing)


class CountingAnalyzer(SimpleShellAnalyzer):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def analyze(self, command: str) -> ShellAnalysis:
        self.seen.append(command)
        return super().analyze(command)


def recorder(store: InMemorySessionStore | None = None) -> RunRecorder:
    return RunRecorder(
        run=Run(session_id="ses_1", run_id="run_1", cancel_timeout_s=1),
        store=store or InMemorySessionStore(),
        clock=FixedClock(),
        ids=SequentialIds(),
        session=SessionInfo(id="ses_1", project_dir="/project", created_at=0, updated_at=0),
        run_info=RunInfo(id="run_1", session_id="ses_1", started_at=0),
        history=[],
    )


async def decide(
    gate: PermissionGate, tool: Tool, arguments: dict[str, Any], rec: RunRecorder | None = None
) -> tuple[str, str]:
    rec = rec or recorder()
    call = ToolCallBlock(id="c1", name=tool.name, arguments=json.dumps(arguments))
    ctx = ToolContext(fs=InMemoryFileSystem({"a.txt": "a"}), session_id="ses_1", run_id="run_1")
    ruling = await gate.check(call, tool, tool.args_model.model_validate(arguments), ctx, rec)
    return ruling.decision, ruling.reason


def gate(policy: PermissionsConfig, **more: Any) -> PermissionGate:
    return PermissionGate(
        approver=RecordingApprover(default="deny"),
        policy=policy,
        grants=permissions.SessionGrants(),
        **more,
    )


async def test_a_read_only_call_is_allowed_with_the_policys_reason_every_time() -> None:
    described.clear()
    store = InMemorySessionStore()
    g, rec = gate(PermissionsConfig()), recorder(store)
    expected = permissions.decide(
        permissions.PermissionRequest("look", "read_only", "*", target="a.txt", target_kind="path"),
        policy=PermissionsConfig(),
        grants=permissions.SessionGrants(),
    )
    for _ in range(3):
        assert await decide(g, look_tool(), {"path": "a.txt"}, rec) == (
            "allow_once",
            expected.reason,
        )
    await rec.commit()
    events = [e for e in await store.run_events("run_1") if isinstance(e, PermissionDecided)]
    assert [e.reason for e in events] == [expected.reason] * 3, "each decision is reported"
    assert described == [], "nothing had to be described to allow it"


async def test_a_deny_rule_about_a_read_only_tool_is_still_applied_per_call() -> None:
    g = gate(PermissionsConfig(deny=["look(/secret/**)"]))
    decision, reason = await decide(g, look_tool(), {"path": "secret/key"})
    assert decision == "deny" and "look(/secret/**)" in reason
    assert (await decide(g, look_tool(), {"path": "a.txt"}))[0] == "allow_once"


async def test_read_only_calls_are_asked_about_when_the_default_is_ask() -> None:
    g = gate(PermissionsConfig(readonly_default="ask"))
    assert await decide(g, look_tool(), {"path": "a.txt"}) == ("deny", "user denied it")


async def test_a_read_only_tools_command_line_is_still_analysed() -> None:
    analyzer = CountingAnalyzer()
    g = gate(PermissionsConfig(), analyzer=analyzer)
    for _ in range(2):
        assert (await decide(g, inspect_tool(), {"command": "ls src"}))[0] == "allow_once"
    assert analyzer.seen == ["ls src", "ls src"]


async def test_plan_mode_and_bypass_give_their_own_reasons() -> None:
    modes = PlanModes()
    modes.set("ses_1", True)
    planning = gate(PermissionsConfig(), plan_mode=modes)
    assert (await decide(planning, look_tool(), {"path": "a.txt"}))[0] == "allow_once"
    bypass = gate(PermissionsConfig(mode="bypass"))
    decision, reason = await decide(bypass, look_tool(), {"path": "a.txt"})
    assert decision == "allow_once" and "bypass" in reason
