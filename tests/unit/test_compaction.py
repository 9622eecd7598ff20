"""Compaction (CTX-6): selection, micro-compaction, carry-over and the failure ladder."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable, Sequence

import pytest

from soong_agent.domain.compaction import (
    LADDER,
    STUB_PREFIX,
    CarryOver,
    CompactionLadder,
    CompactionReport,
    Outcome,
    Rung,
    SummarySelection,
    apply_summary,
    approx_tokens,
    atomic_groups,
    carry_over_missing,
    complete_carry_over,
    files_touched,
    hard_reset,
    id_ranges,
    latest_user_request,
    micro_compact,
    next_rung,
    parse_carry_over,
    recent_window_start,
    render_carry_over,
    select_for_summary,
    skills_loaded,
    summary_problem,
    validate_sequence,
)
from soong_agent.ports.messages import (
    Message,
    MessageKind,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)

ART = "art_0123456789abcdef01234567"
TODOS = "- [in_progress] fix the parser\n- [pending] add tests"


# --------------------------------------------------------------------------- builders


class Chat:
    """Builds a linked history: each message's parent is the one before it."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self._calls = 0

    def _add(self, message: Message) -> Message:
        message.id = f"m{len(self.messages)}"
        message.parent_id = self.messages[-1].id if self.messages else None
        self.messages.append(message)
        return message

    def user(self, text: str, kind: MessageKind = "normal") -> Message:
        return self._add(Message(role="user", content=[TextBlock(text=text)], kind=kind))

    def say(self, text: str) -> Message:
        return self._add(Message(role="assistant", content=[TextBlock(text=text)]))

    def call(self, *calls: tuple[str, dict[str, object]], text: str = "") -> list[str]:
        blocks: list[TextBlock | ToolCallBlock] = [TextBlock(text=text)] if text else []
        ids: list[str] = []
        for name, args in calls:
            self._calls += 1
            call_id = f"c{self._calls}"
            ids.append(call_id)
            blocks.append(ToolCallBlock(id=call_id, name=name, arguments=json.dumps(args)))
        self._add(Message(role="assistant", content=list(blocks)))
        return ids

    def results(self, *results: tuple[str, str, str], kind: MessageKind = "normal") -> Message:
        blocks = [ToolResultBlock(call_id=c, name=n, content=body) for c, n, body in results]
        return self._add(Message(role="tool", content=list(blocks), kind=kind))

    def tool_turn(self, name: str, args: dict[str, object], body: str) -> str:
        (call_id,) = self.call((name, args))
        self.results((call_id, name, body))
        return call_id


def count(message: Message) -> int:
    parts: list[str] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ToolCallBlock):
            parts.append(block.name + block.arguments)
        elif isinstance(block, ToolResultBlock):
            parts.append(block.content)
    return 4 + approx_tokens("".join(parts))


def counts(messages: Sequence[Message]) -> list[int]:
    return [count(m) for m in messages]


def carry_for(messages: Sequence[Message], todos: str = TODOS) -> CarryOver:
    return CarryOver(
        instructions="# CLAUDE.md\nAlways run the tests.",
        latest_user_request=latest_user_request(messages),
        todos=todos,
        files_touched=tuple(files_touched(messages)),
    )


def random_history(seed: int) -> list[Message]:
    """A valid history with user turns, tool turns (parallel calls too), continuations, etc."""
    rng = random.Random(seed)
    chat = Chat()
    if rng.random() < 0.2:
        prior = CarryOver("x", "the very first request", "", ("old/one.py",))
        chat._add(
            Message(
                role="user",
                kind="summary",
                content=[TextBlock(text="earlier work\n\n" + render_carry_over(prior))],
            )
        )
        if rng.random() < 0.5:
            chat.say("resuming")
    else:
        chat.user(f"request zero {seed}")
    names = ["read_file", "write_file", "edit_file", "run_command", "grep"]
    for step in range(rng.randint(1, 25)):
        roll = rng.random()
        if roll < 0.15:
            chat.user(f"user request {step} of {seed} " + "w" * rng.randint(0, 400))
        elif roll < 0.2:
            chat.user("please continue", kind="continuation")
        elif roll < 0.3:
            chat.say("thinking out loud " + "t" * rng.randint(0, 800))
        else:
            calls = []
            for _ in range(rng.randint(1, 3)):
                name = rng.choice(names)
                key = rng.choice(["path", "file_path"])
                args: dict[str, object] = (
                    {key: f"src/f{rng.randint(0, 9)}.py"}
                    if name.endswith("_file")
                    else {"command": "make test", "pattern": "x"}
                )
                calls.append((name, args))
            ids = chat.call(*calls, text=rng.choice(["", "let me look"]))
            bodies = []
            for call_id, (name, _) in zip(ids, calls, strict=True):
                body = "r" * rng.randint(0, 6000)
                if rng.random() < 0.3:
                    body += f" stored whole as artifact {ART}"
                bodies.append((call_id, name, body))
            if len(bodies) > 1 and rng.random() < 0.3:  # results split across tool messages
                chat.results(bodies[0])
                chat.results(*bodies[1:], kind="synthetic")
            else:
                chat.results(*bodies)
    return chat.messages


