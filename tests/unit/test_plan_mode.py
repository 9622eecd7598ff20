"""Plan mode (PLAN-1, PLAN-2): the permission engine holds a session in plan mode to read-only
tools and the plan tools; exit_plan_mode asks the user to approve the plan; resume restores the
mode. Scripted model, in-memory ports (tests/support/harness.py).

"""

from __future__ import annotations

from typing import Any

import pytest

from soong_agent.application.permissions.plan_mode import (
    PlanModes,
    offered_in_plan_mode,
    plan_mode_in,
    plan_mode_tools,
)
from soong_agent.application.tools.base import Tool
from soong_agent.application.tools.files import file_tools
from soong_agent.application.tools.plans import plan_tools
from soong_agent.application.tools.shell import run_command_tool
from soong_agent.domain.config.schema import PermissionsConfig, PlanConfig, ToolsConfig
from soong_agent.ports.approval import ApprovalRequest, Approver, PlanReview
from soong_agent.ports.events import PermissionDecided, PlanModeChanged, RunEvent
from soong_agent.testing import (
    RecordingApprover,
    ScriptedModel,
    ScriptedProcessRunner,
    ScriptedResponse,
)
from tests.support.harness import Harness

CONFIG = PlanConfig(default_dir="/project/.soong-agent/plans")
SESSION = "ses_000001"  # the first session id SequentialIds gives


@pytest.fixture
def modes() -> PlanModes:
    return PlanModes()


def harness(
    modes: PlanModes,
    script: list[ScriptedResponse],
    approver: Approver | None,
    permissions: PermissionsConfig | None = None,
) -> Harness:
    extra: list[Tool] = [
        *plan_tools(CONFIG),
        *plan_mode_tools(modes, approver=approver, plan=CONFIG),
    ]
    return Harness(
        ScriptedModel(script),
        approver=approver,
        extra_tools=extra,
        permissions=permissions or PermissionsConfig(),
        plan_modes=modes,
    )


def calls(*pairs: tuple[str, dict[str, Any]]) -> ScriptedResponse:
    return ScriptedResponse.tool_calls(*pairs)


ENTER = calls(("enter_plan_mode", {}))
WRITE = calls(("write_file", {"path": "app.py", "content": "print(1)"}))
PLAN = calls(("plan_write", {"name": "the-plan", "content": "# Ship it\n\n1. edit app.py\n"}))
EXIT = calls(("exit_plan_mode", {"plan_name": "the-plan"}))


async def run_all(h: Harness, message: str = "go", session_id: str | None = None) -> list[RunEvent]:
    run = await h.service.start(message, session_id=session_id)
    events = [e async for e in run.events()]
    result = await run.wait()
    assert result.status == "completed", result.reason
    return events


def result_of(h: Harness, request: int) -> tuple[str, bool]:
    block = h.model.calls[request].messages[-1].tool_results[0]
    return block.content, block.is_error


def decisions(events: list[RunEvent]) -> list[tuple[str, str, str]]:
    return [(e.tool, e.decision, e.reason) for e in events if isinstance(e, PermissionDecided)]


def changes(events: list[RunEvent]) -> list[tuple[bool, str, str | None]]:
    return [(e.active, e.source, e.plan) for e in events if isinstance(e, PlanModeChanged)]


async def test_a_write_in_plan_mode_is_refused_by_the_permission_engine(modes: PlanModes) -> None:
    approver = RecordingApprover(default="allow_once")
    h = harness(modes, [ENTER, WRITE, ScriptedResponse.text("ok")], approver)
    events = await run_all(h)
    assert "app.py" not in h.fs.files
    content, is_error = result_of(h, 2)
    assert is_error and "Permission denied" in content and "mode plan is read-only" in content
    tool, decision, reason = decisions(events)[-1]
    assert (tool, decision) == ("write_file", "deny") and "mode plan" in reason
    assert not approver.requests  # refused before anybody is asked
    assert changes(events) == [(True, "enter_plan_mode", None)]
    assert modes.active(SESSION)


@pytest.mark.parametrize("mode", ["bypass", "accept_edits"])
async def test_plan_mode_wins_over_a_permissive_configured_mode(
    modes: PlanModes, mode: Any
) -> None:
    perms = PermissionsConfig(mode=mode)
    h = harness(modes, [ENTER, WRITE, ScriptedResponse.text("ok")], None, perms)
    await run_all(h)
    assert "app.py" not in h.fs.files
    assert "mode plan" in result_of(h, 2)[0]


