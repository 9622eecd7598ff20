"""The ApprovalStore contract (WORK-3), run against the InMemoryApprovalStore fake, the
SqliteApprovalStore on a real file and the PostgresApprovalStore on a real PostgreSQL
(`tests/support/postgres.py`): an asked approval is pending and read back, listed newest first
and filtered by status and run; an answer is recorded once, and a second answer, or an answer to
an expired approval, is refused naming the approval; an expiry denies a pending approval and
leaves an answered one as it is. A wait for the answer returns at once when there is one, is
woken by an answer from another connection or process, and times out when none comes. Two
processes answering the same approvals at once: each approval is won by exactly one of them,
the other refused."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import multiprocessing
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from soong_agent.adapters.postgres import PostgresDatabase, PostgresSettings
from soong_agent.adapters.postgres.approvals import PostgresApprovalStore
from soong_agent.adapters.storage.approvals import SqliteApprovalStore
from soong_agent.ports.approval_store import (
    ApprovalClosed,
    ApprovalNotFound,
    ApprovalStore,
    PendingApproval,
)
from soong_agent.ports.errors import UsageError
from soong_agent.testing import InMemoryApprovalStore

T0 = 1_700_000_000.0
WAIT_S = 60.0  # the longest a wait that must be woken could take: it returns long before


class Backend:
    """One store, and a way to open another over the same approvals (another connection, as
    another process has; the fake has only itself)."""

    def __init__(self, kind: str, where: str, open_store: Callable[[], ApprovalStore]) -> None:
        self.kind = kind
        self.where = where
        self._open = open_store
        self.opened: list[ApprovalStore] = []
        self.store = self.other()

    def other(self) -> ApprovalStore:
        store = self._open()
        self.opened.append(store)
        return store


def open_store(kind: str, where: str) -> ApprovalStore:
    """A store of `kind` over `where` (a SQLite file or a PostgreSQL URL)."""
    if kind == "sqlite":
        return SqliteApprovalStore(Path(where))
    return PostgresApprovalStore(PostgresDatabase(PostgresSettings(where)))


def make_backend(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    if kind == "inmemory":
        fake = InMemoryApprovalStore()
        return Backend(kind, "", lambda: fake)
    if kind == "sqlite":
        where = str(tmp_path / "db" / "sessions.sqlite")
    else:
        where = str(request.getfixturevalue("postgres_url"))
    return Backend(kind, where, lambda: open_store(kind, where))


@pytest.fixture(params=["inmemory", "sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    made = make_backend(request.param, tmp_path, request)
    yield made
    for store in made.opened:
        await store.close()


@pytest.fixture
def store(backend: Backend) -> ApprovalStore:
    return backend.store


def asking(aid: str, run: str = "run_1", *, at: float = T0, **kw: Any) -> PendingApproval:
    return PendingApproval(
        id=aid,
        run_id=run,
        session_id=f"ses_{run}",
        project_dir="/work/p",
        tool="write_file",
        arguments='{"path": "notes.md", "content": "[redacted]"}',
        detail="--- /dev/null\n+++ notes.md\n@@ -0,0 +1 @@\n+hello\n",
        scope="write_file on notes.md",
        asked_at=at,
        summary="write notes.md",
        call_id=f"call_{aid}",
        **kw,
    )


# --- ask, get, list ------------------------------------------------------------------------------


def test_every_backend_implements_the_port(store: ApprovalStore) -> None:
    assert isinstance(store, ApprovalStore)


async def test_an_asked_approval_is_pending_and_read_back(store: ApprovalStore) -> None:
    given = asking("apr_1", status="answered", decision="allow_once", answered_by="x")
    stored = await store.ask(dataclasses.replace(given, answered_at=T0 + 1))
    assert stored == asking("apr_1")  # pending, unanswered, every text as given
    assert stored.pending and stored.decision is None
    assert await store.get("apr_1") == stored
    assert await store.get("apr_nope") is None


async def test_list_is_newest_first_filtered_by_status_and_run(store: ApprovalStore) -> None:
    for i, (aid, run) in enumerate([("a", "r1"), ("b", "r2"), ("c", "r1"), ("d", "r1")]):
        await store.ask(asking(aid, run, at=T0 + i))
    await store.answer("c", "deny", by="alice", now=T0 + 10)
    await store.expire("b", now=T0 + 11)
    assert [a.id for a in await store.list()] == ["d", "c", "b", "a"]
    assert [a.id for a in await store.list(limit=2)] == ["d", "c"]
    assert [a.id for a in await store.list(status="pending")] == ["d", "a"]
    assert [a.id for a in await store.list(status="answered")] == ["c"]
    assert [a.id for a in await store.list(status="expired")] == ["b"]
    assert [a.id for a in await store.list(run_id="r1")] == ["d", "c", "a"]
    assert [a.id for a in await store.list(status="pending", run_id="r1", limit=1)] == ["d"]
    assert list(await store.list(run_id="r9")) == []
    assert list(await store.list(limit=0)) == []
    with pytest.raises(UsageError, match="no approval status 'done'"):
        await store.list(status="done")  # type: ignore[arg-type]


async def test_a_second_ask_of_an_id_is_refused_and_changes_nothing(store: ApprovalStore) -> None:
    first = await store.ask(asking("apr_1"))
    with pytest.raises(UsageError, match="'apr_1' exists already"):
        await store.ask(asking("apr_1", "run_2", at=T0 + 5))
    assert await store.get("apr_1") == first


@pytest.mark.parametrize("field", ["id", "run_id", "session_id", "tool"])
async def test_an_approval_without_id_run_session_or_tool_is_refused(
    store: ApprovalStore, field: str
) -> None:
    with pytest.raises(UsageError, match=field.replace("_", " ")):
        changed: dict[str, Any] = {field: " "}
        await store.ask(dataclasses.replace(asking("apr_1"), **changed))
    assert list(await store.list()) == []


# --- answers and expiry --------------------------------------------------------------------------


async def test_an_answer_is_recorded_and_a_second_one_refused_naming_it(
    store: ApprovalStore,
) -> None:
    await store.ask(asking("apr_1"))
    answered = await store.answer("apr_1", "allow_for_session", by="alice", now=T0 + 5)
    assert (answered.status, answered.decision) == ("answered", "allow_for_session")
    assert (answered.answered_by, answered.answered_at) == ("alice", T0 + 5)
    assert answered.arguments == asking("apr_1").arguments  # the question is kept
    assert await store.get("apr_1") == answered

    with pytest.raises(ApprovalClosed, match="approval apr_1 was answered already") as refused:
        await store.answer("apr_1", "deny", by="bob", now=T0 + 6)
    assert refused.value.approval_id == "apr_1"
    assert "allow_for_session by alice" in str(refused.value)
    assert isinstance(refused.value, UsageError)
    assert await store.get("apr_1") == answered  # the first answer stands


async def test_an_answer_to_an_unknown_approval_is_refused(store: ApprovalStore) -> None:
    with pytest.raises(ApprovalNotFound, match="no approval 'apr_ghost'") as refused:
        await store.answer("apr_ghost", "allow_once", by="alice", now=T0)
    assert refused.value.approval_id == "apr_ghost"
    with pytest.raises(ApprovalNotFound):
        await store.expire("apr_ghost", now=T0)
    with pytest.raises(ApprovalNotFound):
        await store.wait_answered("apr_ghost", 0)


async def test_an_answer_that_is_no_decision_or_from_nobody_is_refused(
    store: ApprovalStore,
) -> None:
    await store.ask(asking("apr_1"))
    with pytest.raises(UsageError, match="with 'yes'; one of: allow_once, allow_for_session, deny"):
        await store.answer("apr_1", "yes", by="alice", now=T0)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="must say who gives it"):
        await store.answer("apr_1", "deny", by=" ", now=T0)
    assert (await store.get("apr_1")) == asking("apr_1")  # still pending


async def test_expire_denies_a_pending_approval_and_refuses_a_later_answer(
    store: ApprovalStore,
) -> None:
    await store.ask(asking("apr_1"))
    expired = await store.expire("apr_1", now=T0 + 30)
    assert (expired.status, expired.decision, expired.answered_by) == ("expired", "deny", None)
    assert expired.answered_at == T0 + 30
    assert await store.expire("apr_1", now=T0 + 40) == expired  # again: as it is

    with pytest.raises(ApprovalClosed, match="approval apr_1 expired") as refused:
        await store.answer("apr_1", "allow_once", by="alice", now=T0 + 50)
    assert refused.value.approval_id == "apr_1"
    assert await store.get("apr_1") == expired


async def test_expire_leaves_an_answered_approval_as_it_is(store: ApprovalStore) -> None:
    await store.ask(asking("apr_1"))
    answered = await store.answer("apr_1", "allow_once", by="alice", now=T0 + 5)
    assert await store.expire("apr_1", now=T0 + 30) == answered
    assert await store.get("apr_1") == answered


# --- waiting for the answer ----------------------------------------------------------------------


async def test_a_wait_returns_at_once_once_answered_and_times_out_when_not(
    store: ApprovalStore,
) -> None:
    await store.ask(asking("apr_1"))
    await store.ask(asking("apr_2"))
    assert await store.wait_answered("apr_1", 0) is None
    assert await store.wait_answered("apr_1", 0.3) is None
    answered = await store.answer("apr_1", "deny", by="alice", now=T0 + 1)
    assert await store.wait_answered("apr_1", 0) == answered
    expired = await store.expire("apr_2", now=T0 + 2)
    assert await store.wait_answered("apr_2", None) == expired


async def test_an_answer_from_another_connection_wakes_the_wait(backend: Backend) -> None:
    store, other = backend.store, backend.other()
    await store.ask(asking("apr_1"))
    waiting = asyncio.create_task(store.wait_answered("apr_1", WAIT_S))
    await asyncio.sleep(0)
    answered = await other.answer("apr_1", "allow_once", by="bob", now=T0 + 1)
    assert await waiting == answered


async def test_a_wait_without_a_limit_is_woken_by_an_expiry(backend: Backend) -> None:
    store, other = backend.store, backend.other()
    await store.ask(asking("apr_1"))
    waiting = asyncio.create_task(store.wait_answered("apr_1", None))
    await asyncio.sleep(0)
    expired = await other.expire("apr_1", now=T0 + 1)
    assert await asyncio.wait_for(waiting, WAIT_S) == expired


async def test_a_wait_under_way_returns_none_when_the_store_closes(store: ApprovalStore) -> None:
    await store.ask(asking("apr_1"))
    waiting = asyncio.create_task(store.wait_answered("apr_1", None))
    await asyncio.sleep(0)  # the wait is under way
    await store.close()
    assert await asyncio.wait_for(waiting, WAIT_S) is None


async def test_a_closed_store_refuses_every_call(store: ApprovalStore) -> None:
    await store.ask(asking("apr_1"))
    await store.close()
    await store.close()  # a second close does nothing
    for call in (
        store.ask(asking("apr_2")),
        store.get("apr_1"),
        store.list(),
        store.answer("apr_1", "deny", by="alice", now=T0),
        store.expire("apr_1", now=T0),
        store.wait_answered("apr_1", 0),
    ):
        with pytest.raises(UsageError, match="closed"):
            await call


# --- answers racing ------------------------------------------------------------------------------

RACED = 20


async def _answer_all(store: ApprovalStore, by: str) -> list[str]:
    """Answer every raced approval as `by`; the ids this answerer won."""
    won = []
    for i in range(RACED):
        try:
            await store.answer(f"apr_{i:02}", "allow_once", by=by, now=T0 + 1)
        except ApprovalClosed as exc:
            assert exc.approval_id == f"apr_{i:02}"
            continue
        won.append(f"apr_{i:02}")
    return won


async def _check_each_won_once(store: ApprovalStore, won: list[list[str]]) -> None:
    every = won[0] + won[1]
    assert sorted(every) == [f"apr_{i:02}" for i in range(RACED)]  # each exactly once
    approvals = await store.list(limit=RACED)
    assert {a.id: a.answered_by for a in approvals} == {
        aid: f"a{n}" for n, ids in enumerate(won) for aid in ids
    }


async def test_two_answers_at_once_one_wins(backend: Backend) -> None:
    store, other = backend.store, backend.other()
    for i in range(RACED):
        await store.ask(asking(f"apr_{i:02}", at=T0 + i))
    won = await asyncio.gather(_answer_all(store, "a0"), _answer_all(other, "a1"))
    await _check_each_won_once(store, list(won))


def _answer_in_child(kind: str, where: str, by: str, out: str, go: Any) -> None:
    """A child process: answer every raced approval as `by`, once told to go."""

    async def answer() -> None:
        store = open_store(kind, where)
        try:
            await store.list(limit=1)  # connected before the start
            go.wait(60)
            Path(out).write_text(json.dumps(await _answer_all(store, by)))
        finally:
            await store.close()

    asyncio.run(answer())


async def test_two_processes_answering_at_once_each_approval_won_once(
    backend: Backend, tmp_path: Path
) -> None:
    if backend.kind == "inmemory":
        pytest.skip("the fake lives in one process")
    store = backend.store
    for i in range(RACED):
        await store.ask(asking(f"apr_{i:02}", at=T0 + i))
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    outs = [tmp_path / f"a{n}.json" for n in range(2)]
    children = [
        context.Process(
            target=_answer_in_child, args=(backend.kind, backend.where, f"a{n}", str(out), go)
        )
        for n, out in enumerate(outs)
    ]
    for child in children:
        child.start()
    go.set()
    for child in children:
        await asyncio.to_thread(child.join, 120)
        assert child.exitcode == 0
    await _check_each_won_once(store, [json.loads(out.read_text()) for out in outs])


def _answer_one(kind: str, where: str, approval_id: str) -> None:
    """A child process: answer one approval."""

    async def answer() -> None:
        store = open_store(kind, where)
        try:
            await store.answer(approval_id, "allow_for_session", by="from-child", now=T0 + 2)
        finally:
            await store.close()

    asyncio.run(answer())


async def test_an_answer_from_another_process_wakes_the_wait(backend: Backend) -> None:
    if backend.kind == "inmemory":
        pytest.skip("the fake lives in one process")
    store = backend.store
    await store.ask(asking("apr_1"))
    waiting = asyncio.create_task(store.wait_answered("apr_1", WAIT_S))
    child = multiprocessing.get_context("spawn").Process(
        target=_answer_one, args=(backend.kind, backend.where, "apr_1")
    )
    child.start()
    await asyncio.to_thread(child.join, 120)
    assert child.exitcode == 0
    answered = await waiting
    assert answered is not None
    assert (answered.decision, answered.answered_by) == ("allow_for_session", "from-child")


async def test_a_postgres_wait_is_woken_by_the_notification_alone(postgres_url: str) -> None:
    """A wait that would look again only after ten minutes returns when another connection
    answers: the answer's NOTIFY woke it."""
    database = PostgresDatabase(PostgresSettings(postgres_url))
    store = PostgresApprovalStore(database, fallback_poll_s=600)
    other = PostgresApprovalStore(PostgresDatabase(PostgresSettings(postgres_url)))
    try:
        await store.ask(asking("apr_1"))
        waiting = asyncio.create_task(store.wait_answered("apr_1", None))
        await asyncio.sleep(0)
        answered = await other.answer("apr_1", "deny", by="carol", now=T0 + 1)
        assert await asyncio.wait_for(waiting, WAIT_S) == answered
    finally:
        await other.close()
        await store.close()