SEEDS = range(120)
KEEPS = [0, 1, 40, 300, 1_500, 4_000, 10_000, 10**9]


# --------------------------------------------------------------------------- carry-over parts


def test_files_touched_in_first_touched_order_without_repeats() -> None:
    chat = Chat()
    chat.user("go")
    chat.tool_turn("read_file", {"path": "a.py"}, "aaa")
    chat.call(("write_file", {"file_path": "b.py", "content": "x"}), ("grep", {"path": "c.py"}))
    chat.results(("c2", "write_file", "ok"), ("c3", "grep", "none"))
    chat.tool_turn("edit_file", {"path": "a.py", "old": "1", "new": "2"}, "ok")
    chat.tool_turn("edit_file", {"path": "d.py"}, "ok")
    chat.tool_turn("read_file", {"nothing": "here"}, "?")
    chat._add(
        Message(
            role="assistant",
            content=[ToolCallBlock(id="bad", name="read_file", arguments="{not json")],
        )
    )
    assert files_touched(chat.messages) == ["a.py", "b.py", "d.py"]


def test_files_touched_includes_those_an_earlier_summary_carried() -> None:
    earlier = CarryOver("i", "req", "", ("x.py", "a.py"))
    chat = Chat()
    chat._add(
        Message(role="user", kind="summary", content=[TextBlock(text=render_carry_over(earlier))])
    )
    chat.tool_turn("read_file", {"path": "a.py"}, "aaa")
    chat.tool_turn("read_file", {"path": "z.py"}, "zzz")
    assert files_touched(chat.messages) == ["x.py", "a.py", "z.py"]


def test_latest_user_request_skips_other_kinds() -> None:
    chat = Chat()
    chat.user("first")
    chat.say("ok")
    chat.user("second request")
    chat.say("partial")
    chat.user("continue", kind="continuation")
    chat.user("synthetic", kind="synthetic")
    assert latest_user_request(chat.messages) == "second request"
    assert latest_user_request([]) == ""


def test_latest_user_request_survives_a_hard_reset() -> None:
    chat = Chat()
    chat.user("build the thing\nwith two lines")
    chat.tool_turn("write_file", {"path": "t.py"}, "ok")
    reset = hard_reset(chat.messages, carry_for(chat.messages), summary_id="s1")
    assert latest_user_request(reset) == "build the thing\nwith two lines"
    assert files_touched(reset) == ["t.py"]
    # the request is a message of its own, not folded into the note
    assert reset[-1].role == "user" and reset[-1].kind == "normal"
    assert reset[-1].text == "build the thing\nwith two lines"
    assert "build the thing" not in reset[0].text


def test_render_and_parse_round_trip() -> None:
    carry = CarryOver(
        instructions="# AGENTS.md\nbe nice",
        latest_user_request="fix it\n\n## Todo list / plan / task board\nnot really",
        todos=TODOS,
        files_touched=("a b.py", "dir/c.py"),
    )
    text = render_carry_over(carry)
    assert "instruction chain" in text
    assert "be nice" not in text  # the chain stays in the system prompt
    assert carry.latest_user_request in text
    assert TODOS in text
    parsed = parse_carry_over("a summary\n## Files touched\nmentioned\n\n" + text)
    assert parsed is not None
    assert parsed.latest_user_request == carry.latest_user_request
    assert parsed.todos == TODOS
    assert parsed.files_touched == carry.files_touched
    empty = parse_carry_over(render_carry_over(CarryOver("", "", "", ())))
    assert empty == CarryOver("", "", "", ())
    assert parse_carry_over("no block here") is None


