"""Events and content blocks share their set of given field names (the event factory's
`_SHARED_SETS`, the recorder's `_FIELDS_SET`: a turn leaves fewer objects behind); what pydantic
says about each of them stays what it says about a model built on its own."""

from __future__ import annotations

from soong_agent.application.runs.handle import Run
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.ports.events import ErrorEvent, ToolResultEvent
from soong_agent.ports.messages import Message, TextBlock, ToolResultBlock
from soong_agent.ports.storage import RunInfo, SessionInfo
from soong_agent.testing import FixedClock, InMemorySessionStore, SequentialIds


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


def test_events_say_which_fields_were_given_each_their_own() -> None:
    rec = recorder()
    first = rec.event(ErrorEvent, kind="a", message="one", fatal=False)
    second = rec.event(ErrorEvent, kind="b", message="two", fatal=False)
    bare = rec.event(ErrorEvent, kind="c", message="three")
    assert first is not None and second is not None and bare is not None
    base = {"seq", "run_id", "session_id", "at", "kind", "message"}
    assert first.model_fields_set == base | {"fatal"} == second.model_fields_set
    assert bare.model_fields_set == base, "a default left alone is not given"
    assert "fatal" not in bare.model_dump(exclude_unset=True)
    assert bare == ErrorEvent(**bare.model_dump())


def test_a_copy_of_an_event_with_changes_leaves_the_others_alone() -> None:
    rec = recorder()
    events = [
        rec.event(
            ToolResultEvent, call_id=f"c{i}", name="t", content="x", is_error=False, duration_ms=1.0
        )
        for i in range(2)
    ]
    assert events[0] is not None and events[1] is not None
    before = set(events[1].model_fields_set)
    changed = events[0].model_copy(update={"content": "y"})
    assert changed.content == "y" and events[0].content == "x"
    assert events[1].model_fields_set == before
    assert (
        events[1].model_dump_json() == ToolResultEvent(**events[1].model_dump()).model_dump_json()
    )


def test_blocks_of_recorded_messages_keep_what_was_given() -> None:
    rec = recorder()
    for i in range(3):
        rec.add_message(
            Message(
                role="tool",
                content=[ToolResultBlock(call_id=f"c{i}", name="t", content="ok", is_error=False)],
            )
        )
        rec.add_message(Message(role="assistant", content=[TextBlock(text=f"answer {i}")]))
    blocks = [m.content[0] for m in rec.history]
    assert blocks[0].model_fields_set == {"call_id", "name", "content", "is_error"}
    assert blocks[1].model_fields_set == {"text"}
    assert blocks[0].model_fields_set is blocks[2].model_fields_set, "shared, not copied"
    copy = blocks[1].model_copy(update={"text": "changed"})
    assert copy.model_fields_set == {"text"} and blocks[3].model_fields_set == {"text"}
    assert [m.parent_id for m in rec.history][1:] == [m.id for m in rec.history][:-1]
