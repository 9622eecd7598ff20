"""Long sessions: thousands of turns inside a small window, a kill mid-run, resumes near the window.

The scripted agent and its per-request checks live in tests/support/long_session_child.py (also
the child process of the kill test). Every session here uses a real SQLite file and the real
o200k token counter.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
from soong_agent.adapters.system.clock import RandomIds, SystemClock
from soong_agent.adapters.tokens.o200k import O200kTokenCounter
from soong_agent.application.runs.loop import INTERRUPTED
from soong_agent.application.tools.todo import TodoBoard
from soong_agent.domain.config.schema import CompactConfig, ContextConfig
from soong_agent.domain.history import unanswered_calls
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.events import CompactionEvent, ModelCallStarted, RunEvent
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.ports.model import ModelRequest
from soong_agent.testing import (
    FixedClock,
    InMemoryFileSystem,
    ScriptedModel,
    ScriptedResponse,
    SequentialIds,
)
from tests.support.long_session_child import (
    INPUT_LIMIT,
    REQUEST,
    CarryState,
    LongSessionScript,
    RequestSizer,
    build_service,
    carry_problems,
    is_compact_request,
    state_after,
)

REPO = Path(__file__).resolve().parents[2]
TURNS = 2_000


@pytest.fixture(scope="module")
def counter() -> O200kTokenCounter:
    return O200kTokenCounter()


def compactions(events: list[RunEvent]) -> list[CompactionEvent]:
    """The compaction events that changed the context."""
    return [e for e in events if isinstance(e, CompactionEvent) and e.strategy != "none"]


def report(failures: list[str]) -> str:
    return f"{len(failures)} problems, the first ones:\n" + "\n".join(failures[:15])


async def test_two_thousand_turns_stay_in_the_window_and_keep_the_carry_over(
    tmp_path: Path, counter: O200kTokenCounter
) -> None:
    script = LongSessionScript(turns=TURNS, sizer=RequestSizer(counter))
    model = ScriptedModel(default=script, unique_call_ids=False)
    store = SqliteSessionStore(tmp_path / "sessions.sqlite")
    board = TodoBoard()
    service = build_service(
        model=model,
        store=store,
        ids=SequentialIds(),
        clock=FixedClock(),
        max_turns=TURNS + 100,
        board=board,
        counter=counter,
    )
    try:
        run = await service.start(REQUEST)
        result = await run.wait()
        assert result.status == "completed", result.reason
        assert result.final_text == "done: every slice is processed"
        assert result.turns == TURNS + 1
        # (a) window, (b) carry-over, (c) every call answered: checked on every request
        assert script.checked == TURNS + 1
        assert script.failures == [], report(script.failures)
        assert max(script.sizes) <= INPUT_LIMIT
        assert script.state.todos and len(script.state.files) > TURNS // 7

        events = list(await store.run_events(run.run_id))
        done = compactions(events)
        assert len(done) > 10, collections.Counter((c.strategy, c.trigger) for c in done)
        assert all(c.tokens_after < c.tokens_before for c in done)
        assert script.summaries >= len([c for c in done if c.strategy == "summary"])

        # what is on disk is exactly what the model saw last, plus its answer
        path = await store.active_path(run.session_id)
        last = [c for c in model.calls if not is_compact_request(c)][-1]
        assert [m.id for m in path[:-1]] == [m.id for m in last.messages]
        assert path[-1].text == result.final_text
        # the original messages stay in the store: every turn's call is there
        everything = await store.all_messages(run.session_id)
        call_ids = {c.id for m in everything for c in m.tool_calls}
        assert {f"c{n}_0" for n in range(1, TURNS + 1)} <= call_ids
        assert board.current_todos(run.session_id)
    finally:
        await store.close()


def _start_child(db: Path, hang_at: int, log: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.long_session_child", str(db), str(hang_at)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )


def _read_until_hanging(child: subprocess.Popen[str], log: Path) -> tuple[str, int]:
    """The session id and the number of turns the child reported before it hung."""
    assert child.stdout is not None
    watchdog = threading.Timer(120, child.kill)  # a wedged child must not hang the suite
    watchdog.start()
    session_id, turns = "", 0
    try:
        for line in child.stdout:
            word, _, value = line.strip().partition(" ")
            if word == "session":
                session_id = value
            elif word == "turn":
                turns = int(value)
            elif word == "hanging":
                return session_id, turns
    finally:
        watchdog.cancel()
    raise AssertionError(
        f"the child ended before hanging (rc {child.wait()}):\n{log.read_text()[-3000:]}"
    )


async def test_a_killed_session_resumes_and_continues(
    tmp_path: Path, counter: O200kTokenCounter
) -> None:
    db, hang_at = tmp_path / "sessions.sqlite", 150
    child = _start_child(db, hang_at, tmp_path / "child.log")
    try:
        session_id, turns = _read_until_hanging(child, tmp_path / "child.log")
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)  # mid-tool-call: the hang tool never returns
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    assert session_id.startswith("ses_") and turns == hang_at

    store = SqliteSessionStore(db)
    try:
        on_disk = await store.active_path(session_id)
        dangling = {c.id for c in unanswered_calls(on_disk)}
        hang_stored = any(c.name == "hang" for m in on_disk for c in m.tool_calls)
        assert not hang_stored or f"k{hang_at}_hang" in dangling
        # the turn before the killed one is on disk, answered
        last_turn = [m for m in on_disk if any(c.id == f"k{hang_at - 1}_0" for c in m.tool_calls)]
        assert last_turn, "the last finished turn before the kill was lost"
        if not hang_stored:
            assert on_disk[-1].tool_results[0].call_id == f"k{hang_at - 1}_0"

        # every turn before the killed one is durable: their carry-over must come back
        before_kill = state_after(hang_at - 1)
        resumed_state = CarryState(
            request="continue with the next slices",
            todos=before_kill.todos,
            files=dict(before_kill.files),
        )

        def forget_stale_todos(n: int) -> ToolCallBlock | None:
            # A new process has an empty TodoBoard: the list written before the kill is checked
            # in the first resumed request; the todo test below follows it through compactions.
            if n == hang_at:
                script.state.todos = ""
            return None

        script = LongSessionScript(
            turns=60,
            sizer=RequestSizer(counter),
            first_turn=hang_at,
            state=resumed_state,
            id_prefix="r",
            on_turn=forget_stale_todos,
        )
        model = ScriptedModel(default=script, unique_call_ids=False)
        service = build_service(
            model=model,
            store=store,
            ids=RandomIds(),
            clock=SystemClock(),
            max_turns=200,
            counter=counter,
        )
        run = await service.start("continue with the next slices", session_id=session_id)
        result = await run.wait()
        assert result.status == "completed", result.reason
        assert result.final_text == "done: every slice is processed"

        first = script.first_request
        assert first is not None
        # valid: every call answered (a call cut by the kill, if one was stored, by the
        # synthesised "interrupted" result), within the window, with the carry-over
        assert script.failures == [], report(script.failures)
        assert script.sizes[0] <= INPUT_LIMIT
        assert carry_problems(first.messages, CarryState(request=REQUEST)) == []
        results = {r.call_id: r for m in first.messages for r in m.tool_results}
        for call_id in dangling:
            assert results[call_id].content == INTERRUPTED
        assert first.messages[-1].text == "continue with the next slices"

        runs = await store.list_runs(session_id)
        assert len(runs) == 2 and runs[-1].status == "completed"
        path = await store.active_path(session_id)
        assert path[-1].text == result.final_text
    finally:
        await store.close()


def _read_everything(turns: int) -> LongSessionScript:
    return LongSessionScript(turns=turns, sizer=None, todos=False)


async def test_resume_over_the_window_compacts_before_the_first_call(
    tmp_path: Path, counter: O200kTokenCounter
) -> None:
    store = SqliteSessionStore(tmp_path / "sessions.sqlite")
    board = TodoBoard()
    try:
        big = build_service(
            model=ScriptedModel(default=_read_everything(12), unique_call_ids=False),
            store=store,
            ids=SequentialIds(),
            clock=FixedClock(),
            max_turns=50,
            board=board,
            window=200_000,
            compact=CompactConfig(enabled=False),
            counter=counter,
        )
        first = await (await big.start(REQUEST)).wait()
        assert first.status == "completed"
        grown = await store.active_path(first.session_id)
        sizer = RequestSizer(counter)
        assert sizer(ModelRequest(system=[], messages=grown)) > INPUT_LIMIT  # over the window

        script = LongSessionScript(
            turns=5,
            sizer=RequestSizer(counter),
            first_turn=13,
            state=state_after(12, todos=False),
            todos=False,
        )
        script.state.request = "now summarise what you found"
        small = build_service(
            model=ScriptedModel(default=script, unique_call_ids=False),
            store=store,
            ids=RandomIds(),  # SequentialIds would reuse the first run's message ids
            clock=FixedClock(),
            max_turns=50,
            board=board,
            counter=counter,
        )
        run = await small.start("now summarise what you found", session_id=first.session_id)
        result = await run.wait()
        assert result.status == "completed", result.reason
        assert script.failures == [], report(script.failures)
        assert script.sizes[0] <= INPUT_LIMIT

        events = list(await store.run_events(run.run_id))
        first_call = next(i for i, e in enumerate(events) if isinstance(e, ModelCallStarted))
        early = compactions(events[:first_call])
        assert early and early[0].trigger == "budget"
        assert early[0].tokens_before > INPUT_LIMIT > early[-1].tokens_after
    finally:
        await store.close()


# --------------------------------------------------------------------------- library bugs


async def test_the_todo_list_survives_compaction_after_a_resume(
    tmp_path: Path, counter: O200kTokenCounter
) -> None:
    store = SqliteSessionStore(tmp_path / "sessions.sqlite")
    try:
        before = build_service(
            model=ScriptedModel(
                default=LongSessionScript(turns=30, sizer=None), unique_call_ids=False
            ),
            store=store,
            ids=RandomIds(),
            clock=FixedClock(),
            max_turns=100,
            board=TodoBoard(),
            counter=counter,
        )
        first = await (await before.start(REQUEST)).wait()
        assert first.status == "completed"
        state = state_after(30)
        assert state.todos  # turn 30 wrote the list
        state.request = "keep going"
        # a later process (a new TodoBoard) resumes; the agent reads on without touching its plan
        script = LongSessionScript(
            turns=20, sizer=RequestSizer(counter), first_turn=31, state=state, todos=False
        )
        after = build_service(
            model=ScriptedModel(default=script, unique_call_ids=False),
            store=store,
            ids=RandomIds(),
            clock=FixedClock(),
            max_turns=100,
            board=TodoBoard(),
            counter=counter,
        )
        run = await after.start("keep going", session_id=first.session_id)
        result = await run.wait()
        assert result.status == "completed"
        assert compactions(list(await store.run_events(run.run_id)))
        assert script.failures == [], report(script.failures)
    finally:
        await store.close()


def _read_big_file_model(turns: int, *, summaries_fail: bool) -> ScriptedModel:
    calls = [0]

    def respond(request: ModelRequest) -> ScriptedResponse:
        if is_compact_request(request):
            if summaries_fail:
                raise ProviderError(
                    "compact model down", kind="server", provider="scripted", base_url="memory://"
                )
            return ScriptedResponse.text("SUMMARY")
        calls[0] += 1
        if calls[0] <= turns:
            return ScriptedResponse.tool_calls(("read_file", {"path": "data/part_0.txt"}))
        return ScriptedResponse.text("done")

    return ScriptedModel(default=respond)


async def test_micro_compaction_alone_is_enough_when_it_fits(
    tmp_path: Path, counter: O200kTokenCounter
) -> None:
    # ~800-token reads of a ~10k-token window: stubbing the old reads fits easily
    store = SqliteSessionStore(tmp_path / "sessions.sqlite")
    try:
        text = "".join(f"line {i}: some words of the file to read again\n" for i in range(120))
        model = _read_big_file_model(30, summaries_fail=True)
        service = build_service(
            model=model,
            store=store,
            ids=SequentialIds(),
            clock=FixedClock(),
            max_turns=60,
            fs=InMemoryFileSystem({"data/part_0.txt": text}),
            window=12_000,
            context=ContextConfig(reserve_output_tokens=1_000, dynamic_system_budget=2_000),
            compact=CompactConfig(
                reserve_tokens=1_000, keep_recent_tokens=2_000, max_summary_tokens=500
            ),
            counter=counter,
        )
        run = await service.start("read the file many times")
        result = await run.wait()
        assert result.status == "completed"
        done = compactions(list(await store.run_events(run.run_id)))
        assert done
        strategies = collections.Counter(c.strategy for c in done)
        assert strategies == {"micro": len(done)}, strategies
    finally:
        await store.close()