# --------------------------------------------------------------------------- structure


def test_atomic_groups_keep_calls_with_their_results() -> None:
    chat = Chat()
    chat.user("u")  # 0
    chat.say("hi")  # 1
    a, b = chat.call(("read_file", {"path": "a"}), ("read_file", {"path": "b"}))  # 2
    chat.results((a, "read_file", "A"))  # 3
    chat.results((b, "read_file", "B"))  # 4
    chat.user("next")  # 5
    chat.tool_turn("grep", {}, "g")  # 6, 7
    assert atomic_groups(chat.messages) == [
        range(0, 1),
        range(1, 2),
        range(2, 5),
        range(5, 6),
        range(6, 8),
    ]


def test_atomic_groups_reach_a_late_result() -> None:
    chat = Chat()
    chat.user("u")
    (c,) = chat.call(("grep", {}))
    chat.user("interjection")
    chat.results((c, "grep", "late"))
    assert atomic_groups(chat.messages) == [range(0, 1), range(1, 4)]
    assert validate_sequence(chat.messages)


def test_validate_sequence_finds_each_problem() -> None:
    ok = Chat()
    ok.user("u")
    ok.tool_turn("grep", {}, "g")
    assert validate_sequence(ok.messages) == []
    assert validate_sequence([]) == ["the sequence is empty"]

    first = Chat()
    first.say("hello")
    assert any("not user" in p for p in validate_sequence(first.messages))

    orphan = Chat()
    orphan.user("u")
    orphan.results(("ghost", "grep", "boo"))
    assert any("no preceding call" in p for p in validate_sequence(orphan.messages))

    unanswered = Chat()
    unanswered.user("u")
    unanswered.call(("grep", {}))
    unanswered.say("moving on")
    assert any("no result before" in p for p in validate_sequence(unanswered.messages))

    dangling = Chat()
    dangling.user("u")
    dangling.call(("grep", {}))
    assert any("at the end" in p for p in validate_sequence(dangling.messages))

    twice = Chat()
    twice.user("u")
    c = twice.tool_turn("grep", {}, "g")
    twice.results((c, "grep", "again"))
    assert any("twice" in p for p in validate_sequence(twice.messages))


def test_recent_window_start() -> None:
    assert recent_window_start([10, 10, 10], 0) == 3
    assert recent_window_start([10, 10, 10], 10) == 2
    assert recent_window_start([10, 10, 10], 11) == 1  # the crossing message is kept
    assert recent_window_start([10, 10, 10], 1_000) == 0


def test_id_ranges_collapse_runs() -> None:
    chat = Chat()
    for i in range(6):
        chat.user(str(i))
    assert id_ranges(chat.messages, [0, 1, 2, 4]) == ["m0..m2", "m4..m4"]
    assert id_ranges(chat.messages, []) == []


# --------------------------------------------------------------------------- micro-compaction


def micro_history() -> list[Message]:
    chat = Chat()
    chat.user("look at the logs")
    chat.tool_turn("run_command", {"command": "cat big.log"}, "L" * 8_000 + f" artifact {ART}")
    chat.tool_turn("read_file", {"path": "src/app.py"}, "A" * 4_000)
    chat.tool_turn("grep", {"pattern": "x"}, "tiny")
    chat.say("found it")
    chat.tool_turn("read_file", {"path": "src/recent.py"}, "R" * 4_000)
    return chat.messages


