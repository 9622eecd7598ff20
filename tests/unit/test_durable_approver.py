"""The approver of workers' runs (WORK-3), against the approval-store fake: a question of a queued
run is stored (secrets scrubbed) and its answer, given by someone else, decides; no answer in
time denies and closes the question; a run cancelled while it waits closes its question; a
question outside a queued run is denied at once (nobody could find it)."""

from __future__ import annotations

import asyncio

import pytest

from soong_agent.adapters.inmemory.approvals import InMemoryApprovalStore
from soong_agent.adapters.inmemory.redactor import DictSecretRedactor
from soong_agent.application.workers.approvals import QUEUED_RUN, DurableApprover
from soong_agent.ports.approval import ApprovalRequest
from soong_agent.ports.approval_store import ApprovalClosed
from soong_agent.ports.run_queue import QueuedRun
from soong_agent.testing import FixedClock, SequentialIds

SECRET = "sk-live-0123456789abcdef"
QUEUED = QueuedRun(id="run_1", session_id="ses_1", project_dir="/srv/app", message="go")
REQUEST = ApprovalRequest(
    tool="write_file",
    call_id="call_1",
    permission_class="write",
    summary="write .env (1 line)",
    session_scope="write_file(/.env)",
    detail=f"+API_KEY={SECRET}\n",
)


def approver(store: InMemoryApprovalStore, timeout_s: float | None = None) -> DurableApprover:
    return DurableApprover(
        store,
        clock=FixedClock(),
        ids=SequentialIds(),
        redactor=DictSecretRedactor({"API_KEY": SECRET}),
        timeout_s=timeout_s,
    )


async def pending(store: InMemoryApprovalStore) -> list[str]:
    return [a.id for a in await store.list(status="pending")]


async def test_the_stored_question_is_answered_by_someone_else() -> None:
    store = InMemoryApprovalStore()
    QUEUED_RUN.set(QUEUED)
    deciding = asyncio.create_task(approver(store).decide(REQUEST))
    while not await pending(store):
        await asyncio.sleep(0)
    [question] = await store.list(status="pending")
    assert (question.run_id, question.session_id, question.tool) == ("run_1", "ses_1", "write_file")
    assert SECRET not in question.detail and "[redacted:API_KEY]" in question.detail
    await store.answer(question.id, "allow_once", by="alice@laptop", now=1.0)
    assert await asyncio.wait_for(deciding, 30) == "allow_once"
    with pytest.raises(ApprovalClosed, match="answered already"):
        await store.answer(question.id, "deny", by="bob@desk", now=2.0)


async def test_no_answer_in_time_denies_and_closes_the_question() -> None:
    store = InMemoryApprovalStore()
    QUEUED_RUN.set(QUEUED)
    assert await approver(store, timeout_s=0.05).decide(REQUEST) == "deny"
    [question] = await store.list()
    assert question.status == "expired" and question.decision == "deny"


async def test_a_cancelled_run_closes_its_question() -> None:
    store = InMemoryApprovalStore()
    QUEUED_RUN.set(QUEUED)
    deciding = asyncio.create_task(approver(store).decide(REQUEST))
    while not await pending(store):
        await asyncio.sleep(0)
    deciding.cancel()
    with pytest.raises(asyncio.CancelledError):
        await deciding
    assert await pending(store) == []


async def test_outside_a_queued_run_the_question_is_denied_unasked() -> None:
    store = InMemoryApprovalStore()
    assert QUEUED_RUN.get() is None  # (each test runs in its own context)
    assert await approver(store).decide(REQUEST) == "deny"
    assert await store.list() == []
