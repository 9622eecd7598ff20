"""Approval answers are parsed once: the terminal's typed lines and the SDK callback's values."""

from __future__ import annotations

import io
from enum import StrEnum

import pytest

from soong_agent.adapters.approvals.callback import CallbackApprover, as_decision
from soong_agent.adapters.approvals.terminal import TerminalApprover, parse_answer
from soong_agent.ports.approval import ApprovalRequest, Decision

REQUEST = ApprovalRequest(
    tool="write_file",
    call_id="c1",
    permission_class="write",
    summary="write a.txt",
    session_scope="write_file on any file in the project's top folder and below",
)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("1\n", "allow_once"),
        ("  Allow   Once ", "allow_once"),
        ("allow_once", "allow_once"),
        ("2", "allow_for_session"),
        ("ALLOW FOR SESSION\n", "allow_for_session"),
        ("3", "deny"),
        ("Deny\n", "deny"),
        ("yes", None),
        ("4", None),
        ("", None),
        ("allow", None),
    ],
)
def test_parse_answer_names_the_decision_or_none(line: str, expected: Decision | None) -> None:
    assert parse_answer(line) == expected


async def _ask(text: str, questions: int = 1) -> tuple[list[Decision], str]:
    written: list[str] = []
    approver = TerminalApprover(stdin=io.StringIO(text), write=written.append)
    answers = [await approver.decide(REQUEST) for _ in range(questions)]
    return answers, "".join(written)


@pytest.mark.parametrize(
    ("typed", "decision"),
    [("1\n", "allow_once"), ("2\n", "allow_for_session"), ("3\n", "deny"), ("DENY\n", "deny")],
)
async def test_a_real_answer_is_taken_as_it_is(typed: str, decision: Decision) -> None:
    answers, shown = await _ask(typed)
    assert answers == [decision]
    assert "not understood" not in shown
    assert shown.endswith(f": {typed.strip()}\n")  # piped answers are echoed like typed ones


async def test_anything_else_is_a_denial_said_once() -> None:
    answers, shown = await _ask("sure\n")
    assert answers == ["deny"]
    assert shown.count("(answer 'sure' not understood) -> deny") == 1


async def test_exhausted_stdin_denies_every_later_question() -> None:
    answers, shown = await _ask("2\n", questions=3)
    assert answers == ["allow_for_session", "deny", "deny"]
    assert shown.count("(no answer: stdin is closed) -> deny") == 2


class _Answer(StrEnum):
    ONCE = "allow_once"
    SESSION = "allow_for_session"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (True, "allow_once"),
        ("allow_once", "allow_once"),
        ("allow_for_session", "allow_for_session"),
        ("deny", "deny"),
        (_Answer.SESSION, "allow_for_session"),
        (False, "deny"),
        (None, "deny"),
        (1, "deny"),
        ("yes", "deny"),
        ("ALLOW_ONCE", "deny"),
        (["allow_once"], "deny"),
    ],
)
def test_as_decision(answer: object, expected: Decision) -> None:
    decision = as_decision(answer)
    assert decision == expected
    assert type(decision) is str


@pytest.mark.parametrize("is_async", [False, True])
async def test_callback_is_called_once_per_question(is_async: bool) -> None:
    seen: list[ApprovalRequest] = []

    def sync(request: ApprovalRequest) -> Decision:
        seen.append(request)
        return "allow_for_session"

    async def asynchronous(request: ApprovalRequest) -> Decision:
        return sync(request)

    approver = CallbackApprover(asynchronous if is_async else sync)
    assert await approver.decide(REQUEST) == "allow_for_session"
    assert seen == [REQUEST]
