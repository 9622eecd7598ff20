"""The memory extraction job (MEM-3) with fakes: a preference becomes a `user/` memory, the
policy refuses secrets and listings (with events, nothing written), the same messages are never
extracted twice (also by a new runtime over the same SQLite file), failures leave the messages
pending, and the job runs after runs without ever failing one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from soong_agent.adapters.storage.sqlite_store import SqliteSessionStore
from soong_agent.application.memory.extraction import (
    MARK_KEY,
    ExtractionSettings,
    MemoryExtraction,
)
from soong_agent.application.memory.extraction_model import (
    ExtractionFailed,
    parse_operations,
    pending_messages,
)
from soong_agent.application.runs.service import RunService
from soong_agent.domain.memory import MemoryPolicy
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.events import ErrorEvent, MemoryRejected, RunEvent
from soong_agent.ports.memory import Memory
from soong_agent.ports.messages import Message, TextBlock, user_text
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.storage import SessionStore
from soong_agent.testing import (
    DictSecretRedactor,
    FixedClock,
    InMemoryMemoryStore,
    ScriptedModel,
    ScriptedResponse,
    SequentialIds,
)
from tests.support.harness import Harness

KEY = "sk-canary-0123456789abcdef0123"
TABS = "I always use tabs, never spaces"


def ops(*operations: dict[str, Any]) -> ScriptedResponse:
    return ScriptedResponse.text(json.dumps({"operations": list(operations)}))


PREFER_TABS = {
    "op": "create",
    "name": "prefer_tabs",
    "category": "user",
    "description": "The user indents with tabs, never spaces",
    "body": "The user always uses tabs for indentation, never spaces.",
}


def extraction_over(
    store: SessionStore,
    model: ScriptedModel,
    memory: InMemoryMemoryStore | None = None,
    clock: FixedClock | None = None,
    **settings: Any,
) -> MemoryExtraction:
    redactor = DictSecretRedactor({"OPENAI_API_KEY": KEY})
    return MemoryExtraction(
        sessions=store,
        memory=memory if memory is not None else InMemoryMemoryStore(),
        policy=MemoryPolicy(redactor),
        provider=model,
        clock=clock or FixedClock(),
        settings=ExtractionSettings(**settings),
        redactor=redactor,
    )


async def session_with(h: Harness, *messages: str) -> str:
    """A session of the harness with one completed run per message."""
    session_id: str | None = None
    for message in messages:
        run = await h.service.start(message, session_id=session_id)
        assert (await run.wait()).ok
        session_id = run.session_id
    assert session_id is not None
    return session_id


def sent_text(request: ModelRequest) -> str:
    block = request.messages[0].content[0]
    assert isinstance(block, TextBlock)
    return block.text


# --- one extraction ---------------------------------------------------------------------------


async def test_a_preference_becomes_a_user_memory() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    session_id = await session_with(h, TABS)
    model = ScriptedModel([ops(PREFER_TABS)])
    memory = InMemoryMemoryStore()
    report = await extraction_over(h.store, model, memory).extract(session_id)
    assert (report.created, report.rejected, report.failed) == (["prefer_tabs"], [], None)
    stored = memory.read("prefer_tabs")
    assert stored.category == "user" and "tabs" in stored.body
    assert "user/prefer_tabs.md" in memory.files
    (request,) = model.calls
    assert TABS in sent_text(request) and "The memory is empty." in sent_text(request)
    assert await h.store.get_mark(session_id, MARK_KEY) is not None


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (f"The user's OpenAI key is {KEY}", "secret"),
        ("Project layout:\nsrc/main.py\nsrc/utils.py\ntests/test_main.py\n", "file_structure"),
    ],
)
async def test_a_secret_or_a_listing_is_rejected_with_an_event_and_nothing_written(
    body: str, code: str
) -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    session_id = await session_with(h, "remember this for me please")
    bad = {**PREFER_TABS, "name": "remember_me", "description": "Something", "body": body}
    memory = InMemoryMemoryStore()
    extraction = extraction_over(h.store, ScriptedModel([ops(bad)]), memory)
    report = await extraction.extract(session_id)
    assert report.rejected == ["remember_me"] and report.created == []
    assert memory.files == {} and memory.catalogue().entries == ()
    (notice,) = extraction.notices
    assert notice.event is MemoryRejected
    assert notice.fields["source"] == "extraction" and code in notice.fields["codes"]
    assert KEY not in json.dumps(notice.fields)


async def test_a_rejection_is_recorded_in_the_sessions_next_run() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    bad = {**PREFER_TABS, "body": f"key: {KEY}"}
    h.service.extraction = extraction_over(h.store, ScriptedModel([ops(bad)]), every_messages=1)
    session_id = await session_with(h, "my key is secret")
    await h.service.extraction.join()
    run = await h.service.start("and now?", session_id=session_id)
    await run.wait()
    events: list[RunEvent] = [e async for e in run.events()]
    (rejected,) = [e for e in events if isinstance(e, MemoryRejected)]
    assert rejected.source == "extraction" and rejected.codes == ["secret"]
    stored = [e.type for c in h.store.commits for e in c.events if e.run_id == run.run_id]
    assert "memory_rejected" in stored


async def test_the_secret_is_scrubbed_before_the_model_sees_it() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    session_id = await session_with(h, f"{TABS}. My key is {KEY}")
    model = ScriptedModel([ops()])
    await extraction_over(h.store, model).extract(session_id)
    text = sent_text(model.calls[0])
    assert KEY not in text and "[redacted:OPENAI_API_KEY]" in text and TABS in text


async def test_a_name_that_exists_is_updated_not_duplicated() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    session_id = await session_with(h, "tabs, and width 4")
    memory = InMemoryMemoryStore(
        [Memory("prefer_tabs", "The user indents with tabs", "user", "Tabs.")]
    )
    again = {**PREFER_TABS, "body": "Tabs, shown four columns wide."}
    same_description = {
        **PREFER_TABS,
        "name": "tabs_again",
        "description": "the user indents with TABS, never spaces",  # the same, once updated
        "body": "Tabs everywhere.",
    }
    update_partial = {"op": "update", "name": "prefer_tabs", "description": "Tabs, width 4"}
    model = ScriptedModel([ops(again, same_description, update_partial)])
    report = await extraction_over(h.store, model, memory).extract(session_id)
    assert report.updated == ["prefer_tabs", "prefer_tabs", "prefer_tabs"]
    assert report.created == []
    assert memory.catalogue().names() == ["prefer_tabs"]
    stored = memory.read("prefer_tabs")
    assert (stored.description, stored.body) == ("Tabs, width 4", "Tabs everywhere.")


async def test_a_delete_removes_the_memory() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    session_id = await session_with(h, "forget that I like spaces")
    memory = InMemoryMemoryStore([Memory("likes_spaces", "Spaces", "user", "Spaces.")])
    model = ScriptedModel([ops({"op": "delete", "name": "likes_spaces"})])
    report = await extraction_over(h.store, model, memory).extract(session_id)
    assert report.deleted == ["likes_spaces"] and memory.catalogue().entries == ()


# --- idempotence ------------------------------------------------------------------------------


async def test_the_same_messages_twice_make_one_memory() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    session_id = await session_with(h, TABS)
    memory = InMemoryMemoryStore()
    model = ScriptedModel([ops(PREFER_TABS)])  # a second call would fail: nothing scripted
    extraction = extraction_over(h.store, model, memory)
    await extraction.extract(session_id)
    second = await extraction.extract(session_id)
    assert second.skipped == "no pending messages"
    assert len(model.calls) == 1 and memory.catalogue().names() == ["prefer_tabs"]


async def test_the_mark_survives_a_new_runtime_over_the_same_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "sessions.sqlite"
    memory = InMemoryMemoryStore()
    first = SqliteSessionStore(db)
    try:
        h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")), store=first)  # type: ignore[arg-type]
        h.service.extraction = extraction_over(
            first, ScriptedModel([ops(PREFER_TABS)]), memory, every_messages=1
        )
        session_id = await session_with(h, TABS)
        await h.service.extraction.aclose(timeout_s=30)
        assert memory.catalogue().names() == ["prefer_tabs"]
    finally:
        await first.close()
    second = SqliteSessionStore(db)
    try:
        ids = SequentialIds()
        for prefix in ("ses", "run", "msg"):  # a new process: new ids
            for _ in range(100):
                ids.new_id(prefix)
        h2 = Harness(ScriptedModel(default=ScriptedResponse.text("ok")), store=second, ids=ids)  # type: ignore[arg-type]
        model = ScriptedModel()  # any call fails
        extraction = extraction_over(second, model, memory, every_messages=1)
        assert await extraction.pending(session_id) == []
        report = await extraction.extract(session_id)
        assert report.skipped == "no pending messages" and model.calls == []
        # a new message of that session is pending, and only it
        h2.service.extraction = extraction
        reply = ScriptedModel([ops()])
        extraction._provider = reply
        run = await h2.service.start("I also like short answers", session_id=session_id)
        await run.wait()
        await extraction.aclose(timeout_s=30)
        (request,) = reply.calls
        assert "short answers" in sent_text(request) and TABS not in sent_text(request)
    finally:
        await second.close()
    assert memory.catalogue().names() == ["prefer_tabs"]


async def test_another_process_moving_the_mark_first_wins() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    session_id = await session_with(h, TABS)
    memory = InMemoryMemoryStore()

    def meanwhile(request: ModelRequest) -> ScriptedResponse:
        # another process extracts the same messages while this model call runs
        asyncio.get_running_loop().create_task(
            h.store.set_mark(session_id, MARK_KEY, "elsewhere", previous=None)
        )
        return ScriptedResponse.text(json.dumps({"operations": [PREFER_TABS]}), delay_s=0.01)

    report = await extraction_over(h.store, ScriptedModel([meanwhile]), memory).extract(session_id)
    assert report.skipped == "another process extracted these messages meanwhile"
    assert memory.files == {}


def test_compaction_copies_of_extracted_messages_are_not_pending() -> None:
    messages = [
        user_text("first", id="m1"),
        Message(id="a1", role="assistant", content=[TextBlock(text="ok")]),
        user_text("second", id="m2"),
        user_text("first", id="m3"),  # a copy on a compacted branch
        user_text("third", id="m4"),
        Message(id="r1", role="user", kind="reminder", content=[TextBlock(text="go on")]),
    ]
    assert [p.id for p in pending_messages(messages, None)] == ["m1", "m2", "m4"]
    assert [p.id for p in pending_messages(messages, "m2")] == ["m4"]
    assert pending_messages(messages, "m4") == []


# --- failures ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            ProviderError("down", kind="server", provider="scripted", base_url="memory://x"),
            "down",
        ),
        (ScriptedResponse.text("Sure! The user likes tabs."), "unusable answer"),
        (ScriptedResponse.text('{"operations": [{"op": "merge"}]}'), "unusable answer"),
    ],
)
async def test_a_failure_leaves_the_messages_pending_and_is_retried(answer: Any, said: str) -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    session_id = await session_with(h, TABS)
    memory = InMemoryMemoryStore()
    model = ScriptedModel([answer, ops(PREFER_TABS)])
    extraction = extraction_over(h.store, model, memory)
    failed = await extraction.extract(session_id)
    assert failed.failed is not None and said in failed.failed
    assert await h.store.get_mark(session_id, MARK_KEY) is None
    (notice,) = extraction.notices
    assert notice.event is ErrorEvent and notice.fields["kind"] == "memory_extraction"
    assert notice.fields["fatal"] is False
    retried = await extraction.extract(session_id)
    assert retried.created == ["prefer_tabs"]


async def test_a_timeout_is_a_failure_not_a_hang() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    session_id = await session_with(h, TABS)
    slow = ScriptedModel([ScriptedResponse.text("[]", delay_s=30)])
    report = await extraction_over(h.store, slow, timeout_s=0.05).extract(session_id)
    assert report.failed is not None and "did not answer within 0.05 s" in report.failed


def test_parse_operations() -> None:
    good, problems = parse_operations(
        '```json\n{"operations": [{"action": "create", "name": "a", "type": "user", '
        '"description": "d", "content": "b"}, {"op": "nope", "name": "x"}]}\n```'
    )
    assert [(o.op, o.name, o.category, o.body) for o in good] == [("create", "a", "user", "b")]
    assert len(problems) == 1 and "operation 2 ignored" in problems[0]
    assert parse_operations("[]") == ([], [])
    assert parse_operations('Here: [{"op": "delete", "name": "a"}]')[0][0].op == "delete"
    with pytest.raises(ExtractionFailed):
        parse_operations("no json here")
    with pytest.raises(ExtractionFailed):
        parse_operations('{"something": 1}')


# --- in the runtime -----------------------------------------------------------------------------


async def test_runs_trigger_extraction_once_enough_messages_are_pending() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    model = ScriptedModel([ops(PREFER_TABS)])
    memory = InMemoryMemoryStore()
    extraction = extraction_over(h.store, model, memory, every_messages=2, idle_seconds=3600)
    h.service.extraction = extraction
    session_id = await session_with(h, TABS)
    await extraction.join()  # the after-run check ran: one message is not due yet
    assert model.calls == []
    await session_with_more(h, session_id, "and short answers")
    await extraction.aclose(timeout_s=30)
    assert len(model.calls) == 1 and memory.catalogue().names() == ["prefer_tabs"]
    text = sent_text(model.calls[0])
    assert TABS in text and "short answers" in text


async def session_with_more(h: Harness, session_id: str, message: str) -> None:
    run = await h.service.start(message, session_id=session_id)
    assert (await run.wait()).ok


async def test_a_long_message_is_due_by_tokens() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    model = ScriptedModel([ops()])
    h.service.extraction = extraction_over(h.store, model, every_tokens=50, idle_seconds=3600)
    await session_with(h, "word " * 100)
    await h.service.extraction.aclose(timeout_s=30)
    assert len(model.calls) == 1


async def test_an_idle_session_is_extracted() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    model = ScriptedModel([ops(PREFER_TABS)])
    memory = InMemoryMemoryStore()
    h.service.extraction = extraction_over(h.store, model, memory, idle_seconds=0.01)
    await session_with(h, TABS)
    for _ in range(500):  # wait for the idle timer, however slow the machine
        if memory.files:
            break
        await asyncio.sleep(0.01)
    await h.service.extraction.aclose(timeout_s=30)
    assert memory.catalogue().names() == ["prefer_tabs"]


async def test_many_new_sessions_each_wait_their_idle_time_and_are_each_extracted() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    model = ScriptedModel(default=ops())
    extraction = extraction_over(h.store, model, idle_seconds=0.3)
    h.service.extraction = extraction
    first = await session_with(h, TABS)
    await extraction.join()  # (the first run also sweeps: a job of its own)
    later = [await session_with(h, f"note {i}: {TABS}") for i in range(3)]
    assert extraction.waiting_idle() == [first, *later]  # none is due: all wait, oldest first
    assert model.calls == []
    for _ in range(1000):  # one timer serves them all, however slow the machine
        if len(model.calls) == 4:
            break
        await asyncio.sleep(0.01)
    await extraction.aclose(timeout_s=30)
    assert extraction.waiting_idle() == []
    extracted = sorted(sent_text(call) for call in model.calls)
    assert len(extracted) == 4 and all(TABS in text for text in extracted)


async def test_a_new_sessions_first_run_that_is_due_is_extracted_at_once() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    model = ScriptedModel(default=ops())
    extraction = extraction_over(h.store, model, every_tokens=50, idle_seconds=3600)
    h.service.extraction = extraction
    await session_with(h, "a short one")
    await extraction.join()
    await session_with(h, "word " * 100)  # a new session, due by tokens: no idle wait
    await extraction.join()
    assert len(model.calls) == 1 and "word word" in sent_text(model.calls[0])
    await extraction.aclose()


async def test_a_job_given_as_a_factory_is_made_at_the_end_of_the_first_run() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    model = ScriptedModel([ops(PREFER_TABS)], default=ops())
    made: list[MemoryExtraction] = []

    def make() -> MemoryExtraction:
        made.append(extraction_over(h.store, model, every_messages=1, idle_seconds=3600))
        return made[-1]

    service = RunService(h.service._assembler, h.service._root, extraction=make)
    run = await service.start(TABS)
    assert made == []  # nothing of the job is made (or imported) before the run's request
    assert (await run.wait()).ok
    assert len(made) == 1 and service.extraction is made[0]
    await made[0].join()  # due after one message: extracted
    again = await service.start("more", session_id=run.session_id)
    assert (await again.wait()).ok
    assert len(made) == 1  # one job for the runtime, which hears of every later run
    await made[0].aclose(timeout_s=30)
    assert [sent_text(c).count("[1]") for c in model.calls] == [1, 1]
    assert "more" in sent_text(model.calls[1])


async def test_a_new_run_cancels_the_idle_wait() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    model = ScriptedModel()
    extraction = extraction_over(h.store, model, idle_seconds=3600)
    h.service.extraction = extraction
    session_id = await session_with(h, TABS)
    await extraction.join()
    assert extraction.waiting_idle() == [session_id]
    extraction.run_started(session_id)
    assert extraction.waiting_idle() == []
    await extraction.aclose()
    assert model.calls == []


async def test_sessions_left_idle_by_an_earlier_runtime_are_swept_after_a_run() -> None:
    clock = FixedClock()
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")), clock=clock)
    old = await session_with(h, TABS)  # no extraction job then (an earlier runtime)
    clock.advance(600)
    model = ScriptedModel([ops(PREFER_TABS)])
    memory = InMemoryMemoryStore()
    h.service.extraction = extraction_over(h.store, model, memory, clock=clock, idle_seconds=300)
    await session_with(h, "something else entirely")
    await h.service.extraction.aclose(timeout_s=30)
    (request,) = model.calls
    assert TABS in sent_text(request) and "something else" not in sent_text(request)
    assert memory.catalogue().names() == ["prefer_tabs"]
    assert await h.store.get_mark(old, MARK_KEY) is not None
    # a later runtime's sweep does not read that session again while it is unchanged
    reads: list[str] = []
    real = h.store.all_messages

    async def counting(session_id: str) -> list[Message]:
        reads.append(session_id)
        return await real(session_id)

    h.store.all_messages = counting  # type: ignore[method-assign]
    later = extraction_over(h.store, ScriptedModel(), memory, clock=clock, idle_seconds=300)
    assert await later.sweep() == []
    assert old not in reads


async def test_closing_bounds_a_hanging_extraction_and_leaves_the_mark() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    hanging = ScriptedModel([ScriptedResponse.text("[]", delay_s=60)])
    extraction = extraction_over(h.store, hanging, every_messages=1)
    h.service.extraction = extraction
    session_id = await session_with(h, TABS)
    for _ in range(500):
        if hanging.calls:
            break
        await asyncio.sleep(0.01)
    assert hanging.calls, "the extraction started"
    await extraction.aclose(timeout_s=0.05)
    assert not extraction.busy
    assert await h.store.get_mark(session_id, MARK_KEY) is None
    assert [p.text for p in await extraction.pending(session_id)] == [TABS]


async def test_a_failing_job_never_fails_the_run() -> None:
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))

    class Exploding(InMemoryMemoryStore):
        def catalogue(self) -> Any:
            raise RuntimeError("disk on fire")

    extraction = extraction_over(h.store, ScriptedModel(), Exploding(), every_messages=1)
    h.service.extraction = extraction
    session_id = await session_with(h, TABS)
    await extraction.aclose(timeout_s=30)
    (notice,) = extraction.notices
    assert notice.event is ErrorEvent and "disk on fire" in notice.fields["message"]
    assert notice.session_id == session_id


async def test_a_sweep_gives_up_on_a_session_whose_extraction_keeps_failing() -> None:
    # each later CLI call sweeps again: a model that cannot extract is not asked for ever
    clock = FixedClock()
    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")), clock=clock)
    old = await session_with(h, TABS)
    clock.advance(600)
    failing = ScriptedModel(default=ScriptedResponse.text("no JSON here"))
    said: list[str] = []
    for attempt in range(1, 5):
        job = extraction_over(h.store, failing, clock=clock, idle_seconds=300)
        reports = await job.sweep()
        if attempt <= 3:
            assert [r.failed is not None for r in reports] == [True]
        else:
            assert reports == []  # given up on: no model call
        said += [n.line() for n in job.notices if "times" in n.line()]
        await job.aclose()
    assert len(failing.calls) == 3
    assert len(said) == 1 and "failed 3 times" in said[0]  # said once, by the third sweep
    # the session changes (a new message): it is tried again
    run = await h.service.start("and I use four spaces in YAML", session_id=old)
    assert (await run.wait()).ok
    clock.advance(600)
    job = extraction_over(h.store, failing, clock=clock, idle_seconds=300)
    assert [r.failed is not None for r in await job.sweep()] == [True]
    await job.aclose()
    assert len(failing.calls) == 4
