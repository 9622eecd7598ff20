"""Which user message started each run, and which stored messages are a compaction's copies
(RWD-1): a rewind to a copy means the turn of the message it copies."""

from __future__ import annotations

from soong_agent.application.checkpoints.turns import originals, turn_messages
from soong_agent.ports.messages import Message, MessageKind, Role, TextBlock


def msg(
    id: str, parent: str | None, text: str, role: Role = "user", kind: MessageKind = "normal"
) -> Message:
    return Message(id=id, parent_id=parent, role=role, content=[TextBlock(text=text)], kind=kind)


def answer(id: str, parent: str, text: str = "ok") -> Message:
    return msg(id, parent, text, role="assistant")


def test_a_summary_compaction_copies_the_newest_turns() -> None:
    written = [
        msg("u1", None, "yes"),
        answer("a1", "u1"),
        msg("u2", "a1", "yes"),  # the same words again: told apart by position
        answer("a2", "u2"),
        msg("u3", "a2", "go on"),
        # the compaction: a summary at a new root, then copies of the newest two turns
        msg("s", None, "summary of u1", kind="summary"),
        msg("u2c", "s", "yes"),
        answer("a2c", "u2c"),
        msg("u3c", "a2c", "go on"),
        answer("a3", "u3c", "answered after the compaction"),
        msg("u4", "a3", "yes"),
    ]
    copies = originals(written)
    assert copies == {"u2c": "u2", "u3c": "u3"}
    runs = turn_messages(["yes", "yes", "go on", "yes"], written, copies)
    assert runs == ["u1", "u2", "u3", "u4"]


def test_a_micro_compaction_copies_every_turn_and_copies_of_copies_lead_back() -> None:
    written = [
        msg("u1", None, "first"),
        answer("a1", "u1"),
        msg("t1", "a1", "the whole long output", role="tool"),
        msg("u2", "t1", "second"),
        # the whole path again, the old tool result cut to a stub
        msg("u1c", None, "first"),
        answer("a1c", "u1c"),
        msg("t1c", "a1c", "[stub: see artifact]", role="tool"),
        msg("u2c", "t1c", "second"),
        msg("u1cc", None, "first"),  # and again, later
        answer("a1cc", "u1cc"),
        msg("t1cc", "a1cc", "[stub]", role="tool"),
        msg("u2cc", "t1cc", "second"),
    ]
    assert originals(written) == {"u1c": "u1", "u2c": "u2", "u1cc": "u1", "u2cc": "u2"}


def test_a_pruned_loop_keeps_the_oldest_turns() -> None:
    written = [
        msg("u1", None, "fix it"),
        answer("a1", "u1"),
        msg("u2", "a1", "fix it"),
        answer("a2", "u2", "looping"),
        msg("u1c", None, "fix it"),  # the span before the loop, then a note
        answer("a1c", "u1c"),
        msg("n", "a1c", "you were looping", kind="reminder"),
    ]
    assert originals(written) == {"u1c": "u1"}


def test_a_branch_from_the_first_message_is_no_copy() -> None:
    written = [
        msg("u1", None, "build it"),
        answer("a1", "u1"),
        msg("u2", "a1", "faster"),
        msg("b1", None, "build it differently"),  # from_message=u1: a new first message
    ]
    assert originals(written) == {}
    assert turn_messages(["build it", "faster", "build it differently", None], written, {}) == [
        "u1",
        "u2",
        "b1",
        None,
    ]