def test_micro_compaction_stubs_old_results_and_keeps_what_matters() -> None:
    messages = micro_history()
    snapshot = [m.model_copy(deep=True) for m in messages]
    tokens = counts(messages)
    plan = micro_compact(messages, tokens, keep_recent_tokens=tokens[-1] + tokens[-2])
    assert plan.changed
    assert plan.changed_ids == ["m2", "m4"]
    assert plan.changed_indices == [2, 4]
    assert messages == snapshot  # the originals are untouched

    (log,) = plan.messages[2].tool_results
    assert log.content.startswith(STUB_PREFIX)
    assert "run_command" in log.content
    assert '{"command":"cat big.log"}' in log.content
    assert ART in log.content
    assert "read_artifact" in log.content
    assert log.call_id == messages[2].tool_results[0].call_id
    (app,) = plan.messages[4].tool_results
    assert "read_file" in app.content
    assert "src/app.py" in app.content
    assert "artifact" not in app.content.replace("artifacts", "")  # none mentioned
    # small results and the recent window stay verbatim
    assert plan.messages[6] == messages[6]
    assert plan.messages[9] == messages[9]
    # ids, parents and kinds kept; token arithmetic consistent
    assert [(m.id, m.parent_id, m.kind, m.role) for m in plan.messages] == [
        (m.id, m.parent_id, m.kind, m.role) for m in messages
    ]
    assert sum(plan.tokens) == sum(tokens) - plan.tokens_saved
    assert plan.tokens_saved > 2_500
    assert validate_sequence(plan.messages) == []
    assert files_touched(plan.messages) == files_touched(messages)


def test_micro_compaction_does_not_stub_twice_and_aggressive_goes_further() -> None:
    messages = micro_history()
    tokens = counts(messages)
    keep = tokens[-1] + tokens[-2]
    first = micro_compact(messages, tokens, keep_recent_tokens=keep)
    again = micro_compact(first.messages, first.tokens, keep_recent_tokens=keep)
    assert not again.changed
    assert again.tokens_saved == 0
    assert again.messages == first.messages

    # aggressive: threshold 0 (but never a stub larger than the result) and half the window
    chat = Chat()
    chat.user("go")
    chat.tool_turn("grep", {"pattern": "a"}, "m" * 600)  # ~150 tokens: under the threshold
    chat.tool_turn("grep", {"pattern": "b"}, "ok")  # smaller than any stub
    chat.tool_turn("read_file", {"path": "w.py"}, "w" * 2_000)
    chat.say("d" * 3_000)  # over half the window on its own
    small = chat.messages
    small_tokens = counts(small)
    window = small_tokens[-1] + small_tokens[-2]
    normal = micro_compact(small, small_tokens, keep_recent_tokens=window)
    assert normal.changed_indices == []
    aggressive = micro_compact(small, small_tokens, keep_recent_tokens=window, aggressive=True)
    assert aggressive.changed_indices == [2, 6]  # window halved: w.py result is now old
    assert aggressive.messages[4] == small[4]


def test_micro_compaction_shares_tokens_among_parallel_results() -> None:
    chat = Chat()
    chat.user("go")
    a, b = chat.call(("read_file", {"path": "big.py"}), ("read_file", {"path": "small.py"}))
    chat.results((a, "read_file", "B" * 9_000), (b, "read_file", "s" * 100))
    chat.say("done")
    tokens = counts(chat.messages)
    plan = micro_compact(chat.messages, tokens, keep_recent_tokens=1)
    big, small = plan.messages[2].tool_results
    assert big.content.startswith(STUB_PREFIX)
    assert "big.py" in big.content
    assert small.content == "s" * 100


def test_token_counts_must_match_messages() -> None:
    with pytest.raises(ValueError):
        micro_compact(micro_history(), [1], keep_recent_tokens=0)
    with pytest.raises(ValueError):
        select_for_summary(micro_history(), [1], keep_recent_tokens=0)


# --------------------------------------------------------------------------- selection