async def test_commands_are_refused_and_reads_and_plan_tools_run_in_plan_mode(
    modes: PlanModes,
) -> None:
    approver = RecordingApprover(default="deny")  # would refuse anything it is asked
    h = harness(
        modes,
        [
            ENTER,
            calls(("run_command", {"command": "rm -rf /"})),
            calls(("read_file", {"path": "readme.md"})),
            PLAN,
            ScriptedResponse.text("ok"),
        ],
        approver,
    )
    h.fs.files["readme.md"] = b"hello"
    h.extra_tools.append(
        run_command_tool(
            runner=ScriptedProcessRunner(), project="/project", tools=ToolsConfig(), base_env={}
        )
    )
    events = await run_all(h)
    assert [(t, d) for t, d, _ in decisions(events)] == [
        ("enter_plan_mode", "allow_once"),
        ("run_command", "deny"),
        ("read_file", "allow_once"),
        ("plan_write", "allow_once"),
    ]
    assert not approver.requests
    assert "hello" in result_of(h, 3)[0]
    assert ".soong-agent/plans/the-plan.md" in h.fs.files


async def test_approval_leaves_plan_mode_and_the_write_then_runs(modes: PlanModes) -> None:
    approver = RecordingApprover(["allow_once", "allow_once"])  # the plan, then the write
    h = harness(modes, [ENTER, PLAN, EXIT, WRITE, ScriptedResponse.text("done")], approver)
    events = await run_all(h)
    plan_request = approver.requests[0]
    assert plan_request.tool == "exit_plan_mode"
    assert ".soong-agent/plans/the-plan.md" in plan_request.summary
    assert "# Ship it" in plan_request.summary
    assert "1. edit app.py" in plan_request.detail
    content, is_error = result_of(h, 3)
    assert not is_error and "approved" in content and "Plan mode is off" in content
    assert h.fs.files["app.py"] == b"print(1)"
    assert changes(events) == [
        (True, "enter_plan_mode", None),
        (False, "exit_plan_mode", "the-plan"),
    ]
    assert not modes.active(SESSION)


async def test_allow_for_session_approves_the_plan_too(modes: PlanModes) -> None:
    approver = RecordingApprover(["allow_for_session"])
    h = harness(modes, [ENTER, PLAN, EXIT, ScriptedResponse.text("done")], approver)
    await run_all(h)
    assert not modes.active(SESSION)


async def test_denial_keeps_plan_mode_and_tells_the_model_to_keep_planning(
    modes: PlanModes,
) -> None:
    approver = RecordingApprover(["deny"], default="allow_once")
    h = harness(modes, [ENTER, PLAN, EXIT, WRITE, ScriptedResponse.text("ok")], approver)
    events = await run_all(h)
    content, is_error = result_of(h, 3)
    assert is_error and "did not approve" in content and "keep planning" in content
    assert "app.py" not in h.fs.files
    assert "mode plan" in result_of(h, 4)[0]
    assert changes(events) == [(True, "enter_plan_mode", None)]
    assert modes.active(SESSION)


async def test_without_an_approver_plan_mode_stays_and_the_model_is_told(
    modes: PlanModes,
) -> None:
    h = harness(modes, [ENTER, PLAN, EXIT, ScriptedResponse.text("ok")], None)
    await run_all(h)
    content, is_error = result_of(h, 3)
    assert is_error and "no approval callback" in content and "Plan mode stays on" in content
    assert modes.active(SESSION)


async def test_exit_without_the_plan_file_stays_in_plan_mode(modes: PlanModes) -> None:
    approver = RecordingApprover(default="allow_once")
    h = harness(modes, [ENTER, EXIT, ScriptedResponse.text("ok")], approver)
    await run_all(h)
    content, is_error = result_of(h, 2)
    assert is_error and "write it with plan_write first" in content
    assert not approver.requests
    assert modes.active(SESSION)


async def test_a_run_started_in_plan_mode_refuses_writes(modes: PlanModes) -> None:
    h = harness(
        modes, [WRITE, ScriptedResponse.text("ok")], RecordingApprover(default="allow_once")
    )
    run = await h.service.start("go", plan_mode=True)
    events = [e async for e in run.events()]
    assert (await run.wait()).status == "completed"
    assert "app.py" not in h.fs.files
    assert "mode plan" in result_of(h, 1)[0]
    assert changes(events) == [(True, "run_start", None)]


