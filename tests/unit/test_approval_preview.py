"""What an approval question shows below its summary (`ApprovalRequest.detail`), with fakes.

A file write or edit is shown as the unified diff of the change the tool would make, a command
line as its analysed parts, a fetch as its URL and host. The preview is computed only when a
person is about to be asked; one that fails is reported in the detail and the question is
still asked.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from soong_agent.application.permissions.approval_detail import shell_detail
from soong_agent.application.permissions.gate import PermissionGate
from soong_agent.application.runs.handle import Run
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput
from soong_agent.application.tools.files import DIFF_MAX_BYTES, unified_diff
from soong_agent.application.tools.shell import run_command_tool
from soong_agent.application.tools.web import web_fetch_tool
from soong_agent.domain import permissions
from soong_agent.domain.config.schema import PermissionsConfig, ToolsConfig
from soong_agent.ports.approval import ApprovalRequest, Decision, printable
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.ports.shell import ShellAnalysis, SimpleCommand
from soong_agent.ports.storage import RunInfo, SessionInfo
from soong_agent.testing import (
    CallbackApprover,
    FixedClock,
    InMemoryFileSystem,
    InMemorySessionStore,
    RecordingApprover,
    ScriptedModel,
    ScriptedProcessRunner,
    ScriptedResponse,
    ScriptedWebFetcher,
    SequentialIds,
    SimpleShellAnalyzer,
)
from tests.support.harness import Harness

LINES = "one\ntwo\nthree\n"


async def asked(
    *calls: tuple[str, dict[str, Any]],
    files: dict[str, str | bytes] | None = None,
    answer: Decision = "allow_once",
    extra_tools: list[Tool] | None = None,
    permissions_config: PermissionsConfig | None = None,
) -> tuple[list[ApprovalRequest], Harness]:
    """Run the calls in one turn, every question answered `answer`; the questions asked."""
    model = ScriptedModel([ScriptedResponse.tool_calls(*calls), ScriptedResponse.text("done")])
    approver = RecordingApprover(default=answer)
    h = Harness(
        model,
        approver=approver,
        extra_tools=extra_tools or [],
        permissions=permissions_config or PermissionsConfig(),
    )
    for path, content in (files or {}).items():
        h.fs.files[path] = content.encode() if isinstance(content, str) else content
    result = await (await h.service.start("go")).wait()
    assert result.status == "completed", result
    return approver.requests, h


def edit(path: str, old: str, new: str, **more: Any) -> tuple[str, dict[str, Any]]:
    return ("edit_file", {"path": path, "old_string": old, "new_string": new, **more})


def write(path: str, content: str) -> tuple[str, dict[str, Any]]:
    return ("write_file", {"path": path, "content": content})


async def test_an_edit_is_asked_with_its_removed_and_added_lines() -> None:
    (request,), h = await asked(edit("a.txt", "two", "TWO"), files={"a.txt": LINES})
    assert request.summary == "edit a.txt (replace 3 characters)"
    assert request.detail.split("\n") == [
        "--- a/a.txt",
        "+++ b/a.txt",
        "@@ -1,3 +1,3 @@",
        " one",
        "-two",
        "+TWO",
        " three",
    ]
    assert h.fs.files["a.txt"] == b"one\nTWO\nthree\n"


async def test_the_diff_shown_is_the_change_the_edit_makes() -> None:
    text = "x = 1\ny = x\nz = x + x\n"
    (request,), h = await asked(edit("m.py", "x", "value", replace_all=True), files={"m.py": text})
    after = h.fs.files["m.py"].decode()
    shown_after = [line[1:] for line in request.detail.split("\n")[3:] if line[:1] in "+ "]
    shown_before = [line[1:] for line in request.detail.split("\n")[3:] if line[:1] in "- "]
    assert shown_after == after.splitlines()
    assert shown_before == text.splitlines()


async def test_a_new_file_is_shown_as_its_lines() -> None:
    (request,), _ = await asked(write("notes/new.md", "# Title\n\nbody\n"))
    assert request.detail.split("\n") == [
        "--- /dev/null",
        "+++ b/notes/new.md",
        "@@ -0,0 +1,3 @@",
        "+# Title",
        "+",
        "+body",
    ]


async def test_a_replaced_file_shows_the_diff_and_a_missing_final_newline() -> None:
    (request,), _ = await asked(write("a.txt", "one\ntwo\nfour"), files={"a.txt": LINES})
    lines = request.detail.split("\n")
    assert lines[:3] == ["--- a/a.txt", "+++ b/a.txt", "@@ -1,3 +1,3 @@"]
    assert lines[3:] == [" one", " two", "-three", "+four", "\\ No newline at end of file"]


async def test_writing_the_same_content_says_there_is_no_change() -> None:
    (request,), _ = await asked(write("a.txt", LINES), files={"a.txt": LINES})
    assert request.detail == "(no change: a.txt already holds this content)"


async def test_a_binary_or_huge_file_is_described_not_diffed() -> None:
    (binary,), _ = await asked(write("b.bin", "text"), files={"b.bin": b"\x00\x01\x02"})
    assert binary.detail.startswith("(no diff: b.bin is a binary file of 3 bytes")
    huge = "x\n" * (DIFF_MAX_BYTES // 2 + 1)
    (big,), _ = await asked(edit("big.txt", "x", "y", replace_all=True), files={"big.txt": huge})
    assert big.detail == f"(no diff: big.txt is {len(huge)} bytes, too big to compare)"


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (edit("a.txt", "four", "4"), "old_string was not found in a.txt; nothing changed."),
        (edit("a.txt", "o", "0"), "old_string occurs 2 times in a.txt (lines 1, 2)"),
        (edit("gone.txt", "a", "b"), "gone.txt does not exist"),
    ],
)
async def test_an_edit_that_would_fail_says_so_and_is_still_asked(
    call: tuple[str, dict[str, Any]], said: str
) -> None:
    (request,), _ = await asked(call, files={"a.txt": LINES})
    assert request.detail.startswith("(the edit would fail: ")
    assert said in request.detail


class _Args(ToolArgs):
    path: str


def probe_tool(preview: Any) -> tuple[Tool, list[str]]:
    """A write tool with the given preview; what it did is recorded in the list."""
    ran: list[str] = []

    async def handler(args: _Args, ctx: ToolContext) -> ToolOutput:
        ran.append(args.path)
        return ToolOutput("done")

    tool = Tool("probe", "a probe", _Args, handler, permission_class="write", preview=preview)
    return tool, ran


async def test_a_failing_preview_is_reported_and_the_question_still_asked() -> None:
    async def broken(args: BaseModel, ctx: ToolContext) -> str:
        raise RuntimeError("the disk is on fire")

    tool, ran = probe_tool(broken)
    (request,), _ = await asked(("probe", {"path": "x"}), extra_tools=[tool])
    assert request.detail == "(no preview: RuntimeError: the disk is on fire)"
    assert ran == ["x"]  # answered allow_once: the call ran


@pytest.mark.parametrize(
    "config",
    [
        PermissionsConfig(allow=["probe"]),
        PermissionsConfig(deny=["probe"]),
        PermissionsConfig(mode="bypass"),
    ],
    ids=["allowed", "denied", "bypass"],
)
async def test_no_preview_when_nobody_is_asked(config: PermissionsConfig) -> None:
    previewed: list[str] = []

    async def counting(args: BaseModel, ctx: ToolContext) -> str:
        previewed.append("yes")
        return "detail"

    tool, _ = probe_tool(counting)
    requests, _ = await asked(
        ("probe", {"path": "x"}), extra_tools=[tool], permissions_config=config
    )
    assert requests == [] and previewed == []


async def test_control_characters_of_a_file_are_shown_escaped() -> None:
    sneaky = "ok\x1b[2K\rrm -rf ~\u202e\n"
    (request,), _ = await asked(write("s.sh", sneaky))
    assert "\x1b" not in request.detail and "\r" not in request.detail
    assert "+ok\\x1b[2K\\x0drm -rf ~\\u202e" in request.detail
    assert printable("tab\tand\nnewline") == "tab\tand\nnewline"


async def test_the_sdk_callback_receives_the_detail() -> None:
    seen: list[ApprovalRequest] = []

    def callback(request: ApprovalRequest) -> Decision:
        seen.append(request)
        return "allow_once"

    model = ScriptedModel(
        [ScriptedResponse.tool_calls(edit("a.txt", "two", "2")), ScriptedResponse.text("ok")]
    )
    h = Harness(model, approver=CallbackApprover(callback))
    h.fs.files["a.txt"] = LINES.encode()
    await (await h.service.start("go")).wait()
    (request,) = seen
    assert "-two\n+2" in request.detail
    assert h.fs.files["a.txt"] == b"one\n2\nthree\n"


def unified(before: str | None, after: str) -> list[str]:
    return unified_diff(before, after, "f.txt").split("\n")


def test_unified_diff_splits_lines_at_newlines_only() -> None:
    # a form feed inside a line is not a line break (str.splitlines would make it one)
    assert unified("a\x0cb\n", "a\x0cc\n")[3:] == ["-a\x0cb", "+a\x0cc"]
    assert unified(None, "") == ["(a new empty file f.txt)"]
    assert unified("a\r\nb\r\n", "a\r\nc\r\n")[3:] == [" a", "-b", "+c"]


# --- the permission gate on its own: command lines and fetches ---------------------------


def recorder() -> RunRecorder:
    return RunRecorder(
        run=Run(session_id="ses_1", run_id="run_1", cancel_timeout_s=1),
        store=InMemorySessionStore(),
        clock=FixedClock(),
        ids=SequentialIds(),
        session=SessionInfo(id="ses_1", project_dir="/project", created_at=0, updated_at=0),
        run_info=RunInfo(id="run_1", session_id="ses_1", started_at=0),
        history=[],
    )


async def ask_gate(tool: Tool, arguments: dict[str, Any]) -> ApprovalRequest:
    approver = RecordingApprover(default="deny")
    gate = PermissionGate(
        approver=approver,
        policy=PermissionsConfig(),
        grants=permissions.SessionGrants(),
        analyzer=SimpleShellAnalyzer(),
    )
    fs = InMemoryFileSystem({"src/main.c": "int main;"})
    call = ToolCallBlock(id="c1", name=tool.name, arguments=json.dumps(arguments))
    args = tool.args_model.model_validate(arguments)
    ctx = ToolContext(fs=fs, session_id="ses_1", run_id="run_1")
    ruling = await gate.check(call, tool, args, ctx, recorder())
    assert ruling.decision == "deny"
    (request,) = approver.requests
    return request


def shell() -> Tool:
    return run_command_tool(
        runner=ScriptedProcessRunner(), project="/project", tools=ToolsConfig(), base_env={}
    )


async def test_a_compound_command_shows_each_command_and_its_redirections() -> None:
    request = await ask_gate(shell(), {"command": "cd src && make all > build.log | tee copy"})
    assert request.detail.split("\n") == [
        "runs 3 commands:",
        "  cd src",
        "  make all  (writes to build.log)",
        "  tee copy",
    ]


async def test_one_plain_command_needs_no_detail() -> None:
    request = await ask_gate(shell(), {"command": "make all"})
    assert request.summary == "run: make all"
    assert request.detail == ""


async def test_a_multi_line_command_is_shown_whole() -> None:
    request = await ask_gate(shell(), {"command": "make all\nmake install"})
    assert request.detail.split("\n")[:3] == ["command:", "  make all", "  make install"]
    assert "runs 2 commands:" in request.detail


def test_shell_detail_marks_words_and_problems_it_could_not_read() -> None:
    analysis = ShellAnalysis(
        (SimpleCommand(("echo", None, "two words")), SimpleCommand(("cat",), reads_from=("?",))),
        ok=False,
        problems=("a construct the analyser does not model",),
    )
    assert shell_detail("echo $X 'two words'; cat < $F", analysis, "run: echo …").split("\n") == [
        "command:",
        "  echo $X 'two words'; cat < $F",
        "runs 2 commands:",
        "  echo ? 'two words'",
        "  cat  (reads ?)",
        "  (? stands for a word only known when the line runs)",
        "not fully understood: a construct the analyser does not model",
    ]


async def test_a_fetch_shows_its_url_and_host() -> None:
    tool = web_fetch_tool(fetcher=ScriptedWebFetcher(), max_bytes=1000)
    request = await ask_gate(tool, {"url": "https://Docs.Example.com:8443/a?b=1"})
    assert request.detail == "URL: https://Docs.Example.com:8443/a?b=1\nhost: docs.example.com"
    lookalike = await ask_gate(tool, {"url": "https://exаmple.com/"})  # a Cyrillic "а"
    assert lookalike.detail.endswith("host: exаmple.com (ASCII form: xn--exmple-4nf.com)")