@pytest.mark.parametrize("seed", SEEDS)
def test_selection_never_splits_pairs_and_keeps_the_carry_over(seed: int) -> None:
    messages = random_history(seed)
    assert validate_sequence(messages) == []
    tokens = counts(messages)
    carry = carry_for(messages)
    groups = atomic_groups(messages)
    boundaries = {g.start for g in groups} | {len(messages)}
    first_group_end = groups[0].stop
    latest = max(
        (i for i, m in enumerate(messages) if m.role == "user" and m.kind == "normal"),
        default=None,
    )
    for keep, max_slice in itertools.product(KEEPS, [None, 200, 3_000]):
        selection = select_for_summary(
            messages, tokens, keep_recent_tokens=keep, max_slice_tokens=max_slice
        )
        if selection is None:
            continue
        assert selection.start == 0
        assert selection.end in boundaries
        assert selection.end <= recent_window_start(tokens, keep)
        if latest is not None:
            assert selection.end <= latest
        if max_slice is not None:  # bounded, unless the oldest group alone is larger
            assert selection.tokens <= max_slice or selection.end == first_group_end
        out = apply_summary(messages, selection, "SUMMARY", carry, summary_id="sum")
        assert validate_sequence(out) == [], (keep, max_slice, selection)
        assert carry_over_missing(out, carry) == []
        assert out[0].id == "sum"
        assert out[0].kind == "summary"
        assert out[0].role == "user"
        assert "SUMMARY" in out[0].text
        kept = messages[selection.end :]
        assert [m.id for m in out[1:]] == [m.id for m in kept]
        if kept:
            assert out[1].parent_id == "sum"
            assert [m.parent_id for m in out[2:]] == [m.parent_id for m in kept[1:]]
        if latest is not None:  # the latest request stays verbatim
            assert any(m.id == messages[latest].id for m in out[1:])


@pytest.mark.parametrize("seed", SEEDS)
def test_every_rung_output_is_valid_and_carries_over(seed: int) -> None:
    messages = random_history(seed)
    tokens = counts(messages)
    carry = carry_for(messages)
    for keep in KEEPS:
        for aggressive in (False, True):
            plan = micro_compact(messages, tokens, keep_recent_tokens=keep, aggressive=aggressive)
            assert validate_sequence(plan.messages) == []
            assert carry_over_missing(plan.messages, carry_for(messages, todos="")) == []
    reset = hard_reset(messages, carry, summary_id="reset")
    latest = [m for m in messages if m.role == "user" and m.kind == "normal"]
    # the note, then the latest user request kept as a message of its own
    assert len(reset) == (2 if latest else 1)
    if latest:
        assert reset[-1].text == latest[-1].text
        assert (reset[-1].role, reset[-1].kind, reset[-1].parent_id) == ("user", "normal", "reset")
    assert validate_sequence(reset) == []
    assert carry_over_missing(reset, carry) == []
    assert reset[0].parent_id == messages[0].parent_id


def test_nothing_worth_summarising() -> None:
    chat = Chat()
    chat.user("only request")
    chat.tool_turn("grep", {}, "g" * 4_000)
    tokens = counts(chat.messages)
    # the only user message is the latest one: nothing before it
    assert select_for_summary(chat.messages, tokens, keep_recent_tokens=0) is None
    # a lone earlier summary is not summarised again
    summary = Chat()
    summary._add(Message(role="user", kind="summary", content=[TextBlock(text="s")]))
    summary.user("now")
    summary.say("ok")
    assert (
        select_for_summary(summary.messages, counts(summary.messages), keep_recent_tokens=0) is None
    )
    assert select_for_summary([], [], keep_recent_tokens=0) is None


def test_old_latest_request_stays_verbatim_unless_unprotected() -> None:
    chat = Chat()
    chat.user("old")
    chat.say("sure")
    chat.user("the long task")
    for i in range(6):
        chat.tool_turn("read_file", {"path": f"f{i}.py"}, "x" * 2_000)
    tokens = counts(chat.messages)
    keep = sum(tokens[-2:])
    protected = select_for_summary(chat.messages, tokens, keep_recent_tokens=keep)
    assert protected is not None
    assert protected.end == 2  # stops before "the long task"
    free = select_for_summary(
        chat.messages, tokens, keep_recent_tokens=keep, protect_latest_user=False
    )
    assert free is not None
    assert free.end == len(chat.messages) - 2
    out = apply_summary(
        chat.messages, free, "did five reads", carry_for(chat.messages), summary_id="s"
    )
    assert validate_sequence(out) == []
    assert "the long task" in out[0].text  # the carry-over covers it
    assert carry_over_missing(out, carry_for(chat.messages)) == []


