"""Every run ends with a result and a reason, even when its end cannot be written (issue 39 item 1).

A store that refuses the run's last batch (or every batch from some point on), a provider
error on top of that, a second cancellation while the end is being written, a task that
raises outside the loop: `run.wait()` and `run.events()` never raise, and the result says
what happened in one line."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from soong_agent.application.runs.handle import Run
from soong_agent.ports.errors import ProviderError, RunError
from soong_agent.ports.events import ErrorEvent, RunFinished
from soong_agent.ports.storage import TurnCommit
from soong_agent.testing import InMemorySessionStore, ScriptedModel, ScriptedResponse
from tests.support.harness import Harness

pytestmark = pytest.mark.asyncio


class RefusingStore(InMemorySessionStore):
    """Refuses the commits `refuse` picks (counting from 1), as a full disk would."""

    def __init__(self, refuse: Callable[[int, TurnCommit], bool]) -> None:
        super().__init__()
        self._refuse = refuse
        self.calls = 0

    async def commit(self, batch: TurnCommit) -> None:
        self.calls += 1
        if self._refuse(self.calls, batch):
            raise RunError(f"session database: disk I/O error (commit {self.calls})")
        await super().commit(batch)


def ends(batch: TurnCommit) -> bool:
    return any(isinstance(e, RunFinished) for e in batch.events)


async def test_a_refused_last_batch_fails_the_run_with_a_reason_and_saves_its_status() -> None:
    store = RefusingStore(lambda _, batch: ends(batch))
    h = Harness(ScriptedModel([ScriptedResponse.text("the answer")]), store=store)
    run = await h.service.start("hi")
    events = [e async for e in run.events()]
    result = await run.wait()
    assert result.status == "failed"
    assert result.final_text == "the answer"
    assert result.reason is not None
    assert "the run's end could not be saved" in result.reason
    assert "disk I/O error" in result.reason
    assert isinstance(result.error, RunError)
    # the status alone was written with the last saved session header: the run is not
    # left running, and the session's messages are all there
    [saved] = await store.list_runs(run.session_id)
    assert saved.status == "failed" and saved.reason == result.reason
    assert [m.role for m in await store.active_path(run.session_id)] == ["user"]
    assert isinstance(events[-1], ErrorEvent) and events[-1].kind == "unsaved"


async def test_a_store_refusing_everything_after_the_start_still_gives_a_result() -> None:
    store = RefusingStore(lambda n, _: n > 1)
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(("list_dir", {})), ScriptedResponse.text("done")]
    )
    h = Harness(model, store=store)
    run = await h.service.start("hi")
    [e async for e in run.events()]
    result = await run.wait()
    assert result.status == "failed"
    assert result.reason is not None
    assert "nor its status" in result.reason
    assert "the session shows the run as interrupted" in result.reason
    # the first batch (the user's message) is there: the session resumes
    assert [m.role for m in await store.active_path(run.session_id)] == ["user"]


async def test_a_provider_error_then_a_refused_end_does_not_raise() -> None:
    # the reported case: the loop's SoongAgentError branch committed again without a guard
    error = ProviderError(
        "the server closed the stream", kind="transport", provider="openai", base_url="http://x"
    )
    store = RefusingStore(lambda _, batch: ends(batch))
    h = Harness(ScriptedModel([error]), store=store)
    run = await h.service.start("hi")
    result = await run.wait()
    assert result.status == "failed"
    assert result.reason is not None
    assert result.reason.startswith(f"{error}; the run's end could not be saved")
    assert result.error is error
    assert (await store.list_runs(run.session_id))[0].status == "failed"


async def test_a_bug_raising_in_the_model_ends_as_internal_error_with_its_status() -> None:
    h = Harness(ScriptedModel([RecursionError("maximum recursion depth exceeded")]))
    run = await h.service.start("hi")
    result = await run.wait()
    assert result.status == "failed"
    assert result.reason == "internal error: RecursionError: maximum recursion depth exceeded"
    assert (await h.store.list_runs(run.session_id))[0].status == "failed"


async def test_cancelled_again_while_the_end_is_written_still_gives_a_result() -> None:
    gate = asyncio.Event()

    class SlowEnd(InMemorySessionStore):
        async def commit(self, batch: TurnCommit) -> None:
            if ends(batch):
                await gate.wait()  # never set: only a cancellation ends this wait
            await super().commit(batch)

    store = SlowEnd()
    store.commit_survives_cancel = False  # type: ignore[misc]
    model = ScriptedModel([ScriptedResponse.text("slow", pieces=4, delay_s=0.05)])
    h = Harness(model, store=store)
    run = await h.service.start("hi")
    async for event in run.events():
        if event.type == "text_delta":
            break
    first = asyncio.ensure_future(run.cancel())
    await asyncio.sleep(0.05)
    assert run._task is not None
    run._task.cancel()  # a second cancellation, while the end waits on the store
    await first
    result = await asyncio.wait_for(run.wait(), timeout=5)
    assert result.status == "failed"
    assert result.reason is not None
    assert result.reason.startswith("cancelled by the user; the run's end could not be saved")
    assert "cancelled again" in result.reason


async def test_wait_and_cancel_give_a_result_when_the_task_itself_raised() -> None:
    run = Run(session_id="ses_1", run_id="run_1", cancel_timeout_s=1)

    async def broken() -> object:
        raise KeyError("boom")

    run.attach(asyncio.ensure_future(broken()))  # type: ignore[arg-type]
    result = await run.wait()
    assert result.status == "failed"
    assert result.reason == "internal error: KeyError: 'boom'"
    assert [e async for e in run.events()] == []
    cancelled = await run.cancel()
    assert cancelled is not None and cancelled.status == "failed"


async def test_wait_on_a_task_cancelled_before_the_run_could_end() -> None:
    run = Run(session_id="ses_1", run_id="run_1", cancel_timeout_s=1)

    async def forever() -> object:
        await asyncio.Event().wait()
        return None

    task = asyncio.ensure_future(forever())
    run.attach(task)  # type: ignore[arg-type]
    await asyncio.sleep(0)
    task.cancel()
    result = await run.wait()
    assert result.status == "cancelled" and result.reason


async def test_cancelling_the_waiter_is_not_swallowed() -> None:
    run = Run(session_id="ses_1", run_id="run_1", cancel_timeout_s=1)
    task = asyncio.ensure_future(asyncio.Event().wait())
    run.attach(task)  # type: ignore[arg-type]
    waiter = asyncio.ensure_future(run.wait())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not task.done()
    task.cancel()


async def test_a_session_end_hook_that_breaks_costs_the_run_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Hooks fail open: a `session_end` hook that raises (a bug in a hook runner, say) is an
    error event of the run, which still ends as it was going to, with its last turn saved."""
    from soong_agent.application.hooks import HookPipeline, RunHooks
    from soong_agent.domain.hooks import parse_hooks
    from soong_agent.testing import ScriptedProcessRunner

    async def broken(self: RunHooks, *args: object, **kwargs: object) -> None:
        raise OSError("the hook runner fell over")

    monkeypatch.setattr(RunHooks, "session_end", broken)
    pipeline = HookPipeline(
        parse_hooks({"hooks": {"session_end": [{"command": "true"}]}}),
        ScriptedProcessRunner(),
        base_env={"PATH": "/usr/bin"},
        cwd="/p",
        default_timeout_s=5,
    )
    store = InMemorySessionStore()
    h = Harness(ScriptedModel([ScriptedResponse.text("the answer")]), store=store, hooks=pipeline)
    run = await h.service.start("hi")
    events = [e async for e in run.events()]
    result = await run.wait()
    assert result.status == "completed", result.reason
    [saved] = await store.list_runs(run.session_id)
    assert saved.status == "completed"
    assert [m.role for m in await store.active_path(run.session_id)] == ["user", "assistant"]
    (broke,) = [e for e in events if isinstance(e, ErrorEvent) and e.kind == "hook"]
    assert "the hook runner fell over" in broke.message and not broke.fatal
