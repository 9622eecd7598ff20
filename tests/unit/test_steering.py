"""A stuck agent is reminded, then its loop pruned, then stopped; runs stop at their budgets."""

from __future__ import annotations

import asyncio
import json

import pytest

from soong_agent.domain.config.schema import PriceConfig
from soong_agent.domain.run_limits import RunLimits
from soong_agent.domain.stuck import (
    CallTrace,
    StuckDetector,
    StuckSettings,
    TurnTrace,
    call_signature,
    digest,
)
from soong_agent.ports.events import BudgetExhausted, StuckDetected
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import Usage
from soong_agent.testing import ScriptedModel, ScriptedResponse
from tests.support.harness import Harness


def reads(path: str = "notes.txt") -> ScriptedResponse:
    return ScriptedResponse.tool_calls(("read_file", {"path": path}))


def reminders(request: ModelRequest) -> list[str]:
    return [m.text for m in request.messages if m.kind == "reminder"]


# --- the domain detector ----------------------------------------------------------------------


def trace(index: int, name: str, args: str, result: str = "same", error: bool = False) -> TurnTrace:
    call = CallTrace(call_signature(name, args), result, error, result if error else "", name)
    return TurnTrace(index=index, calls=(call,))


def test_the_same_call_with_the_same_result_is_noticed_after_the_threshold() -> None:
    detector = StuckDetector(StuckSettings(same_call=3))
    assert detector.observe(trace(1, "grep", '{"p": "x"}')) is None
    assert detector.observe(trace(2, "grep", '{ "p":"x" }')) is None  # the same, normalised
    found = detector.observe(trace(3, "grep", '{"p": "x"}'))
    assert found is not None and found.action == "reminder"
    assert found.finding.kind == "repeated_call" and (found.finding.first, found.finding.last) == (
        1,
        3,
    )


def test_a_changed_result_is_not_a_loop() -> None:
    detector = StuckDetector(StuckSettings(same_call=3))
    for index in range(1, 8):
        assert detector.observe(trace(index, "run_command", "{}", result=f"output {index}")) is None


def test_the_same_error_and_an_alternating_cycle_are_noticed() -> None:
    errors = StuckDetector(StuckSettings(same_error=3, same_call=0))
    found = None
    for index, name in enumerate(["a", "b", "c"], start=1):
        found = errors.observe(trace(index, name, "{}", result="boom", error=True))
    assert found is not None and found.finding.kind == "repeated_error"
    cycle = StuckDetector(StuckSettings(cycle=3))
    found = None
    for index in range(1, 7):
        found = cycle.observe(trace(index, "ab"[index % 2], "{}")) or found
    assert found is not None and found.finding.kind == "cycle"


def test_escalation_is_reminder_then_prune_then_stop() -> None:
    detector = StuckDetector(StuckSettings(same_call=2, max_interventions=2))
    actions = []
    for index in range(1, 9):
        step = detector.observe(trace(index, "grep", "{}"))
        if step is not None:
            actions.append(step.action)
            if step.action == "stop":
                break
    assert actions == ["reminder", "prune", "stop"]


def test_a_cycle_of_three_calls_is_noticed_but_not_one_whose_results_change() -> None:
    cycle = StuckDetector(StuckSettings(cycle=2, same_call=0))
    found = None
    for index in range(1, 7):
        found = cycle.observe(trace(index, "abc"[index % 3], "{}")) or found
    assert found is not None and found.finding.kind == "cycle"
    assert (found.finding.first, found.finding.last) == (1, 6)
    assert "→" in found.finding.detail
    moving = StuckDetector(StuckSettings(cycle=2, same_call=0))
    for index in range(1, 13):
        name = "ab"[index % 2]
        assert moving.observe(trace(index, name, "{}", result=f"r{index}")) is None


def test_different_errors_and_a_success_in_between_are_not_a_loop() -> None:
    detector = StuckDetector(StuckSettings(same_error=3, same_call=0, cycle=0))
    for index, error in enumerate(["boom", "bang", "boom", "boom"], start=1):
        assert detector.observe(trace(index, "a", "{}", result=error, error=True)) is None
    assert detector.observe(trace(5, "a", "{}", result="fine")) is None
    assert detector.observe(trace(6, "a", "{}", result="boom", error=True)) is None


def test_repeating_answers_and_compactions_that_free_nothing_are_noticed() -> None:
    talk = StuckDetector(StuckSettings(monologue=4))
    found = None
    for index in range(1, 5):
        found = talk.observe(TurnTrace(index=index, text=digest(f"same {index % 2}")))
    assert found is not None and found.finding.kind == "monologue"
    writing = StuckDetector(StuckSettings(monologue=4))
    for index in range(1, 9):
        assert writing.observe(TurnTrace(index=index, text=digest(f"part {index}"))) is None
    compacting = StuckDetector(StuckSettings(compaction=3))
    found = None
    for index in range(1, 4):
        found = compacting.observe(TurnTrace(index=index, text="", compacted=True))
    assert found is not None and found.finding.kind == "compaction_loop"


def test_a_digest_tells_texts_apart_and_a_signature_ignores_key_order() -> None:
    big = "x" * 30_000
    assert digest(big) == digest("x" * 30_000) and digest(big) != digest(big[:-1] + "y")
    assert digest("") != digest(" ")
    assert call_signature("grep", '{"a": 1, "b": [2]}') == call_signature("grep", '{"b":[2],"a":1}')
    assert call_signature("grep", "{}") != call_signature("glob", "{}")
    assert call_signature("grep", "not json  at all") == "grep:not json at all"


def test_thresholds_of_zero_turn_the_checks_off() -> None:
    detector = StuckDetector(StuckSettings.off())
    for index in range(1, 30):
        assert detector.observe(trace(index, "grep", "{}")) is None


