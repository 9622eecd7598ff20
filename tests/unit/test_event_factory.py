"""Events made without validation are exactly the events validation makes, or are validated."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from soong_agent.application.runs import event_factory
from soong_agent.application.runs.event_factory import EventFactory, plan_for
from soong_agent.ports.events import (
    RUN_EVENT,
    CompactionEvent,
    ContextMeasured,
    ModelCallStarted,
    PermissionDecided,
    RunStarted,
    TextDeltaEvent,
    ToolCallRequested,
    ToolResultEvent,
    UsageEvent,
)
from soong_agent.ports.streaming import Usage

BASE: dict[str, Any] = {"seq": 3, "run_id": "run_1", "session_id": "ses_1", "at": 1.5}

TURN_EVENTS: list[tuple[type[Any], dict[str, Any]]] = [
    (
        ContextMeasured,
        {
            "system_tokens": 10,
            "non_system_tokens": 20,
            "non_system_budget": 30,
            "compact_trigger": 25,
            "window": 100,
            "exact": False,
        },
    ),
    (ModelCallStarted, {"turn": 2, "messages": 5}),
    (TextDeltaEvent, {"text": "hello"}),
    (UsageEvent, {"model": "m", "usage": Usage(input_tokens=4, estimated=True), "cost_usd": None}),
    (UsageEvent, {"model": "m", "usage": Usage(output_tokens=1), "cost_usd": 0.25}),
    (ToolCallRequested, {"call_id": "c1", "name": "noop", "arguments": "{}"}),
    (
        PermissionDecided,
        {"call_id": "c1", "tool": "noop", "decision": "allow_once", "reason": "read-only"},
    ),
    (
        ToolResultEvent,
        {"call_id": "c1", "name": "noop", "content": "ok", "is_error": False, "duration_ms": 0.5},
    ),
    (RunStarted, {"project_dir": "/p", "model": "m", "message": "go"}),
]


TRUSTED = {cls for cls, _ in TURN_EVENTS} | {CompactionEvent}


def built_twice(factory: EventFactory, cls: type[Any], fields: dict[str, Any]) -> Any:
    """The second event of this kind of call (the first is always validated)."""
    factory.build(cls, {**BASE, **fields})
    return factory.build(cls, {**BASE, **fields})


@pytest.mark.parametrize(("cls", "fields"), TURN_EVENTS, ids=lambda v: getattr(v, "__name__", ""))
def test_an_event_made_without_validation_is_the_validated_one(
    cls: type[Any], fields: dict[str, Any]
) -> None:
    factory = EventFactory(TRUSTED)
    made = built_twice(factory, cls, fields)
    assert plan_for(cls, tuple({**BASE, **fields}), set()) is not None  # made directly
    validated = cls(**BASE, **fields)
    assert type(made) is cls
    assert made == validated
    assert list(made.__dict__) == list(validated.__dict__)  # field order: the JSON's order
    assert made.model_fields_set == validated.model_fields_set
    assert made.model_dump_json() == validated.model_dump_json()
    assert RUN_EVENT.validate_json(made.model_dump_json()) == validated
    with pytest.raises(ValidationError):  # frozen, like any event
        made.seq = 4


def test_a_bad_literal_and_missing_or_unknown_fields_are_refused_as_by_validation() -> None:
    factory = EventFactory(TRUSTED)
    built_twice(factory, ToolResultEvent, TURN_EVENTS[7][1])  # the plan exists from here on
    fields = {**BASE, "call_id": "c1", "name": "noop", "content": "ok", "is_error": False}
    with pytest.raises(ValidationError, match="decision"):  # a value outside the literal
        built_twice(factory, PermissionDecided, {**TURN_EVENTS[6][1], "decision": "maybe"})
    with pytest.raises(ValidationError, match="content"):  # a required field missing
        factory.build(ToolResultEvent, {**BASE, "call_id": "c1", "name": "noop"})
    with pytest.raises(ValidationError, match="bogus"):  # an unknown one
        factory.build(ToolResultEvent, {**fields, "duration_ms": 1.0, "bogus": 1})


def test_checked_events_must_come_out_as_validation_makes_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # values are trusted to have their fields' types (the loop's code fixes them); the test
    # suite runs with SOONG_AGENT_CHECK_EVENTS=1, so a call site passing another type fails
    monkeypatch.setattr(event_factory, "CHECKED", True)
    factory = EventFactory(TRUSTED)
    built_twice(factory, ToolResultEvent, TURN_EVENTS[7][1])
    fields = {**BASE, "call_id": "c1", "name": "noop", "content": "ok", "is_error": False}
    with pytest.raises(TypeError, match="differs from the validated event"):
        factory.build(ToolResultEvent, {**fields, "duration_ms": 2})  # an int for a float
    with pytest.raises(ValidationError, match="duration_ms"):
        factory.build(ToolResultEvent, {**fields, "duration_ms": "slow"})
    monkeypatch.setattr(event_factory, "CHECKED", False)
    trusted = factory.build(ToolResultEvent, {**fields, "duration_ms": 2})  # as given
    assert trusted.duration_ms == 2 and json.loads(trusted.model_dump_json())["duration_ms"] == 2.0


def test_list_fields_and_factory_defaults_are_always_validated() -> None:
    factory = EventFactory(TRUSTED)
    fields = {
        "strategy": "summary",
        "tokens_before": 10,
        "tokens_after": 5,
        "trigger": "budget",
    }
    dropped = ["m1", "m2"]
    first = factory.build(CompactionEvent, {**BASE, **fields, "dropped": dropped})
    second = factory.build(CompactionEvent, {**BASE, **fields, "dropped": dropped})
    dropped.append("m3")  # the caller's list is not the event's
    assert first.dropped == second.dropped == ["m1", "m2"]
    assert plan_for(CompactionEvent, (*BASE, *fields, "dropped"), set()) is None
    a = factory.build(CompactionEvent, {**BASE, **fields})
    b = factory.build(CompactionEvent, {**BASE, **fields})
    assert a.rungs_failed == b.rungs_failed == [] and a.rungs_failed is not b.rungs_failed


def test_a_model_with_validators_or_not_frozen_is_always_validated() -> None:
    class Checked(BaseModel):
        model_config = ConfigDict(frozen=True)
        text: str

        @field_validator("text")
        @classmethod
        def shout(cls, value: str) -> str:
            return value.upper()

    class Loose(BaseModel):
        text: str

    factory = EventFactory({Checked, Loose})
    assert built_twice(factory, Checked, {"text": "hi"}).text == "HI"
    assert plan_for(Checked, ("text",), set()) is None
    first, second = factory.build(Loose, {"text": "a"}), factory.build(Loose, {"text": "b"})
    assert plan_for(Loose, ("text",), set()) is None
    second.text = "c"  # each its own fields set: one event's change is not another's
    assert first.model_fields_set == {"text"} and first.text == "a"


def test_events_of_one_kind_share_their_fields_set() -> None:
    factory = EventFactory(TRUSTED)
    one, two = (factory.build(TextDeltaEvent, {**BASE, "text": t}) for t in ("a", "b"))
    assert one.model_fields_set is two.model_fields_set
    assert one.model_fields_set == set(BASE) | {"text"}


def test_events_of_classes_not_trusted_are_always_validated() -> None:
    factory = EventFactory({TextDeltaEvent})
    fields = {**BASE, **TURN_EVENTS[7][1], "duration_ms": 2}  # an int for a float field
    built_twice(factory, ToolResultEvent, fields)
    assert type(factory.build(ToolResultEvent, dict(fields)).duration_ms) is float