def test_apply_summary_moves_a_boundary_that_would_orphan_a_result() -> None:
    chat = Chat()
    chat.user("a")
    chat.say("b")
    chat.tool_turn("grep", {"p": 1}, "r1")  # 2, 3
    chat.user("c")
    messages = chat.messages
    bad = SummarySelection(start=0, end=3, tokens=1, first_id="m0", last_id="m2")
    out = apply_summary(messages, bad, "S", carry_for(messages), summary_id="s")
    assert validate_sequence(out) == []
    assert [m.id for m in out] == ["s", "m2", "m3", "m4"]  # moved back: the pair is kept

    # a boundary that cannot move back moves forward (the whole pair is summarised)
    pair_first = Chat()
    pair_first.tool_turn("grep", {}, "r")
    pair_first.user("c")
    cut = SummarySelection(start=0, end=1, tokens=1, first_id="m0", last_id="m0")
    out = apply_summary(
        pair_first.messages, cut, "S", carry_for(pair_first.messages), summary_id="s"
    )
    assert [m.id for m in out] == ["s", "m2"]
    assert out[1].parent_id == "s"
    assert validate_sequence(out) == []

    # an orphan tool message right after the boundary is folded into the summary
    orphan = Chat()
    orphan.user("a")
    orphan.user("b")
    orphan.results(("ghost", "grep", "boo"))
    orphan.user("c")
    sel = SummarySelection(start=0, end=2, tokens=1, first_id="m0", last_id="m1")
    out = apply_summary(orphan.messages, sel, "S", carry_for(orphan.messages), summary_id="s")
    assert [m.id for m in out] == ["s", "m3"]
    assert validate_sequence(out) == []


def test_apply_summary_returns_copies() -> None:
    chat = Chat()
    chat.user("fix the parser " + "w" * 200)
    chat.tool_turn("read_file", {"path": "src/parser.py"}, "def parse(): ...\n" * 40)
    chat.tool_turn("edit_file", {"path": "src/parser.py"}, "edited")
    chat.say("the parser is fixed")
    chat.user("now add tests")
    messages = chat.messages
    snapshot = [m.model_copy(deep=True) for m in messages]
    selection = select_for_summary(messages, counts(messages), keep_recent_tokens=1)
    assert selection is not None  # everything before the last request can be summarised
    out = apply_summary(messages, selection, "S", carry_for(messages), summary_id="s")
    assert out[0].id == "s" and out[-1].text == "now add tests"
    assert messages == snapshot
    out[-1].content.append(TextBlock(text="changed"))  # what it returns is not the input's
    out[-1].parent_id = "elsewhere"
    assert messages == snapshot


def test_summary_problem_detects_each_failure() -> None:
    assert summary_problem(None, max_summary_tokens=10) == "the summary is empty"
    assert summary_problem("  \n", max_summary_tokens=10) == "the summary is empty"
    too_long = summary_problem("x" * 400, max_summary_tokens=10)
    assert too_long is not None
    assert "100 tokens" in too_long
    assert summary_problem("short", max_summary_tokens=10) is None
    assert summary_problem("short", max_summary_tokens=10, tokens=11) is not None


# --------------------------------------------------------------------------- the ladder


def test_ladder_order() -> None:
    assert LADDER == ("micro", "summary", "micro_aggressive", "slice_summary", "hard_reset")
    assert next_rung("micro", "still_over") == "summary"
    assert next_rung("summary", "failed") == "micro_aggressive"
    assert next_rung("summary", "ok") is None
    assert next_rung("hard_reset", "failed") is None
    assert next_rung("hard_reset", "still_over") is None


@pytest.mark.parametrize(
    "outcomes", list(itertools.product(["ok", "failed", "still_over"], repeat=len(LADDER)))
)
def test_ladder_always_terminates_without_repeating(outcomes: tuple[Outcome, ...]) -> None:
    ladder = CompactionLadder()
    feed = iter(outcomes)
    steps = 0
    while not ladder.done:
        ladder.record(next(feed))
        steps += 1
        assert steps <= len(LADDER)
    ran = ladder.ran
    assert ran == list(LADDER[: len(ran)])
    assert len(set(ran)) == len(ran)
    assert ran.count("hard_reset") <= 1
    assert "hard_reset" not in ran or ran[-1] == "hard_reset"
    assert ladder.failed == [r for r, o in zip(ran, outcomes, strict=False) if o == "failed"]
    assert ladder.record("failed") is None  # recording after the end does nothing


def test_every_rung_failing_ends_at_hard_reset_once() -> None:
    ladder = CompactionLadder()
    for _ in range(len(LADDER)):
        ladder.record("failed")
    assert ladder.done
    assert ladder.ran == list(LADDER)
    assert ladder.failed == list(LADDER)


