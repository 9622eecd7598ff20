"""The group-commit writer: batches reach the store in order, a failure is never lost, and a
run's first and last boundary are committed by the caller itself (no drain task)."""

from __future__ import annotations

import asyncio

import pytest

from soong_agent.application.runs.batch_writer import GroupCommitWriter
from soong_agent.ports.errors import RunError
from soong_agent.ports.messages import user_text
from soong_agent.ports.storage import RunInfo, SessionInfo, TurnCommit
from soong_agent.testing import InMemorySessionStore

T0 = 1_700_000_000.0


def batch(*mids: str) -> TurnCommit:
    messages = []
    parent: str | None = None
    for mid in mids:
        messages.append(user_text(mid, id=mid, parent_id=parent))
        parent = mid
    return TurnCommit(
        session=SessionInfo(
            id="s1", project_dir="/p", created_at=T0, updated_at=T0, active_leaf_id=parent
        ),
        run=RunInfo(id="r1", session_id="s1", started_at=T0),
        messages=messages,
    )


class Recording(InMemorySessionStore):
    """Notes each commit: which task made it and which messages it held."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[asyncio.Task[object] | None, list[str]]] = []
        self.fail_next: Exception | None = None
        self.gate: asyncio.Event | None = None  # a slow store: commits wait for it

    async def commit(self, batch: TurnCommit) -> None:
        self.seen.append((asyncio.current_task(), [m.id for m in batch.messages]))
        if self.fail_next is not None:
            exc, self.fail_next = self.fail_next, None
            raise exc
        if self.gate is not None:
            await self.gate.wait()
        await super().commit(batch)


async def stored(store: InMemorySessionStore) -> list[str]:
    return [m.id for m in await store.all_messages("s1")]


async def test_a_write_with_nothing_in_flight_is_made_by_the_caller() -> None:
    store = Recording()
    writer = GroupCommitWriter(store)
    await writer.write(batch("m1"))
    assert store.seen == [(asyncio.current_task(), ["m1"])]
    assert await stored(store) == ["m1"]


async def test_a_write_comes_after_the_batches_submitted_before_it() -> None:
    store = Recording()
    store.gate = asyncio.Event()
    writer = GroupCommitWriter(store)
    await writer.submit(batch("m1"))  # pipelined: a drain task commits it
    await asyncio.sleep(0)
    finished = asyncio.ensure_future(writer.write(batch("m2")))
    await asyncio.sleep(0)
    assert not finished.done()  # m1 is still being written: m2 waits behind it, unstarted
    assert [ids for _task, ids in store.seen] == [["m1"]]
    store.gate.set()
    await finished
    assert [ids for _task, ids in store.seen] == [["m1"], ["m2"]]
    assert await stored(store) == ["m1", "m2"]


async def test_a_failed_write_is_raised_and_fails_the_next_batches() -> None:
    store = Recording()
    store.fail_next = RunError("disk full")
    writer = GroupCommitWriter(store)
    with pytest.raises(RunError, match="disk full"):
        await writer.write(batch("m1"))
    with pytest.raises(RunError, match="disk full"):  # nothing after it is written out of order
        await writer.write(batch("m2"))
    with pytest.raises(RunError, match="disk full"):
        await writer.submit(batch("m3"))
    assert [ids for _task, ids in store.seen] == [["m1"]]


class Shielded(Recording):
    """A store that awaits inside its commit and does not say it survives cancellation."""

    commit_survives_cancel = False


async def test_a_store_that_may_drop_a_cancelled_commit_gets_it_shielded() -> None:
    store = Shielded()
    store.gate = asyncio.Event()
    writer = GroupCommitWriter(store)
    first = asyncio.ensure_future(writer.write(batch("m1")))
    await asyncio.sleep(0.01)
    first.cancel()  # the run is cancelled while its first commit waits on the store
    with pytest.raises(asyncio.CancelledError):
        await first
    store.gate.set()
    await writer.write(batch("m2"))  # its end: after the first, which was not abandoned
    assert await stored(store) == ["m1", "m2"]
    assert all(task is not asyncio.current_task() for task, _ids in store.seen)


async def test_a_store_that_survives_cancellation_is_awaited_directly() -> None:
    store = Recording()  # the in-memory store says commit_survives_cancel
    writer = GroupCommitWriter(store)
    await writer.write(batch("m1"))
    assert [task for task, _ids in store.seen] == [asyncio.current_task()]