def resumed_in_another_process(h: Harness, script: list[ScriptedResponse]) -> Harness:
    """A harness over the same store, files and ids, with nothing in memory: another process."""
    other = harness(PlanModes(), script, RecordingApprover(default="allow_once"))
    other.store, other.fs, other.ids = h.store, h.fs, h.ids
    return other


async def test_resume_in_another_process_restores_plan_mode_entered_by_the_model(
    modes: PlanModes,
) -> None:
    h = harness(modes, [ENTER, ScriptedResponse.text("planning")], None)
    await run_all(h)
    resumed = resumed_in_another_process(h, [WRITE, ScriptedResponse.text("ok")])
    events = await run_all(resumed, "now write", session_id=SESSION)
    assert "app.py" not in resumed.fs.files
    assert "mode plan" in result_of(resumed, 1)[0]
    assert changes(events) == [(True, "resume", None)]


async def test_resume_in_another_process_keeps_plan_mode_of_a_run_started_in_it(
    modes: PlanModes,
) -> None:
    """`run --plan` whose model never touched the plan tools: nothing in the messages shows the
    mode, the session's record does (the hole: a second process without --plan wrote)."""
    h = harness(modes, [ScriptedResponse.text("I will look first")], None)
    run = await h.service.start("plan it", plan_mode=True)
    assert (await run.wait()).status == "completed"
    assert plan_mode_in(await h.store.all_messages(SESSION)) is None
    resumed = resumed_in_another_process(h, [WRITE, ScriptedResponse.text("ok")])
    await run_all(resumed, "now write", session_id=SESSION)
    assert "app.py" not in resumed.fs.files
    # and a third process, after that second run, still finds it in plan mode
    third = resumed_in_another_process(h, [WRITE, ScriptedResponse.text("ok")])
    await run_all(third, "write now", session_id=SESSION)
    assert "app.py" not in third.fs.files


async def test_resume_after_an_approved_plan_is_not_in_plan_mode(modes: PlanModes) -> None:
    approver = RecordingApprover(["allow_once"])
    h = harness(modes, [ENTER, PLAN, EXIT, ScriptedResponse.text("done")], approver)
    await run_all(h)
    assert plan_mode_in(await h.store.all_messages(SESSION)) is False
    resumed = resumed_in_another_process(h, [WRITE, ScriptedResponse.text("ok")])
    events = await run_all(resumed, "carry it out", session_id=SESSION)
    assert resumed.fs.files["app.py"] == b"print(1)"
    assert changes(events) == []


async def test_a_refused_exit_does_not_count_as_leaving_on_resume(modes: PlanModes) -> None:
    h = harness(modes, [ENTER, PLAN, EXIT, ScriptedResponse.text("ok")], RecordingApprover())
    await run_all(h)
    assert plan_mode_in(await h.store.all_messages(SESSION)) is True
    resumed = resumed_in_another_process(h, [WRITE, ScriptedResponse.text("ok")])
    await run_all(resumed, "write", session_id=SESSION)
    assert "app.py" not in resumed.fs.files


async def test_configured_plan_mode_is_kept_by_the_session_after_the_setting_changes() -> None:
    """`permissions.mode = "plan"` enters plan mode like any other route: the session stays
    in it until a plan is approved, even once the configuration says `default` again."""
    h = harness(
        PlanModes(), [ScriptedResponse.text("looked")], None, PermissionsConfig(mode="plan")
    )
    events = await run_all(h)
    assert changes(events) == [(True, "config", None)]
    resumed = resumed_in_another_process(h, [WRITE, ScriptedResponse.text("ok")])
    assert resumed.permissions.mode == "default"
    await run_all(resumed, "write", session_id=SESSION)
    assert "app.py" not in resumed.fs.files


def test_a_child_session_is_in_plan_mode_while_its_parent_is() -> None:
    modes = PlanModes()
    modes.set("ses_parent", True)
    fields = modes.begin_run("ses_child", parent="ses_parent")
    assert fields is not None and fields["source"] == "parent"
    assert modes.active("ses_child") and not modes.own("ses_child")
    assert modes.active("ses_grandchild") is False
    modes.link("ses_grandchild", "ses_child")
    assert modes.active("ses_grandchild")
    modes.set("ses_parent", False)  # the parent's plan was approved: its children are free
    assert not modes.active("ses_child") and not modes.active("ses_grandchild")


