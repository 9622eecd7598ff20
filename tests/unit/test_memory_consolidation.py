"""Memory consolidation (seed 002 "Dream") with fakes: duplicates merged, relative dates made
absolute, newer wins on contradictions, the index cap, the lock and the min-hours/min-sessions
gates (fake clock), dry run changes nothing, the policy refuses a secret the model proposes."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from pathlib import Path
from typing import Any, cast

import pytest

from soong_agent.application.memory.consolidation import (
    ConsolidationSettings,
    MemoryConsolidation,
)
from soong_agent.application.memory.consolidation_plan import parse_operations
from soong_agent.domain.memory import MemoryPolicy
from soong_agent.domain.memory.consolidation import (
    absolute_dates,
    index_fits,
    least_useful,
)
from soong_agent.ports.memory import Memory, MemoryEntry
from soong_agent.ports.storage import SessionInfo, SessionStore
from soong_agent.testing import (
    DictSecretRedactor,
    FixedClock,
    InMemoryMemoryStore,
    ScriptedModel,
    ScriptedResponse,
)

KEY = "sk-canary-0123456789abcdef0123"
DAY = 86_400.0
REF = dt.datetime(2026, 1, 10, 12, tzinfo=dt.UTC)  # a Saturday


def ops(*operations: dict[str, Any]) -> ScriptedResponse:
    return ScriptedResponse.text(json.dumps({"operations": list(operations)}))


def mem(name: str, description: str, body: str = "", category: str = "user") -> Memory:
    return Memory(name, description, category, body or description)  # type: ignore[arg-type]


def setup(
    tmp_path: Path, *responses: ScriptedResponse, **settings: Any
) -> tuple[MemoryConsolidation, InMemoryMemoryStore, ScriptedModel, FixedClock]:
    clock = FixedClock()
    store = InMemoryMemoryStore(clock=clock)
    model = ScriptedModel(list(responses))
    job = MemoryConsolidation(
        memory=store,
        policy=MemoryPolicy(DictSecretRedactor({"KEY": KEY})),
        provider=model,
        clock=clock,
        settings=ConsolidationSettings(**settings),
    )
    return job, store, model, clock


def test_absolute_dates() -> None:
    assert absolute_dates("the deploy broke yesterday", REF) == "the deploy broke on 2026-01-09"
    assert absolute_dates("slow since last week", REF) == "slow since the week of 2025-12-29"
    assert absolute_dates("Moved 3 days ago", REF) == "Moved on 2026-01-07"
    assert absolute_dates("renamed last month", REF) == "renamed in 2025-12"
    text = "nothing relative; todays and yesterdays aside"
    assert absolute_dates(text, REF) is text


def _entry(name: str, day: int, description: str = "x") -> MemoryEntry:
    when = REF + dt.timedelta(days=day)
    return MemoryEntry(name, description, "user", f"user/{name}.md", when, when)


def test_index_cap_drops_least_recently_updated() -> None:
    entries = [_entry(f"m{i:03d}", i) for i in range(210)]
    assert not index_fits(entries)
    dropped = least_useful(entries)
    assert [e.name for e in dropped] == [f"m{i:03d}" for i in range(len(dropped))]
    kept = [e for e in entries if e not in dropped]
    assert index_fits(kept) and len(kept) == 196  # 4 header lines + 196 = 200
    big = [_entry(f"b{i}", i, "d" * 180) for i in range(150)]
    assert index_fits([e for e in big if e not in least_useful(big)], max_bytes=25_000)


def test_duplicates_merged_and_dates_made_absolute(tmp_path: Path) -> None:
    merge = {
        "op": "merge",
        "name": "prefer_tabs",
        "sources": ["tabs_please"],
        "description": "The user indents with tabs",
        "body": "The user indents with tabs, never spaces.",
    }
    job, store, model, clock = setup(tmp_path, ops(merge))
    store.write(mem("prefer_tabs", "The user indents with tabs"))
    store.write(mem("tabs_please", "Tabs, not spaces, for the user"))
    store.write(mem("moved_office", "The user moved office", "The user moved office yesterday."))
    clock.advance(DAY)
    report = asyncio.run(job.run(force=True))
    assert report.failed is None and report.skipped is None
    names = store.catalogue().names()
    assert "tabs_please" not in names and "prefer_tabs" in names
    assert store.read("prefer_tabs").body == "The user indents with tabs, never spaces."
    assert store.read("moved_office").body == "The user moved office on 2025-12-31."
    assert {s.kind for s in report.applied} == {"merge", "redate"}
    # the model read the memories with their dates already absolute
    assert "on 2025-12-31" in str(model.last_call.messages)


def test_newer_wins_whatever_the_model_says(tmp_path: Path) -> None:
    resolve = {"op": "resolve", "name": "editor_vim", "sources": ["editor_emacs"]}
    job, store, _model, clock = setup(tmp_path, ops(resolve))
    store.write(mem("editor_vim", "The user edits with vim"))
    clock.advance(DAY)
    store.write(mem("editor_emacs", "The user switched to emacs"))
    report = asyncio.run(job.run(force=True))
    assert [s.kind for s in report.applied] == ["resolve"]
    assert store.catalogue().names() == ["editor_emacs"]
    body = store.read("editor_emacs").body
    assert body.startswith("The user switched to emacs")
    assert "Supersedes 'editor_vim'" in body and "vim" in body


def test_index_cap_applied(tmp_path: Path) -> None:
    job, store, _model, clock = setup(tmp_path, ops(), max_index_lines=7)
    for i in range(5):
        store.write(mem(f"fact_{i}", f"The user likes thing {i}"))
        clock.advance(60)
    report = asyncio.run(job.run(force=True))
    assert [s.kind for s in report.applied] == ["drop", "drop"]
    assert store.catalogue().names() == ["fact_2", "fact_3", "fact_4"]
    assert store.index_text is not None and store.index_text.count("\n") <= 7


def test_dry_run_changes_nothing(tmp_path: Path) -> None:
    delete = {"op": "delete", "name": "old_fact", "reason": "obsolete"}
    job, store, _model, _clock = setup(tmp_path, ops(delete))
    store.write(mem("old_fact", "The user had a meeting yesterday"))
    before = dict(store.files)
    plan = asyncio.run(job.plan())
    assert [s.kind for s in plan.steps] == ["delete"]
    assert plan.lines() == ["delete 'old_fact': obsolete"]
    assert store.files == before
    assert store.last_consolidation() is None  # no pass was claimed


def test_policy_refuses_a_secret(tmp_path: Path) -> None:
    update = {"op": "update", "name": "api", "body": f"The user's API key is {KEY}"}
    job, store, _model, _clock = setup(tmp_path, ops(update))
    store.write(mem("api", "The user prefers the staging API"))
    report = asyncio.run(job.run(force=True))
    assert report.applied == []
    assert report.plan is not None and [r.name for r in report.plan.rejected] == ["api"]
    assert KEY not in store.read("api").body


class Sessions:
    """Just `list_sessions`: the gate counts root sessions created since the last pass."""

    def __init__(self) -> None:
        self.infos: list[SessionInfo] = []

    async def list_sessions(self, *, limit: int = 50) -> list[SessionInfo]:
        return self.infos[-limit:]


def test_gates_and_lock(tmp_path: Path) -> None:
    job, store, model, clock = setup(tmp_path, ops(), ops(), min_hours=24, min_sessions=2)
    sessions = Sessions()
    job._sessions = cast(SessionStore, sessions)
    store.write(mem("fact", "The user likes tea"))

    async def new_session() -> None:
        now = clock.now()
        sessions.infos.append(SessionInfo(f"s{len(sessions.infos)}", str(tmp_path), now, now))
        sessions.infos.append(  # a child session does not count
            SessionInfo("child", str(tmp_path), now, now, parent_session_id="s0")
        )

    assert asyncio.run(job.run()).skipped == "0 new sessions since the last pass"
    asyncio.run(new_session())
    asyncio.run(new_session())
    clock.advance(1)
    first = asyncio.run(job.run())
    assert first.skipped is None and first.failed is None
    assert store.last_consolidation() == clock.now()
    clock.advance(3600)
    assert "h ago" in (asyncio.run(job.run()).skipped or "")
    clock.advance(DAY)
    assert "new sessions" in (asyncio.run(job.run()).skipped or "")
    asyncio.run(new_session())
    asyncio.run(new_session())
    clock.advance(1)
    with store.consolidation_lock() as claim:  # another process holds the lock
        assert claim is not None
        assert asyncio.run(job.run()).skipped == "another process is consolidating"
    assert asyncio.run(job.run()).skipped is None
    assert len(model.calls) == 2


def test_a_run_starts_no_consolidation_job_while_the_last_pass_is_recent(tmp_path: Path) -> None:
    job, store, _model, clock = setup(tmp_path, ops(), min_hours=24, min_sessions=0)
    store.write(mem("fact", "The user likes tea"))
    assert job.may_be_due()  # never passed: the job looks (and finds it due)
    assert asyncio.run(job.run()).skipped is None
    clock.advance(3600)
    assert not job.may_be_due()  # an hour after the pass: no job is started at all
    store.last_pass = clock.now() - 2 * DAY  # set back from outside
    assert not job.may_be_due()  # not looked at again before the day has passed …
    clock.advance(DAY)
    assert job.may_be_due()  # … then the file says when the last pass was


def test_no_pass_and_no_memory_folder_while_nothing_is_remembered(tmp_path: Path) -> None:
    from soong_agent.adapters.memory import FileMemoryStore

    clock = FixedClock()
    folder = tmp_path / "memory"
    model = ScriptedModel([ops()])
    job = MemoryConsolidation(
        memory=FileMemoryStore(folder, clock=clock),
        policy=MemoryPolicy(DictSecretRedactor({"KEY": KEY})),
        provider=model,
        clock=clock,
        settings=ConsolidationSettings(min_hours=0, min_sessions=0),
    )
    assert not job.may_be_due()
    assert asyncio.run(job.run()).skipped == "no memories yet"
    assert not folder.exists() and model.calls == []  # no lock file, no index, no request
    assert asyncio.run(job.run(force=True)).skipped == "no memories yet"  # the CLI's pass too
    assert not folder.exists()
    FileMemoryStore(folder, clock=clock).write(mem("fact", "The user likes tea"))
    assert job.may_be_due()
    assert asyncio.run(job.run()).skipped is None and len(model.calls) == 1


def test_model_failure_is_retried(tmp_path: Path) -> None:
    job, store, _model, _clock = setup(tmp_path, ScriptedResponse.text("no idea"), ops())
    store.write(mem("fact", "The user likes tea"))
    assert asyncio.run(job.run(force=True)).failed is not None
    assert store.last_consolidation() is None
    assert asyncio.run(job.run(force=True)).failed is None


def test_a_pass_cancelled_before_it_writes_is_retried_an_hour_later(tmp_path: Path) -> None:
    # a CLI run that ends while the pass waits on its model: the process cancels the pass
    job, store, model, clock = setup(
        tmp_path, ScriptedResponse.text("{}", delay_s=30), ops(), min_hours=24, min_sessions=0
    )
    store.write(mem("fact", "The user likes tea"))

    async def cancelled_mid_pass() -> None:
        task = asyncio.ensure_future(job.run())
        while not model.calls:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_mid_pass())
    assert "h ago" in (asyncio.run(job.run()).skipped or "")  # not again at the next run …
    clock.advance(3600)
    assert job.may_be_due()  # … but an hour later, not a day
    assert asyncio.run(job.run()).skipped is None and len(model.calls) == 2


def test_parse_operations_tolerates_fences() -> None:
    answer = '```json\n{"operations": [{"op": "delete", "name": "x"}, {"op": "bogus"}]}\n```'
    operations, problems = parse_operations(answer)
    assert [o.name for o in operations] == ["x"] and len(problems) == 1


async def test_the_runtime_makes_the_pass_once_the_first_run_is_under_way(tmp_path: Path) -> None:
    from soong_agent.application.runs.service import RunService
    from tests.support.harness import Harness

    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    made: list[tuple[MemoryConsolidation, ScriptedModel]] = []

    def make() -> MemoryConsolidation:
        job, store, model, _clock = setup(tmp_path, ops(), min_hours=24, min_sessions=0)
        store.write(mem("fact", "The user likes tea"))
        made.append((job, model))
        return job

    service = RunService(h.service._assembler, h.service._root, consolidation=make)
    run = await service.start("hello")
    assert made == []  # nothing of the pass is made (or imported) while the run starts
    assert (await run.wait()).ok
    assert len(made) == 1 and service.consolidation is made[0][0]
    while service._background:  # the pass runs beside the run
        await asyncio.gather(*service._background)
    assert len(made[0][1].calls) == 1
    again = await service.start("hello again")
    assert (await again.wait()).ok
    assert len(made) == 1 and len(made[0][1].calls) == 1  # one job; not due for a day


async def test_a_pass_that_cannot_be_made_is_said_once_and_runs_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from soong_agent.application.runs.service import RunService
    from tests.support.harness import Harness

    h = Harness(ScriptedModel(default=ScriptedResponse.text("ok")))
    attempts: list[int] = []

    def broken() -> MemoryConsolidation:
        attempts.append(1)
        raise RuntimeError("no extraction model")

    service = RunService(h.service._assembler, h.service._root, consolidation=broken)
    for message in ("one", "two"):
        assert (await (await service.start(message)).wait()).ok
    await asyncio.sleep(0)
    assert attempts == [1] and service.consolidation is None
    assert caplog.text.count("memory consolidation could not be set up") == 1