def test_ladder_can_start_lower() -> None:
    ladder = CompactionLadder(start="summary")
    assert ladder.current == "summary"
    assert ladder.record("failed") == "micro_aggressive"


Summariser = Callable[[Rung, Sequence[Message]], str]


def drive(
    messages: list[Message], summarise: Summariser, *, trigger: int, keep: int
) -> tuple[list[Message], CompactionReport, list[Rung]]:
    """What the application does: run the rungs until the context fits or the ladder ends."""
    max_summary_tokens = 200
    carry = carry_for(messages)
    ladder = CompactionLadder()
    current = list(messages)
    tokens = counts(current)
    before = sum(tokens)
    dropped: list[str] = []
    strategy: Rung = "micro"
    while (rung := ladder.current) is not None:
        outcome: Outcome
        if rung in ("micro", "micro_aggressive"):
            plan = micro_compact(
                current, tokens, keep_recent_tokens=keep, aggressive=rung == "micro_aggressive"
            )
            current, tokens = plan.messages, plan.tokens
            dropped += id_ranges(current, plan.changed_indices)
            strategy = rung
            outcome = "ok" if sum(tokens) <= trigger else "still_over"
        elif rung in ("summary", "slice_summary"):
            selection = select_for_summary(
                current,
                tokens,
                keep_recent_tokens=keep,
                max_slice_tokens=500 if rung == "slice_summary" else None,
            )
            text: str | None
            try:
                text = summarise(rung, current[: selection.end]) if selection else None
            except RuntimeError:
                text = None
            if selection is None or summary_problem(text, max_summary_tokens=max_summary_tokens):
                outcome = "failed"
            else:
                assert text is not None
                dropped.append(selection.label)
                current = apply_summary(current, selection, text, carry, summary_id=f"s-{rung}")
                tokens = counts(current)
                strategy = rung
                assert carry_over_missing(current, carry) == [], rung
                outcome = "ok" if sum(tokens) <= trigger else "still_over"
        else:
            dropped.append(id_ranges(current, range(len(current)))[0])
            current = hard_reset(current, carry, summary_id="reset")
            tokens = counts(current)
            strategy = rung
            assert carry_over_missing(current, carry) == [], rung
            outcome = "ok"
        assert validate_sequence(current) == [], rung
        ladder.record(outcome)
    report = CompactionReport(
        strategy=strategy,
        tokens_before=before,
        tokens_after=sum(tokens),
        dropped=dropped,
        rungs_failed=ladder.failed,
    )
    return current, report, ladder.ran


def long_history() -> list[Message]:
    chat = Chat()
    chat.user("first: set up the project")
    for i in range(4):
        chat.tool_turn("write_file", {"path": f"setup{i}.py", "content": "s" * 800}, "ok")
    chat.say("set up done")
    chat.user("second: refactor the parser")
    for i in range(6):
        chat.tool_turn("read_file", {"path": f"parser{i}.py"}, "p" * 3_000)
    chat.say("refactored")
    chat.user("third: now run the tests")
    chat.tool_turn("run_command", {"command": "pytest"}, "t" * 2_000 + f" {ART}")
    return chat.messages


def raises(rung: Rung, part: Sequence[Message]) -> str:
    raise RuntimeError("the compact model is down")


def good(rung: Rung, part: Sequence[Message]) -> str:
    return f"{len(part)} messages about setting up and refactoring"


def test_ladder_all_summaries_failing_hard_resets_once() -> None:
    messages = long_history()
    out, report, ran = drive(messages, raises, trigger=50, keep=600)
    assert ran == list(LADDER)
    assert report.strategy == "hard_reset"
    assert report.rungs_failed == ["summary", "slice_summary"]
    assert len(out) == 2  # the note and the latest request, verbatim
    assert out[-1].text == "third: now run the tests"
    assert report.tokens_after < report.tokens_before


# long_history() with keep=600 holds 6050 tokens; micro-compaction brings it to 2435, the full
# summary to 1447, aggressive micro-compaction (no summary) to 1712, and a slice summary after it
# to about 1400.
KEEP = 600