async def test_configured_plan_mode_allows_the_plan_tools_and_refuses_writes() -> None:
    modes = PlanModes()  # not wired: only permissions.mode = "plan"
    approver = RecordingApprover(default="allow_once")
    h = harness(
        modes,
        [PLAN, WRITE, ScriptedResponse.text("ok")],
        approver,
        PermissionsConfig(mode="plan"),
    )
    events = await run_all(h)
    assert [(t, d) for t, d, _ in decisions(events)] == [
        ("plan_write", "allow_once"),
        ("write_file", "deny"),
    ]
    assert ".soong-agent/plans/the-plan.md" in h.fs.files
    assert "app.py" not in h.fs.files


def test_plan_mode_offers_read_only_tools_and_the_plan_tools() -> None:
    modes = PlanModes()
    every = [
        *file_tools(),
        *plan_tools(CONFIG),
        *plan_mode_tools(modes, approver=None, plan=CONFIG),
    ]
    offered = {t.name for t in offered_in_plan_mode(every)}
    assert "write_file" not in offered and "edit_file" not in offered
    assert {"read_file", "plan_write", "plan_read", "exit_plan_mode"} <= offered


async def test_plan_tools_are_not_asked_about_in_plan_mode_even_when_reads_ask(
    modes: PlanModes,
) -> None:
    approver = RecordingApprover(["allow_once", "allow_once"])  # entering, then the plan
    perms = PermissionsConfig(readonly_default="ask")
    h = harness(modes, [ENTER, PLAN, EXIT, ScriptedResponse.text("ok")], approver, perms)
    h.permissions = perms
    await run_all(h)
    assert [r.tool for r in approver.requests] == ["enter_plan_mode", "exit_plan_mode"]
    assert not modes.active(SESSION)


class NotingReviewer(RecordingApprover):
    """Answers calls like RecordingApprover and reviews plans: keep planning, with a note."""

    def __init__(self, review: PlanReview) -> None:
        super().__init__(default="allow_once")
        self.review = review
        self.plans: list[ApprovalRequest] = []

    async def review_plan(self, request: ApprovalRequest) -> PlanReview:
        self.plans.append(request)
        return self.review


async def test_a_plan_sent_back_with_a_note_reaches_the_model(modes: PlanModes) -> None:
    reviewer = NotingReviewer(PlanReview(approved=False, note="split step 2 in two"))
    h = harness(modes, [ENTER, PLAN, EXIT, ScriptedResponse.text("ok")], reviewer)
    await run_all(h)
    content, is_error = result_of(h, 3)
    assert is_error and 'The user says: "split step 2 in two"' in content
    assert modes.active(SESSION)
    assert reviewer.plans and reviewer.plans[0].tool == "exit_plan_mode"
    assert reviewer.requests == []  # the plan went to review_plan, not decide


async def test_a_reviewer_approving_the_plan_leaves_plan_mode(modes: PlanModes) -> None:
    reviewer = NotingReviewer(PlanReview(approved=True))
    h = harness(modes, [ENTER, PLAN, EXIT, ScriptedResponse.text("ok")], reviewer)
    await run_all(h)
    assert not modes.active(SESSION)


async def test_the_terminal_reads_a_note_and_a_callback_may_return_one() -> None:
    import io

    from soong_agent.adapters.approvals.callback import CallbackApprover
    from soong_agent.adapters.approvals.terminal import TerminalApprover

    request = ApprovalRequest("exit_plan_mode", "c", "read_only", "approve the plan", "nothing")
    written: list[str] = []
    sent_back = TerminalApprover(stdin=io.StringIO("2\nuse smaller steps\n"), write=written.append)
    assert await sent_back.review_plan(request) == PlanReview(False, "use smaller steps")
    assert "keep planning" in "".join(written)
    approving = TerminalApprover(stdin=io.StringIO("1\n"), write=written.append)
    assert await approving.review_plan(request) == PlanReview(True)
    closed = TerminalApprover(stdin=io.StringIO(""), write=written.append)
    assert await closed.review_plan(request) == PlanReview(False)
    noted = CallbackApprover(lambda r: ("deny", " too big "))
    assert await noted.review_plan(request) == PlanReview(False, "too big")
    plain = CallbackApprover(lambda r: "allow_once")
    assert await plain.review_plan(request) == PlanReview(True)
