"""How many children run at once and how long a cancel waits for them (AGT-2), through the SDK:
`agents.max_concurrent_children_per_session` (further children wait for a slot) and
`agents.child_cancel_timeout_ms` (a cancel of the parent waits that long for its children).

One scripted model answers parent and children by the task each request ends with; a child's
model call can be held at a gate the test opens, so what overlaps is decided by the test, not
by timing. Nothing here measures time: the assertions are about the order of events.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from soong_agent import AgentRuntime
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import StreamEvent
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config

WAIT_S = 20.0
"""A bound on waiting for something the test expects to happen (a hang fails, never stalls)."""


def last_user_text(request: ModelRequest) -> str:
    users = [m for m in request.messages if m.role == "user"]
    return users[-1].text if users else ""


class GatedModel:
    """A scripted model whose calls for some tasks first await a gate: `gates[key]` runs
    before the call whose last user message contains `key`. `log` records, in order, each
    call's task as it starts."""

    def __init__(
        self,
        answers: dict[str, list[ScriptedResponse]],
        gates: dict[str, Callable[[], Awaitable[None]]] | None = None,
    ) -> None:
        self._answers = answers
        self._served: dict[str, int] = {}
        self._gates = gates or {}
        self.log: list[str] = []
        self._inner = ScriptedModel(default=self._answer)

    @property
    def label(self) -> str:
        return "scripted gated"

    def _key(self, request: ModelRequest) -> str:
        text = last_user_text(request)
        for key in self._answers:
            if key in text:
                return key
        raise AssertionError(f"no answer for {text!r}")

    def _answer(self, request: ModelRequest) -> ScriptedResponse:
        key = self._key(request)
        count = self._served.get(key, 0)
        self._served[key] = count + 1
        script = self._answers[key]
        return script[min(count, len(script) - 1)]

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        key = self._key(request)
        self.log.append(key)
        gate = self._gates.get(key)
        if gate is not None:
            await gate()
        async for event in self._inner.stream(request):
            yield event


def two_children(task_a: str, task_b: str) -> list[ScriptedResponse]:
    """The parent's script: start two sub-agents in one turn, then finish."""
    return [
        ScriptedResponse.tool_calls(
            ("create_sub_agent", {"task": task_a}), ("create_sub_agent", {"task": task_b})
        ),
        ScriptedResponse.text("both children done"),
    ]


def project_and_home(tmp_path: Path, agents: str) -> tuple[Path, Path]:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    write_minimal_config(home, agents)
    return project, home


def child_lifecycle(events: list[object]) -> list[tuple[str, str]]:
    """The parent's child_started / child_finished events, in order, as (type, task key)."""
    tasks: dict[str, str] = {}
    out: list[tuple[str, str]] = []
    for event in events:
        kind = getattr(event, "type", "")
        if kind == "child_started":
            tasks[event.child_session_id] = event.task  # type: ignore[attr-defined]
        if kind in ("child_started", "child_finished"):
            out.append((kind, tasks[event.child_session_id]))  # type: ignore[attr-defined]
    return out


