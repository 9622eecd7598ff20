"""The per-turn copies the loop writes out by hand (instead of `dataclasses.replace`, which costs
as much again on every turn) keep every field: a field added later cannot be dropped silently."""

from __future__ import annotations

import dataclasses

import pytest

from soong_agent.application.runs.handle import Run
from soong_agent.application.runs.recorder import RunRecorder
from soong_agent.application.tools.base import ToolContext
from soong_agent.application.tools.pipeline import _for_call
from soong_agent.ports.messages import (
    MESSAGE_LIST,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    assembled,
    user_text,
)
from soong_agent.ports.storage import RunInfo, SessionInfo
from soong_agent.testing import FixedClock, InMemoryFileSystem, InMemorySessionStore, SequentialIds


class _Children:
    """Stands in for a child launcher and a team seat (only their identity is compared)."""


def test_a_tool_call_sees_every_field_of_the_run_context_with_its_own_call_id() -> None:
    ctx = ToolContext(
        fs=InMemoryFileSystem(),
        session_id="ses_1",
        run_id="run_1",
        call_id="before",
        children=_Children(),  # type: ignore[arg-type]
        task_session_id="ses_0",
        actor="reviewer",
        team=_Children(),  # type: ignore[arg-type]
    )
    for field in dataclasses.fields(ToolContext):  # every field differs from its default
        assert getattr(ctx, field.name) != field.default, field.name

    copy = _for_call(ctx, "call_7")

    assert copy == dataclasses.replace(ctx, call_id="call_7")


async def test_each_commit_keeps_the_session_header_and_moves_its_leaf() -> None:
    store = InMemorySessionStore()
    clock = FixedClock(start=1000.0)
    session = SessionInfo(
        id="ses_1",
        project_dir="/work/p",
        created_at=10.0,
        updated_at=20.0,
        title="fix the tests",
        agent="reviewer",
        active_leaf_id="msg_earlier",
        parent_session_id="ses_0",
    )
    for field in dataclasses.fields(SessionInfo):
        assert getattr(session, field.name) != field.default, field.name
    rec = RunRecorder(
        run=Run(session_id="ses_1", run_id="run_1", cancel_timeout_s=1.0),
        store=store,
        clock=clock,
        ids=SequentialIds(),
        session=session,
        run_info=RunInfo(id="run_1", session_id="ses_1", started_at=10.0),
        history=[Message(id="msg_earlier", role="user", content=[TextBlock(text="before")])],
    )
    first = rec.add_message(user_text("hello"))
    await rec.commit()
    clock.advance(5.0)
    second = rec.add_message(Message(role="assistant", content=[TextBlock(text="hi")]))
    await rec.commit()

    stored = await store.get_session("ses_1")
    assert stored == dataclasses.replace(session, updated_at=1005.0, active_leaf_id=second.id)
    assert (first.parent_id, second.parent_id) == ("msg_earlier", first.id)
    assert {"id", "parent_id"} <= second.model_fields_set  # as if assigned the usual way


def test_the_end_of_a_run_keeps_every_field_of_its_header() -> None:
    clock = FixedClock(start=500.0)
    started = RunInfo(id="run_1", session_id="ses_1", started_at=10.0, model="local-model")
    for field in dataclasses.fields(RunInfo):
        if field.name not in ("status", "finished_at", "reason"):  # the ones an end sets
            assert getattr(started, field.name) != field.default, field.name
    rec = RunRecorder(
        run=Run(session_id="ses_1", run_id="run_1", cancel_timeout_s=1.0),
        store=InMemorySessionStore(),
        clock=clock,
        ids=SequentialIds(),
        session=SessionInfo(id="ses_1", project_dir="/p", created_at=1.0, updated_at=1.0),
        run_info=started,
        history=[],
    )
    rec.finish("max_turns", "stopped after 3 model calls")
    assert rec.run_info == dataclasses.replace(
        started, status="max_turns", reason="stopped after 3 model calls", finished_at=500.0
    )


def test_an_assembled_message_is_the_validated_one() -> None:
    # the loop's two messages a turn are made from blocks without validating them again: the
    # same message in every respect (a field added to Message later must be added there too)
    blocks = [
        ThinkingBlock(text="hmm", signature="sig"),
        TextBlock(text="calling"),
        ToolCallBlock(id="c1", name="noop", arguments="{}"),
    ]
    made = assembled("assistant", list(blocks))
    validated = Message(role="assistant", content=list(blocks))
    assert made == validated
    assert list(made.__dict__) == list(validated.__dict__) == list(Message.model_fields)
    assert made.model_fields_set == validated.model_fields_set
    assert made.model_fields_set is not assembled("tool", []).model_fields_set  # its own
    assert made.model_dump_json() == validated.model_dump_json()
    result = assembled("tool", [ToolResultBlock(call_id="c1", name="noop", content="ok")])
    assert MESSAGE_LIST.validate_json(f"[{result.model_dump_json()}]") == [result]
    with pytest.raises(TypeError, match="dict"):
        assembled("user", [{"type": "text", "text": "raw"}])  # type: ignore[list-item]
