"""The run loop with fakes of every port: what a user of the SDK would notice."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from pydantic import Field

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput
from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.ports.errors import ProviderError, SessionNotFound
from soong_agent.ports.events import (
    ErrorEvent,
    PermissionAsked,
    PermissionDecided,
    RunFinished,
    RunStarted,
    TextDeltaEvent,
    ToolResultEvent,
)
from soong_agent.ports.messages import Message, TextBlock, ToolCallBlock
from soong_agent.ports.storage import RunInfo, SessionInfo, TurnCommit
from soong_agent.testing import RecordingApprover, ScriptedModel, ScriptedResponse
from tests.support.harness import Harness, assert_every_call_answered

pytestmark = pytest.mark.asyncio


def write(path: str, content: str = "hello") -> tuple[str, dict[str, str]]:
    return ("write_file", {"path": path, "content": content})


async def test_text_answer_streams_and_is_stored() -> None:
    h = Harness(ScriptedModel([ScriptedResponse.text("Hello there", pieces=3)]))
    run = await h.service.start("hi")
    events = [e async for e in run.events()]
    result = await run.wait()
    assert result.status == "completed"
    assert result.final_text == "Hello there"
    assert isinstance(events[0], RunStarted) and isinstance(events[-1], RunFinished)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert "".join(e.text for e in events if isinstance(e, TextDeltaEvent)) == "Hello there"
    stored = await h.store.active_path(run.session_id)
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].parent_id == stored[0].id
    assert [e.seq for e in await h.store.run_events(run.run_id)] == [e.seq for e in events]


async def test_write_allowed_once_changes_the_file_and_model_sees_result() -> None:
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(write("notes/a.txt")), ScriptedResponse.text("done")]
    )
    approver = RecordingApprover(["allow_once"])
    h = Harness(model, approver=approver)
    result = await (await h.service.start("write it")).wait()
    assert result.status == "completed"
    assert h.fs.files["notes/a.txt"] == b"hello"
    assert approver.requests[0].tool == "write_file"
    assert "notes/" in approver.requests[0].session_scope
    tool_msg = model.calls[1].messages[-1]
    assert tool_msg.role == "tool" and not tool_msg.tool_results[0].is_error
    assert_every_call_answered(model.calls)


async def test_denied_write_leaves_no_file_and_tells_the_model() -> None:
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(write("a.txt")), ScriptedResponse.text("ok")]
    )
    h = Harness(model, approver=RecordingApprover(["deny"]))
    run = await h.service.start("write it")
    await run.wait()
    assert "a.txt" not in h.fs.files
    result_block = model.calls[1].messages[-1].tool_results[0]
    assert result_block.is_error and "denied" in result_block.content.lower()
    decided = [e for e in await h.store.run_events(run.run_id) if isinstance(e, PermissionDecided)]
    assert decided[0].decision == "deny" and decided[0].reason


@pytest.mark.parametrize(("setting", "written"), [("deny", False), ("allow", True)])
async def test_without_approver_write_without_callback_decides(setting: str, written: bool) -> None:
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(write("a.txt")), ScriptedResponse.text("ok")]
    )
    h = Harness(
        model,
        approver=None,
        permissions=PermissionsConfig(write_without_callback=setting),  # type: ignore[arg-type]
    )
    run = await h.service.start("write it")
    await run.wait()
    assert ("a.txt" in h.fs.files) is written
    events = await h.store.run_events(run.run_id)
    assert not [e for e in events if isinstance(e, PermissionAsked)]
    decided = [e for e in events if isinstance(e, PermissionDecided)]
    assert "write_without_callback" in decided[0].reason


async def test_allow_for_session_covers_the_folder_only() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(write("a/x.txt")),
            ScriptedResponse.tool_calls(write("a/y.txt")),
            ScriptedResponse.tool_calls(write("b/z.txt")),
            ScriptedResponse.text("done"),
        ]
    )
    approver = RecordingApprover(["allow_for_session", "deny"])
    h = Harness(model, approver=approver)
    await (await h.service.start("go")).wait()
    assert h.fs.files.keys() >= {"a/x.txt", "a/y.txt"}
    assert "b/z.txt" not in h.fs.files
    assert [r.summary for r in approver.requests] == [
        "write 5 bytes to a/x.txt",
        "write 5 bytes to b/z.txt",
    ]


async def test_session_grant_survives_into_the_next_run_of_the_same_session() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(write("x.txt")),
            ScriptedResponse.text("one"),
            ScriptedResponse.tool_calls(write("y.txt")),
            ScriptedResponse.text("two"),
        ]
    )
    approver = RecordingApprover(["allow_for_session"])
    h = Harness(model, approver=approver)
    first = await (await h.service.start("one")).wait()
    await (await h.service.start("two", session_id=first.session_id)).wait()
    assert len(approver.requests) == 1
    assert "y.txt" in h.fs.files


@pytest.mark.parametrize(
    ("call", "problem"),
    [
        (ToolCallBlock(id="c1", name="write_file", arguments="{not json"), "not valid json"),
        (ToolCallBlock(id="c1", name="write_file", arguments="[1]"), "json object"),
        (ToolCallBlock(id="c1", name="write_file", arguments='{"content": "x"}'), "path"),
        (ToolCallBlock(id="c1", name="nope", arguments="{}"), "unknown tool"),
    ],
)
async def test_bad_tool_calls_become_error_results(call: ToolCallBlock, problem: str) -> None:
    model = ScriptedModel([ScriptedResponse.tool_calls(call), ScriptedResponse.text("sorry")])
    h = Harness(model)
    result = await (await h.service.start("go")).wait()
    assert result.status == "completed"
    block = model.calls[1].messages[-1].tool_results[0]
    assert block.is_error and problem in block.content.lower()
    assert h.fs.files == {}


async def test_max_tokens_continues_then_is_bounded() -> None:
    cut = ScriptedResponse.text("part ", stop_reason="max_tokens")
    model = ScriptedModel([cut, ScriptedResponse.text("end")])
    h = Harness(model)
    result = await (await h.service.start("long")).wait()
    assert result.final_text == "part end"
    assert model.calls[1].messages[-1].kind == "continuation"

    endless = ScriptedModel(default=cut)
    h2 = Harness(endless, max_continuations=2)
    result2 = await (await h2.service.start("long")).wait()
    assert len(endless.calls) == 3
    assert result2.status == "completed" and "token limit" in (result2.reason or "")


async def test_provider_error_fails_the_run_and_keeps_history_valid() -> None:
    err = ProviderError("boom", kind="server", provider="openai", base_url="http://x", status=500)
    model = ScriptedModel([ScriptedResponse.tool_calls(("list_dir", {})), err])
    h = Harness(model)
    run = await h.service.start("go")
    result = await run.wait()
    assert result.status == "failed" and result.error is err
    events = await h.store.run_events(run.run_id)
    assert any(isinstance(e, ErrorEvent) and e.fatal and e.kind == "server" for e in events)
    stored = await h.store.active_path(run.session_id)
    assert [m.role for m in stored] == ["user", "assistant", "tool"]


class SlowArgs(ToolArgs):
    seconds: float = Field(default=5.0)


def slow_tool(name: str, counter: dict[str, int], permission: str = "read_only") -> Tool:
    async def handler(args: SlowArgs, ctx: ToolContext) -> ToolOutput:
        counter["now"] = counter.get("now", 0) + 1
        counter["max"] = max(counter.get("max", 0), counter["now"])
        try:
            await asyncio.sleep(args.seconds)
        finally:
            counter["now"] -= 1
        return ToolOutput("slept")

    return Tool(name, "sleeps", SlowArgs, handler, permission_class=permission)  # type: ignore[arg-type]


async def test_cancel_during_a_tool_synthesises_its_result() -> None:
    counter: dict[str, int] = {}
    model = ScriptedModel([ScriptedResponse.tool_calls(("slow", {"seconds": 30}))])
    h = Harness(model, extra_tools=[slow_tool("slow", counter)])
    run = await h.service.start("go")
    async for event in run.events():
        if event.type == "tool_call_requested":
            break
    await asyncio.sleep(0.01)
    result = await run.cancel()
    assert result is not None and result.status == "cancelled"
    stored = await h.store.active_path(run.session_id)
    assert [m.role for m in stored] == ["user", "assistant", "tool"]
    assert stored[-1].tool_results[0].is_error
    assert (await h.store.list_runs(run.session_id))[0].status == "cancelled"


async def test_cancel_during_streaming_keeps_partial_text() -> None:
    model = ScriptedModel([ScriptedResponse.text("abcdefghij", pieces=10, delay_s=0.05)])
    h = Harness(model)
    run = await h.service.start("go")
    seen = 0
    async for event in run.events():
        if isinstance(event, TextDeltaEvent):
            seen += 1
            if seen == 3:
                break
    result = await run.cancel()
    assert result is not None and result.status == "cancelled"
    stored = await h.store.active_path(run.session_id)
    assert stored[-1].role == "assistant" and stored[-1].text.startswith("abc")
    assert result.final_text == stored[-1].text  # the result says what was said, too


async def test_read_only_calls_of_one_turn_run_concurrently() -> None:
    counter: dict[str, int] = {}
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("slow", {"seconds": 0.05}), ("slow", {"seconds": 0.05})),
            ScriptedResponse.text("done"),
        ]
    )
    h = Harness(model, extra_tools=[slow_tool("slow", counter)])
    await (await h.service.start("go")).wait()
    assert counter["max"] == 2
    assert_every_call_answered(model.calls)


async def test_effectful_calls_run_one_at_a_time() -> None:
    counter: dict[str, int] = {}
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("slow", {"seconds": 0.02}), ("slow", {"seconds": 0.02})),
            ScriptedResponse.text("done"),
        ]
    )
    tool = slow_tool("slow", counter, permission="exec")
    h = Harness(model, extra_tools=[tool], approver=RecordingApprover(default="allow_once"))
    await (await h.service.start("go")).wait()
    assert counter["max"] == 1


async def test_resume_sends_the_earlier_history() -> None:
    model = ScriptedModel([ScriptedResponse.text("first answer"), ScriptedResponse.text("second")])
    h = Harness(model)
    first = await (await h.service.start("first question")).wait()
    second = await (await h.service.start("follow up", session_id=first.session_id)).wait()
    assert second.session_id == first.session_id
    texts = [m.text for m in model.calls[1].messages]
    assert texts == ["first question", "first answer", "follow up"]


async def test_resume_unknown_session_is_a_clear_error() -> None:
    h = Harness(ScriptedModel())
    with pytest.raises(SessionNotFound, match="ses_missing"):
        await h.service.start("x", session_id="ses_missing")


async def test_resume_after_a_crash_mid_tool_answers_the_dangling_call() -> None:
    h = Harness(ScriptedModel([ScriptedResponse.text("recovered")]))
    call = ToolCallBlock(id="c9", name="list_dir", arguments="{}")
    session = SessionInfo(id="ses_x", project_dir="/project", created_at=0, updated_at=0)
    user = Message(id="m1", role="user", content=[TextBlock(text="go")])
    assistant = Message(id="m2", parent_id="m1", role="assistant", content=[call])
    await h.store.commit(
        TurnCommit(
            session=dataclasses.replace(session, active_leaf_id="m2"),
            run=RunInfo(id="run_x", session_id="ses_x", started_at=0),
            messages=[user, assistant],
        )
    )
    await (await h.service.start("again", session_id="ses_x")).wait()
    assert_every_call_answered(h.model.calls)
    sent = h.model.calls[0].messages
    assert sent[2].kind == "synthetic" and sent[2].tool_results[0].call_id == "c9"


async def test_max_turns_stops_the_run() -> None:
    model = ScriptedModel(default=ScriptedResponse.tool_calls(("list_dir", {})))
    h = Harness(model, max_turns=3)
    result = await (await h.service.start("loop forever")).wait()
    assert result.status == "max_turns" and len(model.calls) == 3
    assert "max_turns" in (result.reason or "")


async def test_late_event_reader_gets_every_event() -> None:
    h = Harness(
        ScriptedModel([ScriptedResponse.tool_calls(("list_dir", {})), ScriptedResponse.text("x")])
    )
    run = await h.service.start("go")
    await run.wait()
    events = [e async for e in run.events()]
    assert events[0].seq == 1 and isinstance(events[-1], RunFinished)
    assert any(isinstance(e, ToolResultEvent) for e in events)


async def test_file_tools_read_and_edit() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("read_file", {"path": "a.py"})),
            ScriptedResponse.tool_calls(
                ("edit_file", {"path": "a.py", "old_string": "x = 1", "new_string": "x = 2"})
            ),
            ScriptedResponse.tool_calls(
                ("edit_file", {"path": "a.py", "old_string": "y", "new_string": "z"})
            ),
            ScriptedResponse.text("done"),
        ]
    )
    h = Harness(model, approver=RecordingApprover(default="allow_once"))
    h.fs.files["a.py"] = b"x = 1\ny\ny\n"
    await (await h.service.start("edit")).wait()
    read_result = model.calls[1].messages[-1].tool_results[0]
    assert "x = 1" in read_result.content and "1\t" in read_result.content
    assert h.fs.files["a.py"] == b"x = 2\ny\ny\n"
    twice = model.calls[3].messages[-1].tool_results[0]
    assert twice.is_error and "2 times" in twice.content


async def test_tool_arguments_json_is_passed_through_unchanged() -> None:
    raw = json.dumps({"path": "k.txt", "content": "é"})
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(ToolCallBlock(id="c1", name="write_file", arguments=raw)),
            ScriptedResponse.text("ok"),
        ]
    )
    h = Harness(model, approver=RecordingApprover(default="allow_once"))
    await (await h.service.start("go")).wait()
    assert model.calls[1].messages[-2].tool_calls[0].arguments == raw
    assert h.fs.files["k.txt"] == "é".encode()


async def test_long_runs_keep_a_bounded_replay_buffer_but_live_readers_miss_nothing() -> None:
    from soong_agent.application.runs.handle import Run

    run = Run(session_id="s", run_id="r", cancel_timeout_s=1, replay_events=10)
    reader = run.events()
    seen: list[int] = []

    def event(seq: int) -> TextDeltaEvent:
        return TextDeltaEvent(seq=seq, run_id="r", session_id="s", at=0, text=str(seq))

    run.emit(event(1))
    seen.append((await reader.__anext__()).seq)
    for seq in range(2, 60):
        run.emit(event(seq))
        seen.append((await reader.__anext__()).seq)
    assert seen == list(range(1, 60))  # a live reader sees every event
    assert len(run._events) < 20  # the buffer was trimmed behind it
    late = run.events()
    first_late = (await late.__anext__()).seq
    assert first_late > 1  # a reader starting now begins at the oldest kept event
    await reader.aclose()
    await late.aclose()


async def test_duplicate_tool_call_ids_run_once_and_stay_unique() -> None:
    from soong_agent.ports.events import ErrorEvent, ToolResultEvent
    from soong_agent.ports.messages import ToolCallBlock

    same = ToolCallBlock(id="c1", name="list_dir", arguments="{}")
    other = ToolCallBlock(id="c1", name="read_file", arguments='{"path": "a.txt"}')
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(same, same, other), ScriptedResponse.text("done")]
    )
    h = Harness(model)
    h.fs.files["a.txt"] = b"A"
    run = await h.service.start("look")
    assert (await run.wait()).status == "completed"
    events = await h.store.run_events(run.run_id)
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert [r.name for r in results] == ["list_dir", "read_file"]  # each ran once
    notes = [e for e in events if isinstance(e, ErrorEvent) and e.kind == "duplicate_call_id"]
    assert len(notes) == 2
    sent = model.calls[1].messages
    ids = [c.id for m in sent for c in m.tool_calls]
    answered = [r.call_id for m in sent for r in m.tool_results]
    assert len(ids) == 2 and len(set(ids)) == 2 and answered == ids
