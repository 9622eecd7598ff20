"""The SessionStore contract, run against every implementation: the in-memory fake, SQLite, and
PostgreSQL (a real server, `tests/support/postgres.py`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from soong_agent.adapters.inmemory.run_queue import InMemoryRunQueue
from soong_agent.adapters.inmemory.session_store import InMemorySessionStore
from soong_agent.adapters.postgres import PostgresDatabase, PostgresSessionStore, PostgresSettings
from soong_agent.adapters.postgres.run_queue import PostgresRunQueue
from soong_agent.adapters.storage.run_queue import SqliteRunQueue
from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
from soong_agent.ports.errors import UsageError
from soong_agent.ports.events import (
    ChildStarted,
    CompactionEvent,
    ErrorEvent,
    ModelCallStarted,
    PermissionAsked,
    PermissionDecided,
    RunEvent,
    RunFinished,
    RunStarted,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolCallRequested,
    ToolResultEvent,
    UsageEvent,
)
from soong_agent.ports.messages import (
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    ToolResultBlock,
    user_text,
)
from soong_agent.ports.run_queue import Lease, LeaseLost, QueuedRun, RunQueue
from soong_agent.ports.storage import (
    RunFence,
    RunInfo,
    SessionBusy,
    SessionClaim,
    SessionInfo,
    SessionStore,
    TurnCommit,
)
from soong_agent.ports.streaming import Usage
from tests.support import postgres

T0 = 1_700_000_000.0

StoreFactory = Callable[[Path, pytest.FixtureRequest], SessionStore]

FACTORIES: dict[str, StoreFactory] = {
    "inmemory": lambda _tmp, _request: InMemorySessionStore(),
    "sqlite": lambda tmp, _request: SqliteSessionStore(tmp / "db" / "sessions.sqlite"),
    # a database of its own on the session's server (the fixture only starts for this one)
    "postgres": lambda _tmp, request: postgres.session_store(
        request.getfixturevalue("postgres_url")
    ),
}


@pytest.fixture(params=sorted(FACTORIES))
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionStore]:
    s = FACTORIES[request.param](tmp_path, request)
    yield s
    await s.close()


def session(
    sid: str = "s1", *, leaf: str | None = None, at: float = T0, **kw: object
) -> SessionInfo:
    fields: dict[str, object] = {"project_dir": "/work/p", "created_at": T0, "updated_at": at}
    fields.update(kw)
    return SessionInfo(id=sid, active_leaf_id=leaf, **fields)  # type: ignore[arg-type]


def run(rid: str = "r1", sid: str = "s1", **kw: object) -> RunInfo:
    return RunInfo(id=rid, session_id=sid, started_at=kw.pop("started_at", T0), **kw)  # type: ignore[arg-type]


def assistant(mid: str, parent: str | None, text: str = "ok") -> Message:
    return Message(id=mid, parent_id=parent, role="assistant", content=[TextBlock(text=text)])


def ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


async def write_chain(
    store: SessionStore, sid: str, mids: list[str], *, parent: str | None = None
) -> None:
    """Commit a linear chain of messages (user/assistant alternating) as the active path."""
    messages = []
    for i, mid in enumerate(mids):
        messages.append(
            user_text(mid, id=mid, parent_id=parent) if i % 2 == 0 else assistant(mid, parent)
        )
        parent = mid
    await store.commit(
        TurnCommit(session=session(sid, leaf=parent), run=run(f"run-{sid}", sid), messages=messages)
    )


# --- sessions and runs ------------------------------------------------------------------------


async def test_a_commit_goes_through_when_its_caller_is_cancelled(store: SessionStore) -> None:
    first = TurnCommit(session=session(leaf="m1"), run=run(), messages=[user_text("hi", id="m1")])
    task = asyncio.ensure_future(store.commit(first))
    await asyncio.sleep(0)  # the commit has begun (a thread-backed store: it waits on it)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    # what the run writes next (its end) comes after the cancelled commit, which was not lost
    second = TurnCommit(session=session(leaf="m2"), run=run(), messages=[assistant("m2", "m1")])
    await store.commit(second)
    assert ids(await store.active_path("s1")) == ["m1", "m2"]


async def test_commit_creates_session_and_run(store: SessionStore) -> None:
    s = session(title="first", agent="coder", parent_session_id="s0")
    r = run(model="gpt-x")
    await store.commit(TurnCommit(session=s, run=r, at=T0))

    assert await store.get_session("s1") == s
    assert await store.list_runs("s1") == [r]


async def test_commit_upserts_session_and_run(store: SessionStore) -> None:
    await store.commit(TurnCommit(session=session(title="a"), run=run(model="m1")))
    await write_chain(store, "s1", ["u1"])  # leaves run-s1 behind, which is fine
    later = session(
        leaf="u1",
        at=T0 + 50,
        title="renamed",
        agent="reviewer",
        created_at=T0 + 99,
        project_dir="/x",
    )
    finished = run(status="completed", finished_at=T0 + 60, reason="done", model="m2")
    await store.commit(TurnCommit(session=later, run=finished, at=T0 + 50))

    got = await store.get_session("s1")
    assert got == SessionInfo(
        id="s1",
        project_dir="/work/p",  # kept from the first write
        created_at=T0,  # kept from the first write
        updated_at=T0 + 50,
        title="renamed",
        agent="reviewer",
        active_leaf_id="u1",
    )
    runs = {r.id: r for r in await store.list_runs("s1")}
    assert runs["r1"] == RunInfo(
        id="r1",
        session_id="s1",
        started_at=T0,
        status="completed",
        finished_at=T0 + 60,
        reason="done",
        model="m2",
    )


async def test_updated_at_is_the_later_of_session_and_batch_time(store: SessionStore) -> None:
    await store.commit(TurnCommit(session=session(at=T0 + 5), run=run(), at=T0 + 9))
    assert (await store.get_session("s1")).updated_at == T0 + 9  # type: ignore[union-attr]
    await store.commit(TurnCommit(session=session(at=T0 + 20), run=run()))  # at defaults to 0
    assert (await store.get_session("s1")).updated_at == T0 + 20  # type: ignore[union-attr]


async def test_unknown_ids_give_none_or_empty(store: SessionStore) -> None:
    assert await store.get_session("nope") is None
    assert await store.active_path("nope") == []
    assert await store.all_messages("nope") == []
    assert await store.list_runs("nope") == []
    assert list(await store.run_events("nope")) == []
    assert await store.list_sessions() == []


async def test_list_sessions_most_recently_updated_first(store: SessionStore) -> None:
    for sid, at in [("a", T0 + 1), ("b", T0 + 3), ("c", T0 + 2), ("d", T0 + 3)]:
        await store.commit(TurnCommit(session=session(sid, at=at), run=run(f"r-{sid}", sid)))
    # "a" is touched again and becomes the most recent
    await store.commit(TurnCommit(session=session("a", at=T0 + 10), run=run("r-a", "a")))

    assert [s.id for s in await store.list_sessions()] == ["a", "d", "b", "c"]
    assert [s.id for s in await store.list_sessions(limit=2)] == ["a", "d"]
    assert await store.list_sessions(limit=0) == []


async def test_child_sessions_are_those_linked_to_the_parent_oldest_first(
    store: SessionStore,
) -> None:
    await store.commit(TurnCommit(session=session("root"), run=run("r-root", "root")))
    for sid, at in [("c2", T0 + 2), ("c1", T0 + 1), ("other", T0 + 3)]:
        parent = None if sid == "other" else "root"
        info = session(sid, parent_session_id=parent, created_at=at, at=at)
        await store.commit(TurnCommit(session=info, run=run(f"r-{sid}", sid)))

    children = await store.child_sessions("root")
    assert [c.id for c in children] == ["c1", "c2"]
    assert all(c.parent_session_id == "root" for c in children)
    assert await store.child_sessions("c1") == []
    assert await store.child_sessions("nope") == []


async def test_list_runs_oldest_first_and_per_session(store: SessionStore) -> None:
    await store.commit(TurnCommit(session=session(), run=run("late", started_at=T0 + 30)))
    await store.commit(TurnCommit(session=session(), run=run("early", started_at=T0 + 10)))
    await store.commit(TurnCommit(session=session(), run=run("mid", started_at=T0 + 20)))
    await store.commit(TurnCommit(session=session("other"), run=run("x", "other")))

    assert [r.id for r in await store.list_runs("s1")] == ["early", "mid", "late"]
    assert [r.id for r in await store.list_runs("other")] == ["x"]


# --- the message tree --------------------------------------------------------------------------


async def test_active_path_is_root_to_leaf(store: SessionStore) -> None:
    await write_chain(store, "s1", ["u1", "a1", "u2", "a2"])
    assert ids(await store.active_path("s1")) == ["u1", "a1", "u2", "a2"]
    assert ids(await store.all_messages("s1")) == ["u1", "a1", "u2", "a2"]


async def test_path_grows_over_several_commits(store: SessionStore) -> None:
    await write_chain(store, "s1", ["u1", "a1"])
    await write_chain(store, "s1", ["u2", "a2"], parent="a1")
    await write_chain(store, "s1", ["u3"], parent="a2")
    assert ids(await store.active_path("s1")) == ["u1", "a1", "u2", "a2", "u3"]


async def test_messages_round_trip_with_every_block(store: SessionStore) -> None:
    messages = [
        Message(
            id="u1",
            role="user",
            content=[TextBlock(text='héllo ✓ "quoted"\n'), TextBlock(text="second")],
        ),
        Message(
            id="a1",
            parent_id="u1",
            role="assistant",
            content=[
                ThinkingBlock(text="hmm", signature="sig=="),
                ThinkingBlock(text="no signature"),
                ToolCallBlock(id="c1", name="read_file", arguments='{"path": "a.py"}'),
            ],
        ),
        Message(
            id="t1",
            parent_id="a1",
            role="tool",
            content=[
                ToolResultBlock(call_id="c1", name="read_file", content="boom", is_error=True)
            ],
        ),
        Message(
            id="sum", parent_id="t1", role="user", kind="summary", content=[TextBlock(text="s")]
        ),
    ]
    await store.commit(TurnCommit(session=session(leaf="sum"), run=run(), messages=messages))
    assert await store.active_path("s1") == messages
    assert await store.all_messages("s1") == messages


async def test_branch_follows_new_leaf_and_keeps_old_branch(store: SessionStore) -> None:
    await write_chain(store, "s1", ["u1", "a1", "u2", "a2"])
    # Edit u2: a new user message whose parent is u2's parent (a1), then its answer.
    branch = [user_text("edited", id="u2b", parent_id="a1"), assistant("a2b", "u2b")]
    await store.commit(TurnCommit(session=session(leaf="a2b"), run=run(), messages=branch))

    assert ids(await store.active_path("s1")) == ["u1", "a1", "u2b", "a2b"]
    assert ids(await store.all_messages("s1")) == ["u1", "a1", "u2", "a2", "u2b", "a2b"]

    # Moving the leaf back selects the abandoned branch again.
    await store.commit(TurnCommit(session=session(leaf="a2"), run=run()))
    assert ids(await store.active_path("s1")) == ["u1", "a1", "u2", "a2"]


async def test_branch_from_the_root(store: SessionStore) -> None:
    await write_chain(store, "s1", ["u1", "a1"])
    await write_chain(store, "s1", ["v1", "b1"])  # a second root
    assert ids(await store.active_path("s1")) == ["v1", "b1"]
    assert len(await store.all_messages("s1")) == 4


async def test_active_path_limit_keeps_the_last_messages(store: SessionStore) -> None:
    await write_chain(store, "s1", [f"m{i}" for i in range(10)])
    assert ids(await store.active_path("s1", limit=3)) == ["m7", "m8", "m9"]
    assert ids(await store.active_path("s1", limit=1)) == ["m9"]
    assert len(await store.active_path("s1", limit=10)) == 10
    assert len(await store.active_path("s1", limit=100)) == 10
    assert await store.active_path("s1", limit=0) == []


async def test_limit_on_a_branched_tree(store: SessionStore) -> None:
    await write_chain(store, "s1", ["u1", "a1", "u2", "a2", "u3", "a3"])
    await write_chain(store, "s1", ["x", "y", "z"], parent="a1")
    assert ids(await store.active_path("s1", limit=4)) == ["a1", "x", "y", "z"]


async def test_no_active_leaf_means_empty_path(store: SessionStore) -> None:
    await store.commit(
        TurnCommit(session=session(leaf=None), run=run(), messages=[user_text("hi", id="u1")])
    )
    assert await store.active_path("s1") == []
    assert ids(await store.all_messages("s1")) == ["u1"]


async def test_parent_outside_the_session_starts_the_path(store: SessionStore) -> None:
    await write_chain(store, "s1", ["u1", "a1"])
    await write_chain(store, "s2", ["u2", "a2"], parent="a1")  # a1 belongs to s1
    assert ids(await store.active_path("s2")) == ["u2", "a2"]
    assert ids(await store.active_path("s1")) == ["u1", "a1"]


async def test_sessions_do_not_share_messages(store: SessionStore) -> None:
    await write_chain(store, "s1", ["a", "b"])
    await write_chain(store, "s2", ["a", "b", "c"])  # same ids in another session are fine
    assert ids(await store.all_messages("s1")) == ["a", "b"]
    assert ids(await store.active_path("s2")) == ["a", "b", "c"]


async def test_stored_messages_do_not_follow_caller_mutation(store: SessionStore) -> None:
    m = user_text("original", id="u1")
    await store.commit(TurnCommit(session=session(leaf="u1"), run=run(), messages=[m]))
    m.content.append(TextBlock(text="later"))
    loaded = await store.active_path("s1")
    assert loaded[0].text == "original"
    loaded[0].content.clear()
    assert (await store.active_path("s1"))[0].text == "original"


# --- events ------------------------------------------------------------------------------------


def every_event() -> list[RunEvent]:
    e = {"run_id": "r1", "session_id": "s1"}
    usage = Usage(input_tokens=10, output_tokens=20, cache_read_tokens=3, cache_write_tokens=4)
    return [
        RunStarted(
            seq=0,
            at=T0 + 0.125,
            project_dir="/p",
            model="m",
            agent="a",
            resumed=True,
            message="hi",
            **e,
        ),
        ModelCallStarted(seq=1, at=T0 + 1, turn=1, messages=3, **e),
        TextDeltaEvent(seq=2, at=T0 + 1.1, text="héllo ✓", **e),
        ThinkingDeltaEvent(seq=3, at=T0 + 1.2, text="think", **e),
        ToolCallRequested(
            seq=4, at=T0 + 1.3, call_id="c1", name="bash", arguments='{"cmd": "ls"}', **e
        ),
        PermissionAsked(
            seq=5,
            at=T0 + 1.4,
            call_id="c1",
            tool="bash",
            summary="ls",
            session_scope="bash:ls",
            **e,
        ),
        PermissionDecided(
            seq=6, at=T0 + 1.5, call_id="c1", tool="bash", decision="allow_once", reason="rule", **e
        ),
        ToolResultEvent(
            seq=7,
            at=T0 + 1.6,
            call_id="c1",
            name="bash",
            content="x",
            is_error=True,
            duration_ms=2.5,
            **e,
        ),
        CompactionEvent(
            seq=8,
            at=T0 + 2,
            strategy="micro",
            tokens_before=100,
            tokens_after=50,
            dropped=["a", "b"],
            **e,
        ),
        ChildStarted(
            seq=9,
            at=T0 + 3,
            kind="worker",
            agent="default_worker_agent",
            child_session_id="cs",
            child_run_id="cr",
            parent_session_id="s1",
            parent_run_id="r1",
            parent_call_id="c1",
            task="build ✓",
            pool="p",
            worker="w",
            **e,
        ),
        ErrorEvent(seq=10, at=T0 + 4, kind="provider", message="oops", fatal=True, **e),
        UsageEvent(seq=11, at=T0 + 5, model="m", usage=usage, **e),
        RunFinished(seq=12, at=T0 + 6, status="failed", reason="error", usage=usage, **e),
    ]


async def test_events_round_trip_with_every_field(store: SessionStore) -> None:
    events = every_event()
    await store.commit(TurnCommit(session=session(), run=run(), events=events))
    assert list(await store.run_events("r1")) == events


async def test_events_come_back_in_seq_order(store: SessionStore) -> None:
    events = every_event()
    await store.commit(
        TurnCommit(session=session(), run=run(), events=[events[5], events[1], events[3]])
    )
    await store.commit(
        TurnCommit(session=session(), run=run(), events=[events[0], events[4], events[2]])
    )
    assert [e.seq for e in await store.run_events("r1")] == [0, 1, 2, 3, 4, 5]


async def test_events_are_per_run(store: SessionStore) -> None:
    await store.commit(TurnCommit(session=session(), run=run(), events=every_event()[:3]))
    other: list[RunEvent] = [
        TextDeltaEvent(seq=0, run_id="r2", session_id="s1", at=T0, text="other")
    ]
    await store.commit(TurnCommit(session=session(), run=run("r2"), events=other))
    assert len(await store.run_events("r1")) == 3
    assert list(await store.run_events("r2")) == other


# --- bad batches and lifecycle -----------------------------------------------------------------


async def test_message_without_id_is_refused(store: SessionStore) -> None:
    with pytest.raises(UsageError, match="id"):
        await store.commit(TurnCommit(session=session(), run=run(), messages=[user_text("x")]))
    assert await store.get_session("s1") is None


async def test_duplicate_message_id_is_refused_and_nothing_is_written(store: SessionStore) -> None:
    await write_chain(store, "s1", ["u1", "a1"])
    batch = TurnCommit(
        session=session(leaf="x", title="changed"),
        run=run(),
        messages=[user_text("x", id="x", parent_id="a1"), user_text("again", id="u1")],
        events=[TextDeltaEvent(seq=0, run_id="r1", session_id="s1", at=T0, text="t")],
    )
    with pytest.raises(UsageError):
        await store.commit(batch)
    assert ids(await store.all_messages("s1")) == ["u1", "a1"]
    assert (await store.get_session("s1")).title == ""  # type: ignore[union-attr]
    assert list(await store.run_events("r1")) == []


async def test_duplicate_event_seq_is_refused(store: SessionStore) -> None:
    events = every_event()[:2]
    await store.commit(TurnCommit(session=session(), run=run(), events=events))
    with pytest.raises(UsageError):
        await store.commit(TurnCommit(session=session(), run=run(), events=[events[1]]))
    assert list(await store.run_events("r1")) == events


async def test_a_run_committed_unchanged_each_turn_then_finished_reads_back_finished(
    store: SessionStore,
) -> None:
    running = run(model="m")
    for turn in range(3):  # the turns between a run's start and end leave its row as it was
        await store.commit(TurnCommit(session=session(at=T0 + turn), run=running, at=T0 + turn))
    assert await store.list_runs("s1") == [running]
    done = run(model="m", status="completed", finished_at=T0 + 9, reason="all done")
    await store.commit(TurnCommit(session=session(at=T0 + 9), run=done, at=T0 + 9))
    assert await store.list_runs("s1") == [done]


async def test_a_refused_batch_does_not_count_its_run_as_written(store: SessionStore) -> None:
    await write_chain(store, "s1", ["u1"])
    fresh = run("r2")
    refused = TurnCommit(
        session=session(leaf="u1"), run=fresh, messages=[user_text("again", id="u1")]
    )
    with pytest.raises(UsageError):
        await store.commit(refused)
    assert [r.id for r in await store.list_runs("s1")] == ["run-s1"]
    event = TextDeltaEvent(seq=1, run_id="r2", session_id="s1", at=T0, text="t")
    await store.commit(TurnCommit(session=session(leaf="u1"), run=fresh, events=[event]))
    assert [r.id for r in await store.list_runs("s1")] == ["run-s1", "r2"]
    assert list(await store.run_events("r2")) == [event]


async def test_run_of_unknown_session_is_refused(store: SessionStore) -> None:
    with pytest.raises(UsageError):
        await store.commit(TurnCommit(session=session("s1"), run=run("r1", "ghost")))


async def test_closed_store_refuses_calls_and_close_is_idempotent(store: SessionStore) -> None:
    await write_chain(store, "s1", ["u1"])
    await store.close()
    await store.close()
    with pytest.raises(UsageError):
        await store.get_session("s1")
    with pytest.raises(UsageError):
        await store.commit(TurnCommit(session=session(), run=run()))
    for call in (
        store.list_sessions(),
        store.child_sessions("s1"),
        store.active_path("s1"),
        store.path_to("s1", "u1"),
        store.all_messages("s1"),
        store.list_runs("s1"),
        store.run_events("run-s1"),
    ):
        with pytest.raises(UsageError):
            await call


async def test_event_of_an_unknown_run_is_refused_and_nothing_is_written(
    store: SessionStore,
) -> None:
    stray = TextDeltaEvent(seq=0, run_id="ghost", session_id="s1", at=T0, text="t")
    with pytest.raises(UsageError):
        await store.commit(
            TurnCommit(
                session=session(leaf="u1"),
                run=run(),
                messages=[user_text("x", id="u1")],
                events=[stray],
            )
        )
    assert await store.get_session("s1") is None
    assert list(await store.run_events("ghost")) == []


async def test_events_of_an_earlier_run_can_follow_in_a_later_batch(store: SessionStore) -> None:
    first = every_event()[:2]
    await store.commit(TurnCommit(session=session(), run=run("r1"), events=first[:1]))
    await store.commit(TurnCommit(session=session(), run=run("r2"), events=first[1:]))
    assert list(await store.run_events("r1")) == first
    assert list(await store.run_events("r2")) == []


async def test_both_implement_the_port(store: SessionStore) -> None:
    assert isinstance(store, SessionStore)


async def test_path_to_an_earlier_message_follows_its_own_branch(store: SessionStore) -> None:
    def msg(mid: str, parent: str | None, role: Role = "user") -> Message:
        return Message(id=mid, parent_id=parent, role=role, content=[TextBlock(text=mid)])

    session = SessionInfo(
        id="ses_p", project_dir="/p", created_at=1, updated_at=1, active_leaf_id="c"
    )
    await store.commit(
        TurnCommit(
            session=session,
            run=RunInfo(id="run_p", session_id="ses_p", started_at=1),
            messages=[msg("a", None), msg("b", "a", "assistant"), msg("c", "b")],
        )
    )
    assert [m.id for m in await store.path_to("ses_p", "b")] == ["a", "b"]
    assert [m.id for m in await store.path_to("ses_p", "c")] == ["a", "b", "c"]
    assert await store.path_to("ses_p", "nope") == []
    assert await store.path_to("ses_other", "a") == []


# --- marks (MEM-3: what memory extraction has read) ------------------------------------------


async def test_a_mark_is_compared_and_set(store: SessionStore) -> None:
    await write_chain(store, "s1", ["u1"])
    assert await store.get_mark("s1", "extract") is None
    assert await store.set_mark("s1", "extract", "u1", previous="u0") is False
    assert await store.get_mark("s1", "extract") is None
    assert await store.set_mark("s1", "extract", "u1", previous=None) is True
    assert await store.get_mark("s1", "extract") == "u1"
    assert await store.set_mark("s1", "extract", "u9", previous=None) is False
    assert await store.set_mark("s1", "extract", "u9", previous="u0") is False
    assert await store.get_mark("s1", "extract") == "u1"
    assert await store.set_mark("s1", "extract", "u2", previous="u1") is True
    assert await store.get_mark("s1", "extract") == "u2"


async def test_marks_are_per_session_and_key(store: SessionStore) -> None:
    await write_chain(store, "s1", ["u1"])
    await write_chain(store, "s2", ["v1"])
    assert await store.set_mark("s1", "a", "x", previous=None)
    assert await store.set_mark("s2", "a", "y", previous=None)
    assert await store.set_mark("s1", "b", "z", previous=None)
    assert [await store.get_mark(*k) for k in (("s1", "a"), ("s2", "a"), ("s1", "b"))] == [
        "x",
        "y",
        "z",
    ]
    assert await store.get_mark("ghost", "a") is None


async def test_a_mark_of_an_unknown_session_is_refused(store: SessionStore) -> None:
    with pytest.raises(UsageError):
        await store.set_mark("ghost", "a", "x", previous=None)
    assert await store.get_mark("ghost", "a") is None


async def test_a_closed_store_refuses_marks(store: SessionStore) -> None:
    await write_chain(store, "s1", ["u1"])
    await store.close()
    with pytest.raises(UsageError):
        await store.get_mark("s1", "a")
    with pytest.raises(UsageError):
        await store.set_mark("s1", "a", "x", previous=None)


# --- claims (STORE-2: a session is run by one process at a time) --------------------------------


async def test_a_claimed_session_is_refused_until_released(store: SessionStore) -> None:
    await write_chain(store, "s1", ["u1"])
    claim = await store.claim_session("s1")
    assert isinstance(claim, SessionClaim)
    assert claim.session_id == "s1"
    with pytest.raises(SessionBusy, match="'s1'") as refused:
        await store.claim_session("s1")
    assert isinstance(refused.value, UsageError)
    assert refused.value.session_id == "s1"
    other = await store.claim_session("s2")  # another session (not written yet) is free
    await claim.release()
    assert claim.released
    await claim.release()  # a second release does nothing
    again = await store.claim_session("s1")
    await again.release()
    await other.release()


async def test_a_claim_is_an_async_context(store: SessionStore) -> None:
    async with await store.claim_session("s1") as claim:
        assert not claim.released
        with pytest.raises(SessionBusy):
            await store.claim_session("s1")
    assert claim.released
    await (await store.claim_session("s1")).release()


async def test_closing_the_store_lets_its_claims_go(store: SessionStore) -> None:
    claim = await store.claim_session("s1")
    await store.close()
    await claim.release()  # after close: nothing left to let go, and no error
    with pytest.raises(UsageError):
        await store.claim_session("s2")


# --- fences (WORK-2: a worker whose lease was taken over writes nothing more) ------------------


def fenced_inmemory(_tmp: Path, _request: pytest.FixtureRequest) -> tuple[SessionStore, RunQueue]:
    queue = InMemoryRunQueue()
    return InMemorySessionStore(run_queue=queue), queue


def fenced_sqlite(tmp: Path, _request: pytest.FixtureRequest) -> tuple[SessionStore, RunQueue]:
    path = tmp / "db" / "sessions.sqlite"
    return SqliteSessionStore(path), SqliteRunQueue(path)


def fenced_postgres(_tmp: Path, request: pytest.FixtureRequest) -> tuple[SessionStore, RunQueue]:
    database = PostgresDatabase(PostgresSettings(request.getfixturevalue("postgres_url")))
    return PostgresSessionStore(database), PostgresRunQueue(database)


FENCED: dict[str, Callable[[Path, pytest.FixtureRequest], tuple[SessionStore, RunQueue]]] = {
    "inmemory": fenced_inmemory,
    "sqlite": fenced_sqlite,
    "postgres": fenced_postgres,
}


@pytest.fixture(params=sorted(FENCED))
async def fenced(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[SessionStore, RunQueue]]:
    """A session store and a run queue on the same database."""
    store, queue = FENCED[request.param](tmp_path, request)
    yield store, queue
    await queue.close()
    await store.close()


async def take(queue: RunQueue, worker: str, now: float) -> Lease:
    lease = await queue.claim(worker, ["/work/p"], lease_s=10, max_attempts=5, now=now)
    assert lease is not None
    return lease


def fence_of(lease: Lease) -> RunFence:
    return RunFence(run_id=lease.run.id, fence=lease.fence)


def turn(mid: str, parent: str | None, lease: Lease, seq: int) -> TurnCommit:
    return TurnCommit(
        session=session("s1", leaf=mid),
        run=run("r1"),
        messages=[assistant(mid, parent)],
        events=[TextDeltaEvent(seq=seq, run_id="r1", session_id="s1", at=T0, text=mid)],
        fence=fence_of(lease),
    )


async def test_a_commit_under_a_lease_taken_over_writes_nothing(
    fenced: tuple[SessionStore, RunQueue],
) -> None:
    store, queue = fenced
    await queue.submit(QueuedRun(id="r1", session_id="s1", project_dir="/work/p", message="go"))
    old = await take(queue, "w1", T0)
    await store.commit(turn("m1", None, old, 0))  # its lease holds: written
    new = await take(queue, "w2", T0 + 10)  # the lease ran out: taken over

    with pytest.raises(LeaseLost, match="fence 1"):
        await store.commit(turn("m2", "m1", old, 1))
    assert ids(await store.active_path("s1")) == ["m1"]
    assert [e.seq for e in await store.run_events("r1")] == [0]

    await store.commit(turn("m2", "m1", new, 1))  # the new holder goes on from the last turn
    assert ids(await store.active_path("s1")) == ["m1", "m2"]


async def test_a_commit_fenced_with_an_ended_or_unknown_run_writes_nothing(
    fenced: tuple[SessionStore, RunQueue],
) -> None:
    store, queue = fenced
    await queue.submit(QueuedRun(id="r1", session_id="s1", project_dir="/work/p", message="go"))
    lease = await take(queue, "w1", T0)
    await queue.finish(lease, "cancelled", now=T0 + 1)
    with pytest.raises(LeaseLost):
        await store.commit(turn("m1", None, lease, 0))
    with pytest.raises(LeaseLost):
        await store.commit(
            TurnCommit(
                session=session("s1"), run=run("r1"), fence=RunFence(run_id="ghost", fence=1)
            )
        )
    assert await store.get_session("s1") is None
    assert list(await store.run_events("r1")) == []
