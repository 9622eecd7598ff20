"""The Approver contract: RecordingApprover, the SDK callback approver and the terminal approver.

Each is given the same answers (the recorder as its list, the callback as what it returns, the
terminal as typed lines) and must return them as decisions, then deny once answers run out.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest

from soong_agent.adapters.approvals.terminal import TerminalApprover
from soong_agent.ports.approval import ApprovalRequest, Approver, Decision
from soong_agent.testing import CallbackApprover, RecordingApprover

ANSWERS: list[Decision] = ["allow_once", "allow_for_session", "deny", "allow_once"]


def _recording(answers: list[Decision]) -> Approver:
    return RecordingApprover(answers)


def _callback(answers: list[Decision]) -> Approver:
    queue = list(answers)
    return CallbackApprover(lambda _request: queue.pop(0) if queue else None)  # type: ignore[arg-type,return-value]


def _async_callback(answers: list[Decision]) -> Approver:
    queue = list(answers)

    async def answer(_request: ApprovalRequest) -> Decision:
        return queue.pop(0) if queue else "deny"

    return CallbackApprover(answer)


def _terminal(answers: list[Decision]) -> Approver:
    typed = "".join(f"{answer}\n" for answer in answers)
    shown: list[str] = []
    return TerminalApprover(stdin=io.StringIO(typed), write=shown.append)


FACTORIES: dict[str, Callable[[list[Decision]], Approver]] = {
    "recording": _recording,
    "callback": _callback,
    "async_callback": _async_callback,
    "terminal": _terminal,
}


@pytest.fixture(params=sorted(FACTORIES))
def make(request: pytest.FixtureRequest) -> Callable[[list[Decision]], Approver]:
    return FACTORIES[request.param]


def ask(n: int) -> ApprovalRequest:
    return ApprovalRequest(
        tool="run_command",
        call_id=f"c{n}",
        permission_class="exec",
        summary=f"run step {n}",
        session_scope="run_command(prefix:step)",
    )


def test_implements_the_port(make: Callable[[list[Decision]], Approver]) -> None:
    assert isinstance(make([]), Approver)


async def test_answers_come_back_in_order_then_deny(
    make: Callable[[list[Decision]], Approver],
) -> None:
    approver = make(ANSWERS)
    got = [await approver.decide(ask(n)) for n in range(len(ANSWERS) + 2)]
    assert got == [*ANSWERS, "deny", "deny"]


async def test_no_answers_means_deny(make: Callable[[list[Decision]], Approver]) -> None:
    assert await make([]).decide(ask(0)) == "deny"


def test_the_recording_approver_refuses_what_is_not_a_decision() -> None:
    with pytest.raises(ValueError):
        RecordingApprover(["allow"])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        RecordingApprover(default="yes")  # type: ignore[arg-type]


async def test_the_recording_approver_keeps_every_request() -> None:
    approver = RecordingApprover(["allow_once"])
    await approver.decide(ask(1))
    await approver.decide(ask(2))
    assert [r.call_id for r in approver.requests] == ["c1", "c2"]


@pytest.mark.parametrize(("answer", "approved"), [("allow_once", True), ("deny", False)])
async def test_a_plan_is_approved_by_an_allow_and_kept_by_a_deny(
    make: Callable[[list[Decision]], Approver], answer: Decision, approved: bool
) -> None:
    approver = make([answer])
    assert isinstance(approver, Approver)
    review = await approver.review_plan(ask(1))
    assert review.approved is approved and review.note == ""
