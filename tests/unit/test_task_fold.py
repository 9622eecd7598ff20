"""The task WAL fold (TASK-1), by property: any prefix of a valid log folds to a valid state,
a torn final line is tolerated, replaying twice gives the same state, illegal transitions are
refused; plus the board's budget cut."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from soong_agent.domain.tasks import (
    BoardTask,
    StepAdded,
    StepCancelled,
    StepClaimed,
    StepCompleted,
    StepFailed,
    StepHeartbeat,
    StepReleased,
    TaskCreated,
    TaskRecord,
    TaskState,
    apply,
    check,
    encode,
    fold,
    parse,
    render_board,
)
from soong_agent.domain.tasks.board import TRUNCATION_MARKER

T0 = 1_767_225_600.0
STEPS = ["a", "b", "c", "d", "e"]
ACTORS = ["run_1", "run_2", "run_3"]
LEASE = 60.0


@dataclass(frozen=True)
class Op:
    kind: int
    step: int
    actor: int
    deps: frozenset[int]
    dt: float


ops = st.lists(
    st.builds(
        Op,
        kind=st.integers(0, 6),
        step=st.integers(0, len(STEPS) - 1),
        actor=st.integers(0, len(ACTORS) - 1),
        deps=st.frozensets(st.integers(0, len(STEPS) - 1), max_size=3),
        dt=st.sampled_from([0.0, 1.0, 30.0, 61.0]),
    ),
    max_size=60,
)


def candidate(op: Op, seq: int, at: float) -> TaskRecord:
    step, actor = STEPS[op.step], ACTORS[op.actor]
    base = {"seq": seq, "at": at, "actor": actor, "step_id": step}
    if op.kind == 0:
        deps = tuple(STEPS[i] for i in sorted(op.deps))
        return StepAdded(**base, title=f"step {step}", depends_on=deps)
    if op.kind == 1:
        return StepClaimed(**base, owner=actor, lease_expires_at=at + LEASE)
    if op.kind == 2:
        return StepHeartbeat(**base, lease_expires_at=at + LEASE)
    if op.kind == 3:
        return StepCompleted(**base, summary="ok")
    if op.kind == 4:
        return StepFailed(**base, reason="broken")
    if op.kind == 5:
        return StepReleased(**base)
    return StepCancelled(**base)


def build(operations: list[Op]) -> tuple[list[TaskRecord], list[tuple[TaskState, TaskRecord]]]:
    """A valid log made of the legal operations, and the (state, record) pairs refused."""
    state = TaskState()
    first = TaskCreated(seq=1, at=T0, actor="run_1", title="Task")
    records: list[TaskRecord] = [first]
    state = apply(state, first)
    refused: list[tuple[TaskState, TaskRecord]] = []
    at = T0
    for op in operations:
        at += op.dt
        record = candidate(op, state.last_seq + 1, at)
        if check(state, record, at) is None:
            state = apply(state, record)
            records.append(record)
        else:
            refused.append((state, record))
    return records, refused


def assert_valid(state: TaskState, now: float) -> None:
    assert state.last_seq == len(state.history)
    for step in state.steps.values():
        assert all(d in state.steps for d in step.depends_on)
        status = state.status(step.id, now)
        if status in ("claimed", "done", "ready") or step.claims:
            # nothing was ever claimed before its dependencies were done
            assert all(state.steps[d].outcome == "done" for d in step.depends_on)
        if status == "claimed":
            assert step.owner is not None
    # the dependency graph has no cycle: ids are only ever added after their dependencies
    order = list(state.steps)
    for step in state.steps.values():
        assert all(order.index(d) < order.index(step.id) for d in step.depends_on)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_any_prefix_of_a_valid_log_folds_to_a_valid_state(operations: list[Op]) -> None:
    records, _ = build(operations)
    for end in range(len(records) + 1):
        result = fold(records[:end])
        assert result.problems == ()
        assert result.state.last_seq == end
        assert_valid(result.state, records[end - 1].at if end else T0)


@settings(max_examples=100, deadline=None)
@given(ops)
def test_replaying_the_same_log_twice_gives_the_same_state(operations: list[Op]) -> None:
    records, _ = build(operations)
    data = b"".join(encode(r) for r in records)
    once, twice = fold(parse(data).records), fold(parse(data).records)
    assert once == twice
    assert once.state == fold(records).state


@settings(max_examples=100, deadline=None)
@given(ops, st.data())
def test_a_torn_final_line_is_tolerated(operations: list[Op], data: st.DataObject) -> None:
    records, _ = build(operations)
    whole = b"".join(encode(r) for r in records[:-1])
    last = encode(records[-1])
    cut = data.draw(st.integers(1, len(last) - 1))  # anything short of the newline
    parsed = parse(whole + last[:cut])
    assert parsed.torn and parsed.corrupt_line is None
    assert parsed.records == records[:-1]
    assert len(parsed.problems) == 1 and parsed.problems[0].startswith(f"line {len(records)}:")
    assert parsed.valid_bytes == len(whole)
    assert fold(parsed.records).state == fold(records[:-1]).state


@settings(max_examples=150, deadline=None)
@given(ops)
def test_illegal_transitions_are_refused(operations: list[Op]) -> None:
    _, refused = build(operations)
    for state, record in refused:
        now = record.at
        reason = check(state, record, now)
        assert reason  # refused with a reason
        if isinstance(record, StepClaimed) and record.step_id in state.steps:
            step = state.steps[record.step_id]
            deps_done = all(state.steps[d].outcome == "done" for d in step.depends_on)
            assert not deps_done or state.status(record.step_id, now) != "ready"
        if isinstance(record, StepCompleted | StepHeartbeat | StepReleased | StepFailed):
            step_state = state.steps.get(record.step_id)
            holder = step_state.owner if step_state else None
            final = step_state is not None and step_state.outcome is not None
            assert holder != record.actor or final
        if isinstance(record, StepAdded):
            bad_dep = any(d not in state.steps for d in record.depends_on)
            assert record.step_id in state.steps or bad_dep


def created() -> TaskState:
    return fold([TaskCreated(seq=1, at=T0, actor="r1", title="T")]).state


def add(state: TaskState, step: str, *deps: str) -> TaskState:
    record = StepAdded(
        seq=state.last_seq + 1, at=T0, actor="r1", step_id=step, title=step, depends_on=deps
    )
    assert check(state, record, T0) is None
    return apply(state, record)


def test_the_named_illegal_transitions_say_why() -> None:
    state = add(add(created(), "a"), "b", "a")
    seq = state.last_seq + 1
    claim_b = StepClaimed(
        seq=seq, at=T0, actor="r1", step_id="b", owner="r1", lease_expires_at=T0 + 9
    )
    assert check(state, claim_b, T0) == "step 'b' waits for a to be done"
    dup = StepAdded(seq=seq, at=T0, actor="r1", step_id="a", title="again")
    assert check(state, dup, T0) == "step 'a' already exists"
    loop = StepAdded(seq=seq, at=T0, actor="r1", step_id="c", title="c", depends_on=("c",))
    assert check(state, loop, T0) == "dependency cycle: c -> c"
    unknown = StepAdded(seq=seq, at=T0, actor="r1", step_id="c", title="c", depends_on=("z",))
    assert "unknown dependency 'z'" in (check(state, unknown, T0) or "")
    bad_seq = StepAdded(seq=seq + 5, at=T0, actor="r1", step_id="c", title="c")
    assert "does not follow" in (check(state, bad_seq, T0) or "")
    done = StepCompleted(seq=seq, at=T0, actor="r2", step_id="a")
    assert "not claimed" in (check(state, done, T0) or "")
    again = TaskCreated(seq=seq, at=T0, actor="r1", title="T")
    assert check(state, again, T0) == "the task already exists"


def test_an_expired_lease_makes_the_step_claimable_again() -> None:
    state = add(created(), "a")
    claim = StepClaimed(
        seq=state.last_seq + 1, at=T0, actor="r1", step_id="a", owner="r1", lease_expires_at=T0 + 10
    )
    state = apply(state, claim)
    other = StepClaimed(
        seq=state.last_seq + 1,
        at=T0 + 9.9,
        actor="r2",
        step_id="a",
        owner="r2",
        lease_expires_at=T0 + 30,
    )
    assert "held by 'r1'" in (check(state, other, other.at) or "")
    assert state.status("a", T0 + 9.9) == "claimed"
    assert state.status("a", T0 + 10) == "ready"
    later = other.model_copy(update={"at": T0 + 10})
    assert check(state, later, later.at) is None
    state = apply(state, later)
    late_done = StepCompleted(seq=state.last_seq + 1, at=T0 + 11, actor="r1", step_id="a")
    assert "held by 'r2', not by 'r1'" in (check(state, late_done, T0 + 11) or "")


def test_fold_stops_at_an_illegal_record_with_its_line_number() -> None:
    records: list[TaskRecord] = [
        TaskCreated(seq=1, at=T0, actor="r", title="T"),
        StepCompleted(seq=2, at=T0, actor="r", step_id="nope"),
        StepAdded(seq=3, at=T0, actor="r", step_id="a", title="A"),
    ]
    result = fold(records)
    assert result.state.last_seq == 1
    assert result.problems and result.problems[0].startswith("line 2: illegal record")


def test_a_corrupt_line_in_the_middle_stops_parsing_with_its_number() -> None:
    records = [
        TaskCreated(seq=1, at=T0, actor="r", title="T"),
        StepAdded(seq=2, at=T0, actor="r", step_id="a", title="A"),
    ]
    data = encode(records[0]) + b'{"kind": "nonsense"}\n' + encode(records[1])
    parsed = parse(data)
    assert parsed.corrupt_line == 2 and parsed.records == records[:1]
    assert parsed.problems[0].startswith("line 2: corrupt record")


def board_state(steps: int) -> TaskState:
    state = created()
    for i in range(steps):
        state = add(state, f"step-{i}")
    return state


def test_the_board_shows_steps_owners_and_recent_changes() -> None:
    state = add(add(created(), "a"), "b", "a")
    state = apply(
        state,
        StepClaimed(
            seq=state.last_seq + 1,
            at=T0 + 1,
            actor="r2",
            step_id="a",
            owner="r2",
            lease_expires_at=T0 + 301,
        ),
    )
    text = render_board([BoardTask("build", state)], T0 + 1, budget_tokens=1200)
    assert "## build: T [1 claimed, 1 pending]" in text
    assert "- [claimed] a: a (owner r2, lease ends in 5m00s)" in text
    assert "- [pending] b: b waits for a" in text
    assert "Recent changes (last 30 min):" in text and "r2 build: claimed a" in text
    old = render_board([BoardTask("build", state)], T0 + 3600, budget_tokens=1200)
    assert "Recent changes" not in old


def test_the_board_is_cut_to_its_budget_with_a_marker() -> None:
    state = board_state(200)
    text = render_board([BoardTask("big", state)], T0, budget_tokens=100)
    assert len(text) <= 400
    assert text.splitlines()[-1].startswith(TRUNCATION_MARKER.split("{")[0])
    assert render_board([BoardTask("big", state)], T0, budget_tokens=0) == ""
    whole = render_board([BoardTask("big", state)], T0, budget_tokens=100_000)
    assert "truncated" not in whole and "step-199" in whole


@given(st.integers(1, 300), st.integers(0, 60))
def test_any_budget_is_respected(budget: int, steps: int) -> None:
    text = render_board([BoardTask("t", board_state(steps))], T0, budget_tokens=budget)
    assert len(text) <= budget * 4
