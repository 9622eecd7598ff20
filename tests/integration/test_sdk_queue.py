"""The SDK's queued runs (WORK-1): `submit` returns a run id at once and nothing runs until a
worker takes it; `watch` yields the run's stored events from the first, whoever runs it;
`wait` returns the ended run; `cancel_queued` ends a queued run at once; bad input is refused
with the thing that is wrong named, and nothing is queued."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from soong_agent import AgentRuntime
from soong_agent.application.workers.queued import start_queued
from soong_agent.application.workers.worker import AlreadyEnded, Worker
from soong_agent.ports.errors import UsageError
from soong_agent.ports.run_queue import Lease, RunNotQueued
from soong_agent.ports.streaming import Usage
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    write_minimal_config(home)
    return project, home


async def test_a_submitted_run_is_run_by_a_worker_watched_and_waited_for(
    world: tuple[Path, Path],
) -> None:
    project, home = world
    model = ScriptedModel([ScriptedResponse.text("hello from the worker")])
    async with AgentRuntime(project, home, model=model) as runtime:
        run_id = await runtime.submit("say hello")
        queued = await runtime.queued_run(run_id)
        assert queued.status == "queued" and model.calls == []
        adapters = runtime._container.adapters
        services = runtime._container.services

        async def start(lease: Lease, fence_only: bool):  # type: ignore[no-untyped-def]
            return await start_queued(
                services.run_service(), adapters.session_store(), lease, fence_only=fence_only
            )

        settings = dataclasses.replace(
            adapters.worker_settings(), worker_id="here", projects=(str(project.resolve()),)
        )
        stop = asyncio.Event()
        worker = Worker(adapters.run_queue(), start, adapters.clock(), settings)
        watching = asyncio.create_task(_collect(runtime, run_id))
        serving = asyncio.create_task(worker.serve(stop))
        ended = await runtime.wait(run_id, timeout_s=60)
        stop.set()
        await asyncio.wait_for(serving, 60)
        assert ended.status == "completed" and ended.worker == "here" and ended.attempts == 1
        kinds = await asyncio.wait_for(watching, 60)
        assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
        path = await runtime.session_messages(ended.session_id)
        assert [m.text for m in path] == ["say hello", "hello from the worker"]
        assert [r.id for r in await runtime.session_runs(ended.session_id)] == [run_id]


async def _collect(runtime: AgentRuntime, run_id: str) -> list[str]:
    return [event.type async for event in runtime.watch(run_id)]


async def test_a_queued_run_is_cancelled_and_bad_input_refused(world: tuple[Path, Path]) -> None:
    project, home = world
    async with AgentRuntime(project, home, model=ScriptedModel([])) as runtime:
        run_id = await runtime.submit("never mind")
        cancelled = await runtime.cancel_queued(run_id)
        assert cancelled.status == "cancelled"
        assert (await runtime.wait(run_id, timeout_s=5)).status == "cancelled"
        with pytest.raises(UsageError, match="the message is empty"):
            await runtime.submit("   ")
        with pytest.raises(UsageError, match="no session 'ses_missing'"):
            await runtime.submit("go on", session_id="ses_missing")
        with pytest.raises(RunNotQueued, match="run_missing"):
            await runtime.queued_run("run_missing")
        assert [r.id for r in await runtime.queued_runs()] == [run_id]


async def test_a_run_that_ended_before_its_worker_told_the_queue_is_not_run_again(
    world: tuple[Path, Path],
) -> None:
    """The worker died between the run's last commit and the queue's record of its end: the
    worker that takes it over records the end it finds and asks the model nothing."""
    project, home = world
    model = ScriptedModel([ScriptedResponse.text("done once")])
    async with AgentRuntime(project, home, model=model) as runtime:
        run_id = await runtime.submit("do it once")
        adapters = runtime._container.adapters
        service, store = runtime._container.services.run_service(), adapters.session_store()
        queue, folder = adapters.run_queue(), str(project.resolve())
        first = await queue.claim("dead", [folder], lease_s=5, max_attempts=3, now=1e9)
        assert first is not None
        assert (await (await start_queued(service, store, first)).wait()).status == "completed"
        # ... and "dead" never called finish: its lease runs out, another worker claims it
        second = await queue.claim("alive", [folder], lease_s=5, max_attempts=3, now=2e9)
        assert second is not None and second.fence == 2
        with pytest.raises(AlreadyEnded) as ended:
            await start_queued(service, store, second)
        assert ended.value.status == "completed"
        assert len(model.calls) == 1  # the model was not asked again
        assert [r.id for r in await runtime.session_runs(second.run.session_id)] == [run_id]


@pytest.mark.parametrize("budget", ["tokens", "wall"])
async def test_a_takeover_gets_only_what_its_earlier_attempt_left_of_the_budget(
    world: tuple[Path, Path], budget: str
) -> None:
    """The first attempt spent 600 tokens and was cut off: the takeover may spend only what is
    left (of 1000: 400, which its first 500-token turn uses up), or does not run at all (its
    wall-clock budget ran out since the first attempt started)."""
    project, home = world
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                ("no_such_tool", {}), usage=Usage(input_tokens=500, output_tokens=100)
            ),
            ScriptedResponse.text("never seen", delay_s=30),
            ScriptedResponse.tool_calls(
                ("no_such_tool", {}), usage=Usage(input_tokens=400, output_tokens=100)
            ),
            ScriptedResponse.text("done"),
        ]
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        if budget == "tokens":
            run_id = await runtime.submit("spend tokens", max_tokens=1000)
        else:
            run_id = await runtime.submit("spend time", max_wall_ms=60_000)
        adapters = runtime._container.adapters
        service, store = runtime._container.services.run_service(), adapters.session_store()
        queue, folder = adapters.run_queue(), str(project.resolve())
        first = await queue.claim("dead", [folder], lease_s=5, max_attempts=3, now=1e9)
        assert first is not None
        cut = await start_queued(service, store, first)
        for _ in range(600):  # until the second model call is under way
            if len(model.calls) == 2:
                break
            await asyncio.sleep(0.05)
        assert len(model.calls) == 2
        assert (await cut.cancel()) is not None  # the worker stopped: the attempt is cut off
        second = await queue.claim("alive", [folder], lease_s=5, max_attempts=3, now=2e9)
        assert second is not None and second.run.id == run_id
        if budget == "wall":
            later = adapters.clock().now() + 120  # two minutes after the first attempt began
            with pytest.raises(AlreadyEnded) as ended:
                await start_queued(service, store, second, now=later)
            assert ended.value.status == "budget_exhausted"
            assert "(by its earlier attempts)" in str(ended.value)
            assert len(model.calls) == 2  # the model was not asked again
            return
        result = await (await start_queued(service, store, second)).wait()
        assert result.status == "budget_exhausted", result.reason
        assert result.reason and "500 of 400 tokens" in result.reason  # 400: what was left
        assert len(model.calls) == 3


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
async def test_a_run_whose_last_allowed_attempt_ended_unrecorded_keeps_that_end(
    world: tuple[Path, Path], store: str, request: pytest.FixtureRequest
) -> None:
    """Its worker died between the run's last commit and the queue's record of its end, and
    no attempt is left: the claim records the end the session shows (completed), not
    `failed` for attempts used up."""
    project, home = world
    url = str(request.getfixturevalue("postgres_url")) if store == "postgresql" else None
    model = ScriptedModel([ScriptedResponse.text("done once")])
    async with AgentRuntime(project, home, model=model, storage_url=url) as runtime:
        run_id = await runtime.submit("do it once")
        adapters = runtime._container.adapters
        service, store_ = runtime._container.services.run_service(), adapters.session_store()
        queue, folder = adapters.run_queue(), str(project.resolve())
        clock = adapters.clock()
        first = await queue.claim("dead", [folder], lease_s=0.2, max_attempts=1, now=clock.now())
        assert first is not None
        assert (await (await start_queued(service, store_, first)).wait()).status == "completed"
        await asyncio.sleep(0.5)  # its lease ran out (on PostgreSQL, by the server's clock)
        later = await queue.claim("alive", [folder], lease_s=5, max_attempts=1, now=clock.now())
        assert later is None  # nothing left to run
        ended = await runtime.queued_run(run_id)
        assert ended.status == "completed" and ended.reason == ""
        assert len(model.calls) == 1


POOL = (
    '[permissions]\nmode = "bypass"\n'
    '[[agents.worker_pools]]\npool_id = "p"\n'
    '[[agents.worker_pools.workers]]\nagent_definition_id = "default_worker_agent"\n'
)


@pytest.mark.parametrize("cap", [None, ("read_file",)])
async def test_a_queued_pool_worker_is_held_to_its_orchestrators_plan_mode_and_tool_cap(
    tmp_path: Path, cap: tuple[str, ...] | None
) -> None:
    """A pool worker another process queued: though this worker's config says bypass, the
    orchestrator's plan mode binds it (its write is refused), and its pool entry's tool cap is
    the most it is offered."""
    from soong_agent.ports.run_queue import Dispatched, QueuedRun, RunOptions

    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    write_minimal_config(home, POOL)
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("write_file", {"path": "x.txt", "content": "no\n"})),
            ScriptedResponse.text("could not write"),
        ]
    )
    origin = Dispatched(
        parent_session_id="ses_lead",
        parent_run_id="run_lead",
        parent_call_id="call_1",
        parent_mode="plan",
        pool="p",
        worker="w1",
        agent="default_worker_agent",
        task_session_id="ses_lead",
        allowed_tools=cap,
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        adapters = runtime._container.adapters
        service, store = runtime._container.services.run_service(), adapters.session_store()
        queue, folder = adapters.run_queue(), str(project.resolve())
        await queue.submit(
            QueuedRun(
                id="run_child",
                session_id="ses_child",
                project_dir=folder,
                message="write x.txt",
                options=RunOptions(dispatched=origin),
                submitted_at=1e9,
            )
        )
        lease = await queue.claim("w", [folder], lease_s=30, max_attempts=3, now=1e9)
        assert lease is not None
        result = await (await start_queued(service, store, lease)).wait()
    assert not (project / "x.txt").exists()
    answered = str(model.calls[1].messages[-1].content)
    offered = {tool.name for tool in model.calls[0].tools}
    if cap is None:
        assert "write_file" in offered  # offered, and refused by the plan mode
        assert "mode plan is read-only" in answered
    else:
        assert "unknown tool 'write_file'" in answered
        assert offered <= {"read_file", "tool_search"} and "write_file" not in offered
    assert result.status == "completed"