def test_ladder_stops_at_micro_when_it_fits() -> None:
    messages = long_history()
    out, report, ran = drive(messages, raises, trigger=2_500, keep=KEEP)
    assert ran == ["micro"]
    assert report.strategy == "micro"
    assert report.dropped
    assert report.rungs_failed == []
    assert len(out) == len(messages)
    assert report.tokens_after < report.tokens_before


def test_ladder_stops_at_the_summary_when_it_fits() -> None:
    messages = long_history()
    out, report, ran = drive(messages, good, trigger=2_000, keep=KEEP)
    assert ran == ["micro", "summary"]
    assert report.strategy == "summary"
    assert report.rungs_failed == []
    assert out[0].kind == "summary"
    assert "third: now run the tests" in [m.text for m in out]  # kept verbatim
    assert "m0..m20" in report.dropped


def test_ladder_summary_still_over_goes_on_to_aggressive_micro() -> None:
    messages = long_history()
    out, report, ran = drive(messages, good, trigger=1_000, keep=KEEP)
    assert ran == ["micro", "summary", "micro_aggressive"]
    assert report.strategy == "micro_aggressive"
    assert report.rungs_failed == []
    assert out[0].kind == "summary"


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda rung, part: "", id="empty"),
        pytest.param(lambda rung, part: "x" * 10_000, id="too-long"),
        pytest.param(raises, id="error"),
    ],
)
def test_ladder_summary_failure_falls_to_the_bounded_slice(bad: Summariser) -> None:
    seen: list[tuple[Rung, int]] = []

    def summarise(rung: Rung, part: Sequence[Message]) -> str:
        seen.append((rung, len(part)))
        return bad(rung, part) if rung == "summary" else good(rung, part)

    messages = long_history()
    out, report, ran = drive(messages, summarise, trigger=1_500, keep=KEEP)
    assert ran == ["micro", "summary", "micro_aggressive", "slice_summary"]
    assert report.strategy == "slice_summary"
    assert report.rungs_failed == ["summary"]
    assert seen == [("summary", 21), ("slice_summary", 5)]  # the slice is bounded
    assert out[0].kind == "summary"
    assert "m0..m4" in out[0].text
    assert "m0..m4" in report.dropped


def test_ladder_slice_still_over_ends_in_one_hard_reset() -> None:
    calls: list[Rung] = []

    def summarise(rung: Rung, part: Sequence[Message]) -> str:
        calls.append(rung)
        return good(rung, part) if rung == "slice_summary" else "y" * 10_000

    messages = long_history()
    out, report, ran = drive(messages, summarise, trigger=10, keep=KEEP)
    assert calls == ["summary", "slice_summary"]
    assert ran == list(LADDER)
    assert report.rungs_failed == ["summary"]
    assert report.strategy == "hard_reset"
    assert len(out) == 2
    assert validate_sequence(out) == []


SKILL_TEXT = (
    "Skill 'tabs' (from /h/skills/tabs.md): indentation rules\n\nAlways use tabs.\n## Not a header"
)


def test_a_loaded_skill_is_carried_over_and_survives_a_second_compaction() -> None:
    chat = Chat()
    chat.user("format the files")
    chat.tool_turn("load_skill", {"name": "tabs"}, SKILL_TEXT)
    chat.tool_turn("load_skill", {"name": "tabs", "resource": "x.txt"}, "a resource")
    chat.tool_turn("load_skill", {"name": "nope"}, "unknown skill")
    chat.messages[-1] = chat.messages[-1].model_copy(
        update={
            "content": [
                ToolResultBlock(
                    call_id=chat.messages[-1].tool_results[0].call_id,
                    name="load_skill",
                    content="unknown skill",
                    is_error=True,
                )
            ]
        }
    )
    carry = complete_carry_over(CarryOver("i", ""), chat.messages)
    assert carry.skills == (SKILL_TEXT,)  # not the resource read, not the failed load
    text = render_carry_over(carry)
    parsed = parse_carry_over(text)
    assert parsed is not None and parsed.skills == (SKILL_TEXT,)
    assert parsed.latest_user_request == "format the files"
    # a later compaction of a path that starts with that summary keeps the skill
    later = Chat()
    later._add(Message(role="user", kind="summary", content=[TextBlock(text=text)]))
    later.say("more work")
    assert skills_loaded(later.messages) == [SKILL_TEXT]