async def test_with_one_slot_the_second_child_starts_only_after_the_first_ended(
    tmp_path: Path,
) -> None:
    project, home = project_and_home(
        tmp_path, "[agents]\nmax_concurrent_children_per_session = 1\n"
    )
    held = asyncio.Event()

    async def first_child_lingers() -> None:
        held.set()
        for _ in range(50):  # every chance for another child to start meanwhile
            await asyncio.sleep(0)
        await asyncio.sleep(0.05)

    model = GatedModel(
        {
            "job one": [ScriptedResponse.text("one done")],
            "job two": [ScriptedResponse.text("two done")],
            "parent": two_children("job one", "job two"),
        },
        gates={"job one": first_child_lingers, "job two": first_child_lingers},
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("parent question")
        result = await asyncio.wait_for(run.wait(), WAIT_S)
        events = [e async for e in run.events()]
    assert result.status == "completed" and result.output == "both children done"
    lifecycle = child_lifecycle(events)
    first, second = lifecycle[0][1], lifecycle[2][1]
    assert lifecycle == [
        ("child_started", first),
        ("child_finished", first),
        ("child_started", second),
        ("child_finished", second),
    ]
    assert {first, second} == {"job one", "job two"}
    assert model.log == ["parent", first, second, "parent"]  # the children's calls never overlap
    assert all(e.status == "completed" for e in events if e.type == "child_finished")


async def test_with_two_slots_both_children_run_at_once(tmp_path: Path) -> None:
    project, home = project_and_home(
        tmp_path, "[agents]\nmax_concurrent_children_per_session = 2\n"
    )
    both_asked = asyncio.Event()
    asked: set[str] = set()

    def waits_for_the_other(me: str) -> Callable[[], Awaitable[None]]:
        async def gate() -> None:  # each child's first call ends only once both are asking
            asked.add(me)
            if len(asked) == 2:
                both_asked.set()
            await asyncio.wait_for(both_asked.wait(), WAIT_S)

        return gate

    model = GatedModel(
        {
            "job one": [ScriptedResponse.text("one done")],
            "job two": [ScriptedResponse.text("two done")],
            "parent": two_children("job one", "job two"),
        },
        gates={"job one": waits_for_the_other("one"), "job two": waits_for_the_other("two")},
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("parent question")
        result = await asyncio.wait_for(run.wait(), WAIT_S)
        events = [e async for e in run.events()]
    assert result.status == "completed"
    kinds = [kind for kind, _ in child_lifecycle(events)]
    assert kinds == ["child_started", "child_started", "child_finished", "child_finished"]


class StubbornChild:
    """A child's model call that takes no notice of a cancel until the test releases it."""

    def __init__(self) -> None:
        self.asking = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.release = asyncio.Event()
        self.ended = asyncio.Event()

    async def gate(self) -> None:
        self.asking.set()
        try:
            while True:
                try:
                    await self.release.wait()
                    raise AssertionError("released before it was cancelled")
                except asyncio.CancelledError:
                    self.cancelled.set()
                    while not self.release.is_set():  # ignores the cancel, and any other
                        try:
                            await self.release.wait()
                        except asyncio.CancelledError:
                            continue
                    raise
        finally:
            self.ended.set()


def stubborn_world(
    tmp_path: Path, child_cancel_ms: int
) -> tuple[Path, Path, GatedModel, StubbornChild]:
    """A parent that starts one child whose model call ignores cancellation until released;
    the parent's own cancel may wait a minute (`runtime.cancel_timeout_ms`)."""
    project, home = project_and_home(
        tmp_path,
        "[runtime]\ncancel_timeout_ms = 60000\n"
        f"[agents]\nchild_cancel_timeout_ms = {child_cancel_ms}\n",
    )
    child = StubbornChild()
    model = GatedModel(
        {
            "stubborn job": [ScriptedResponse.text("never said")],
            "parent": [
                ScriptedResponse.tool_calls(("create_sub_agent", {"task": "stubborn job"})),
                ScriptedResponse.text("never reached"),
            ],
        },
        gates={"stubborn job": child.gate},
    )
    return project, home, model, child


async def test_a_cancel_waits_child_cancel_timeout_ms_for_a_child_that_ignores_it(
    tmp_path: Path,
) -> None:
    project, home, model, child = stubborn_world(tmp_path, child_cancel_ms=200)
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("parent question")
        await asyncio.wait_for(child.asking.wait(), WAIT_S)
        result = await asyncio.wait_for(run.cancel(), WAIT_S)
        # the cancel is back while the child still ignores it: it stopped waiting at the limit
        assert child.cancelled.is_set() and not child.ended.is_set()
        events = [e async for e in run.events()]
        store = runtime._container.adapters.session_store()
        (child_session,) = await store.child_sessions(run.session_id)
        child.release.set()
        await asyncio.wait_for(child.ended.wait(), WAIT_S)
        for _ in range(200):  # the child's own run records its end once it lets go
            (child_run,) = await store.list_runs(child_session.id)
            if child_run.status != "running":
                break
            await asyncio.sleep(0.02)
    assert result is not None and result.status == "cancelled"
    (finished,) = [e for e in events if e.type == "child_finished"]
    assert finished.status == "cancelled"
    assert "agents.child_cancel_timeout_ms" in (finished.reason or "")
    assert child_run.status == "cancelled"


async def test_a_cancel_waits_for_a_child_that_ends_within_the_timeout(tmp_path: Path) -> None:
    project, home, model, child = stubborn_world(tmp_path, child_cancel_ms=60_000)
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("parent question")
        await asyncio.wait_for(child.asking.wait(), WAIT_S)
        cancelling = asyncio.ensure_future(run.cancel())
        await asyncio.wait_for(child.cancelled.wait(), WAIT_S)
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert not cancelling.done()  # the parent's cancel is waiting for its child
        child.release.set()
        result = await asyncio.wait_for(cancelling, WAIT_S)
        assert child.ended.is_set()
        events = [e async for e in run.events()]
        store = runtime._container.adapters.session_store()
        (child_session,) = await store.child_sessions(run.session_id)
        (child_run,) = await store.list_runs(child_session.id)
    assert result is not None and result.status == "cancelled"
    (finished,) = [e for e in events if e.type == "child_finished"]
    assert finished.status == "cancelled" and child_run.status == "cancelled"
    assert "child_cancel_timeout_ms" not in (finished.reason or "")  # it ended on its own
