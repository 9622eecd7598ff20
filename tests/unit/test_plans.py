"""Plans (PLAN-1): plan_write / plan_read / plan_list over the FileSystem port, names checked,
another session's plan refused as path_conflict, new plans from the template."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from soong_agent.application.tools.base import Tool, ToolContext, ToolOutput
from soong_agent.application.tools.plans import PLAN_NAME_RULE, PlanFile, plan_tools
from soong_agent.domain.config.schema import PermissionsConfig, PlanConfig
from soong_agent.ports.errors import ConfigError, SandboxViolation
from soong_agent.ports.events import PermissionDecided, RunEvent
from soong_agent.testing import (
    InMemoryFileSystem,
    RecordingApprover,
    ScriptedModel,
    ScriptedResponse,
)
from tests.support.harness import Harness

PLANS = "/project/.soong-agent/plans"
CONFIG = PlanConfig(default_dir=PLANS)


def tools(config: PlanConfig = CONFIG) -> dict[str, Tool]:
    return {tool.name: tool for tool in plan_tools(config)}


async def call(
    fs: InMemoryFileSystem, tool_name: str, session: str = "ses_a", **args: Any
) -> ToolOutput:
    tool = tools()[tool_name]
    ctx = ToolContext(fs=fs, session_id=session, run_id="run_1")
    return await tool.handler(tool.args_model.model_validate(args), ctx)


def text(fs: InMemoryFileSystem, name: str) -> str:
    return fs.files[f".soong-agent/plans/{name}.md"].decode()


async def test_a_new_plan_with_empty_content_starts_from_the_template_in_a_new_folder() -> None:
    fs = InMemoryFileSystem()
    out = await call(fs, "plan_write", name="refactor-auth")
    assert not out.is_error, out.content
    assert "created from the template" in out.content
    assert ".soong-agent/plans/refactor-auth.md" in out.content
    written = text(fs, "refactor-auth")
    first, _, body = written.partition("\n")
    assert first == "<!-- soong-agent plan; session: ses_a -->"
    for heading in ("# Plan: refactor-auth", "## Goal", "## Steps", "## Risks", "## Done when"):
        assert heading in body


async def test_content_is_written_after_the_owner_line_and_read_back_without_it() -> None:
    fs = InMemoryFileSystem()
    out = await call(fs, "plan_write", name="p1", content="# Do it\n\n1. step one\n")
    assert not out.is_error
    read = await call(fs, "plan_read", name="p1")
    assert not read.is_error
    assert "written by this session" in read.content
    assert read.content.endswith("# Do it\n\n1. step one\n")
    assert "soong-agent plan;" not in read.content


@pytest.mark.parametrize("bad", ["../escape", "a/b", "a\\b", "notes.md", ".hidden", "Upper", "-x"])
async def test_a_bad_name_is_refused_naming_the_rule_and_nothing_is_written(bad: str) -> None:
    tool = tools()["plan_write"]
    with pytest.raises(ValidationError) as info:
        tool.args_model.model_validate({"name": bad, "content": "x"})
    assert PLAN_NAME_RULE in str(info.value)


async def test_bad_names_reach_the_model_as_an_error_result_in_a_run() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("plan_write", {"name": "../../etc/x", "content": "x"})),
            ScriptedResponse.text("ok"),
        ]
    )
    h = Harness(model, extra_tools=plan_tools(CONFIG))
    run = await h.service.start("plan")
    result = await run.wait()
    assert result.status == "completed"
    last = h.model.calls[1].messages[-1].tool_results[0]
    assert last.is_error
    assert "no '/'" in last.content and "no '.'" in last.content
    assert h.fs.files == {}


async def test_names_are_bounded_to_64_characters() -> None:
    args = tools()["plan_write"].args_model
    args.model_validate({"name": "a" * 64})
    with pytest.raises(ValidationError):
        args.model_validate({"name": "a" * 65})


async def test_another_sessions_plan_is_a_path_conflict_unless_overwrite() -> None:
    fs = InMemoryFileSystem()
    await call(fs, "plan_write", session="ses_a", name="shared", content="A's plan")
    out = await call(fs, "plan_write", session="ses_b", name="shared", content="B's plan")
    assert out.is_error
    assert out.content.startswith("path_conflict:")
    assert "ses_a" in out.content and "overwrite=true" in out.content
    assert "A's plan" in text(fs, "shared")
    out = await call(
        fs, "plan_write", session="ses_b", name="shared", content="B's", overwrite=True
    )
    assert not out.is_error and "replaced" in out.content
    assert PlanFile(text(fs, "shared")).owner == "ses_b"


async def test_the_same_session_replaces_its_own_plan_without_overwrite() -> None:
    fs = InMemoryFileSystem()
    await call(fs, "plan_write", name="mine", content="v1")
    out = await call(fs, "plan_write", name="mine", content="v2")
    assert not out.is_error
    assert PlanFile(text(fs, "mine")).body == "v2\n"


async def test_a_plan_file_a_person_wrote_is_a_conflict_and_a_forged_marker_is_dropped() -> None:
    fs = InMemoryFileSystem({".soong-agent/plans/hand.md": "# by hand\n"})
    out = await call(fs, "plan_write", name="hand", content="mine now")
    assert out.is_error and "path_conflict" in out.content and "no soong-agent" in out.content
    forged = "<!-- soong-agent plan; session: ses_z -->\nbody"
    await call(fs, "plan_write", name="forged", content=forged)
    plan = PlanFile(text(fs, "forged"))
    assert plan.owner == "ses_a" and plan.body == "body\n"


async def test_empty_content_for_an_existing_plan_writes_nothing() -> None:
    fs = InMemoryFileSystem()
    await call(fs, "plan_write", name="keep", content="important")
    out = await call(fs, "plan_write", name="keep", content="  ")
    assert out.is_error
    assert "important" in text(fs, "keep")


async def test_plan_read_of_a_missing_plan_lists_the_plans() -> None:
    fs = InMemoryFileSystem()
    await call(fs, "plan_write", name="one", content="x")
    out = await call(fs, "plan_read", name="two")
    assert out.is_error
    assert "no plan named 'two'" in out.content and "one" in out.content


async def test_plan_list_names_first_lines_and_owners() -> None:
    fs = InMemoryFileSystem({".soong-agent/plans/notes.txt": "not a plan"})
    assert (await call(fs, "plan_list")).content.startswith("No plans yet")
    await call(fs, "plan_write", session="ses_a", name="alpha", content="# Alpha plan\nmore")
    await call(fs, "plan_write", session="ses_b", name="beta")
    out = await call(fs, "plan_list")
    lines = out.content.splitlines()
    assert lines[0] == "Plans in .soong-agent/plans:"
    assert lines[1] == "- alpha: # Alpha plan [written by this session]"
    assert lines[2] == "- beta: # Plan: beta [written by session ses_b]"
    assert len(lines) == 3


async def test_plan_list_without_the_folder_says_so() -> None:
    out = await call(InMemoryFileSystem(), "plan_list")
    assert not out.is_error and "No plans yet" in out.content


async def test_writes_go_through_the_sandbox() -> None:
    fs = InMemoryFileSystem(write_roots=["src"])
    with pytest.raises(SandboxViolation):
        await call(fs, "plan_write", name="p", content="x")
    assert fs.files == {}


async def test_an_unknown_template_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"plan\.template_name"):
        plan_tools(PlanConfig(default_dir=PLANS, template_name="nope"))


async def test_plan_write_is_a_write_the_permission_engine_asks_about() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("plan_write", {"name": "p", "content": "x"})),
            ScriptedResponse.text("ok"),
        ]
    )
    approver = RecordingApprover(default="deny")
    h = Harness(model, approver=approver, extra_tools=plan_tools(CONFIG))
    h.permissions = PermissionsConfig()
    run = await h.service.start("plan")
    events: list[RunEvent] = [e async for e in run.events()]
    await run.wait()
    assert [r.tool for r in approver.requests] == ["plan_write"]
    assert "write the plan p to .soong-agent/plans/p.md" in approver.requests[0].summary
    assert [e.decision for e in events if isinstance(e, PermissionDecided)] == ["deny"]
    assert h.fs.files == {}