# --- the loop ---------------------------------------------------------------------------------


async def test_a_model_that_repeats_forever_is_reminded_pruned_and_stopped() -> None:
    model = ScriptedModel(default=lambda request: reads())
    h = Harness(model, max_turns=60)
    h.fs.files["notes.txt"] = b"nothing new"
    run = await h.service.start("find the answer in notes.txt")
    result = await run.wait()
    assert result.status == "stuck"
    assert "read_file" in (result.reason or "")
    events = await h.store.run_events(run.run_id)
    steps = [e.action for e in events if isinstance(e, StuckDetected)]
    assert steps == ["reminder", "prune", "prune", "stop"]
    assert len(model.calls) < 60  # stopped well within the turn budget
    # the reminder reached the model, and the pruned turns left the context
    reminded = [c for c in model.calls if any("you seem to be stuck" in r for r in reminders(c))]
    assert reminded
    pruned = [e for e in events if isinstance(e, StuckDetected) and e.action == "prune"]
    later = model.calls[-1]
    assert not set(pruned[0].pruned) & {m.id for m in later.messages}
    assert any("were pruned from the context" in r for r in reminders(later))
    # the session stays resumable: its active path is a valid request
    history = await h.store.active_path(run.session_id)
    assert history[-1].role in ("user", "tool")


async def test_a_model_that_changes_course_after_the_reminder_completes() -> None:
    def respond(request: ModelRequest) -> ScriptedResponse:
        if any("stuck" in r for r in reminders(request)):
            return ScriptedResponse.text("I will stop repeating myself: the file says nothing.")
        return reads()

    h = Harness(ScriptedModel(default=respond), max_turns=30)
    h.fs.files["notes.txt"] = b"nothing new"
    run = await h.service.start("find it")
    result = await run.wait()
    assert result.status == "completed", result.reason
    events = await h.store.run_events(run.run_id)
    assert [e.action for e in events if isinstance(e, StuckDetected)] == ["reminder"]


async def test_rereading_a_file_that_changed_is_not_flagged() -> None:
    h = Harness(ScriptedModel([]), max_turns=30)
    h.fs.files["log.txt"] = b"line 0\n"
    turns = iter(range(12))

    def respond(request: ModelRequest) -> ScriptedResponse:
        n = next(turns, None)
        if n is None or n >= 10:
            return ScriptedResponse.text("done")
        h.fs.files["log.txt"] += f"line {n + 1}\n".encode()  # the file grows between reads
        return reads("log.txt")

    h.model = ScriptedModel(default=respond)
    run = await h.service.start("watch the log")
    result = await run.wait()
    assert result.status == "completed", result.reason
    events = await h.store.run_events(run.run_id)
    assert not [e for e in events if isinstance(e, StuckDetected)]


# --- budgets ----------------------------------------------------------------------------------


def spending(usage: Usage) -> ScriptedModel:
    return ScriptedModel(
        default=lambda request: ScriptedResponse.tool_calls(
            ("read_file", {"path": f"f{len(request.messages)}.txt"}), usage=usage
        )
    )


@pytest.mark.parametrize(
    ("limits", "budget"),
    [
        (RunLimits(max_tokens=3_500), "max_tokens"),
        (RunLimits(max_cost_usd=0.01), "max_cost_usd"),
    ],
)
async def test_a_run_stops_at_its_budget_and_the_next_run_starts_fresh(
    limits: RunLimits, budget: str
) -> None:
    usage = Usage(input_tokens=1_000, output_tokens=100)
    price = PriceConfig(input_per_mtok=3.0, output_per_mtok=15.0)  # $0.0045 a call
    h = Harness(spending(usage), max_turns=50, limits=limits, settings_price=price)
    run = await h.service.start("read every file")
    result = await run.wait()
    assert result.status == "budget_exhausted"
    events = await h.store.run_events(run.run_id)
    spent = [e for e in events if isinstance(e, BudgetExhausted)]
    assert [e.budget for e in spent] == [budget]
    first_calls = len(h.model.calls)
    assert 2 <= first_calls <= 4
    again = await h.service.start("go on", session_id=run.session_id)
    second = await again.wait()
    assert second.status == "budget_exhausted"
    assert len(h.model.calls) - first_calls == first_calls  # a fresh budget, the same length
    # no tool call was left half done: every call has its result
    history = await h.store.active_path(run.session_id)
    calls = {c.id for m in history for c in m.tool_calls}
    results = {r.call_id for m in history for r in m.tool_results}
    assert calls <= results


async def test_the_time_budget_cuts_a_slow_model_call() -> None:
    def slow(request: ModelRequest) -> ScriptedResponse:
        return ScriptedResponse.text("too late", delay_s=5)

    class RealClock:
        def now(self) -> float:
            return 0.0

        def monotonic(self) -> float:
            return asyncio.get_running_loop().time()

    h = Harness(ScriptedModel(default=slow), limits=RunLimits(max_wall_ms=200))
    h.clock = RealClock()  # type: ignore[assignment]
    run = await h.service.start("answer slowly")
    result = await asyncio.wait_for(run.wait(), 3)
    assert result.status == "budget_exhausted"
    assert "time budget" in (result.reason or "")


def test_budgets_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        RunLimits(max_tokens=0)
    assert json.dumps(RunLimits().merged(RunLimits(max_tokens=5)).max_tokens) == "5"


async def test_a_cost_budget_without_prices_is_refused_at_start() -> None:
    from soong_agent.ports.errors import UsageError

    h = Harness(ScriptedModel([ScriptedResponse.text("hi")]))
    with pytest.raises(UsageError, match=r"model\.price"):
        await h.service.start("hi", limits=RunLimits(max_cost_usd=1.0))
