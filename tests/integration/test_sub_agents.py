"""Sub-agents and forks (AGT-2) through the SDK: a real home with agent files, SQLite, and one
scripted model that answers parent and children by the task each request ends with."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from soong_agent import AgentRuntime, ApprovalRequest
from soong_agent.ports.model import ModelRequest
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config

PRICE = "[model.price]\ninput_per_mtok = 1000.0\noutput_per_mtok = 1000.0\n"


def last_user_text(request: ModelRequest) -> str:
    users = [m for m in request.messages if m.role == "user"]
    return users[-1].text if users else ""


Route = Callable[[ModelRequest, int], ScriptedResponse]


def routed(routes: dict[str, Route]) -> ScriptedModel:
    """A model answering each request by the route whose key its last user message contains;
    a route gets the request and how many requests it has answered before."""
    seen: dict[str, int] = {}

    def answer(request: ModelRequest) -> ScriptedResponse:
        users = [m.text for m in request.messages if m.role == "user"]
        # the last user message says who asks; a lead's mail (delivered as a user message
        # during its run) does not, and then its first message does
        for text in (users[-1], users[0]) if users else ():
            for key, route in routes.items():
                if key in text:
                    count = seen.get(key, 0)
                    seen[key] = count + 1
                    return route(request, count)
        raise AssertionError(f"no route for {users[-1] if users else ''!r}")

    return ScriptedModel(default=answer)


def steps(*responses: ScriptedResponse) -> Route:
    def route(request: ModelRequest, count: int) -> ScriptedResponse:
        return responses[min(count, len(responses) - 1)]

    return route


def tool_result_texts(request: ModelRequest) -> list[str]:
    return [r.content for m in request.messages for r in m.tool_results]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "notes.txt").write_text("alpha\n", encoding="utf-8")
    return tmp_path / "project"


def home_with(tmp_path: Path, extra: str = "") -> Path:
    home = tmp_path / "home"
    write_minimal_config(home, extra)
    agents = home / "agents"
    agents.mkdir(exist_ok=True)
    (agents / "reviewer.md").write_text(
        "---\nid: reviewer\ndescription: Reviews code\ntools: [read_file, grep, write_file]\n"
        "---\nYou review code.\n",
        encoding="utf-8",
    )
    return home


def spawn(task: str, **more: object) -> ScriptedResponse:
    return ScriptedResponse.tool_calls(("create_sub_agent", {"task": task, **more}))


async def test_a_sub_agent_starts_fresh_with_its_definitions_tools_and_only_its_answer_returns(
    tmp_path: Path, project: Path
) -> None:
    home = home_with(tmp_path, '[tools]\ndisabled = ["grep"]\n')
    model = routed(
        {
            "review the notes": steps(ScriptedResponse.text("the notes say alpha")),
            "parent question": steps(
                # the model tries to pick a model: ignored, the definition decides
                spawn("review the notes", agent_id="reviewer", model="gpt-9-ultra"),
                ScriptedResponse.text("done: alpha"),
            ),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("parent question")
        result = await run.wait()
        events = [e async for e in run.events()]
        store = runtime._container.adapters.session_store()
        children = await store.child_sessions(run.session_id)
    assert result.status == "completed" and result.output == "done: alpha"
    child_requests = [c for c in model.calls if last_user_text(c) == "review the notes"]
    first = child_requests[0]
    assert [m.role for m in first.messages] == ["user"]  # none of the parent's messages
    names = {t.name for t in first.tools}
    assert {"read_file", "write_file"} <= names
    assert "grep" not in names  # listed by the definition, but disabled in config
    assert not names & {"create_sub_agent", "fork_agent", "dispatch_worker", "run_command"}
    assert "You review code." in "\n".join(p.text for p in first.system)
    parent_second = [c for c in model.calls if last_user_text(c) == "parent question"][1]
    (returned,) = tool_result_texts(parent_second)
    assert "the notes say alpha" in returned and "review the notes" not in returned
    started = next(e for e in events if e.type == "child_started")
    finished = next(e for e in events if e.type == "child_finished")
    assert started.kind == "sub_agent" and started.agent == "reviewer"
    assert started.parent_call_id.startswith("call_0")
    assert finished.status == "completed" and finished.child_session_id == started.child_session_id
    assert [c.id for c in children] == [started.child_session_id]
    assert children[0].parent_session_id == run.session_id and children[0].agent == "reviewer"


async def test_a_fork_starts_from_the_parents_context_with_the_same_prompt_and_tools(
    tmp_path: Path, project: Path
) -> None:
    home = home_with(tmp_path)
    model = routed(
        {
            "check the second half": steps(ScriptedResponse.text("second half is fine")),
            "look at everything": steps(
                ScriptedResponse.tool_calls(
                    ("fork_agent", {"task": "check the second half", "model": "other"})
                ),
                ScriptedResponse.text("all fine"),
            ),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("look at everything")
        result = await run.wait()
    assert result.status == "completed"
    parent_first = model.calls[0]
    fork_first = next(c for c in model.calls if last_user_text(c) == "check the second half")
    texts = [m.text for m in fork_first.messages if m.role == "user"]
    assert texts == ["look at everything", "check the second half"]
    assert [p.text for p in fork_first.system] == [p.text for p in parent_first.system]
    assert [t.name for t in fork_first.tools] == [t.name for t in parent_first.tools]
    assert "second half is fine" in tool_result_texts(model.calls[-1])[0]


async def test_the_child_past_max_children_per_run_is_refused_with_the_reason(
    tmp_path: Path, project: Path
) -> None:
    home = home_with(tmp_path, "[agents]\nmax_children_per_run = 1\n")
    model = routed(
        {
            "child task": steps(ScriptedResponse.text("child done")),
            "parent": steps(
                spawn("child task one"),
                spawn("child task two"),
                ScriptedResponse.text("finished"),
            ),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("parent")
        await run.wait()
    last = [c for c in model.calls if last_user_text(c) == "parent"][-1]
    results = tool_result_texts(last)
    assert "child done" in results[0]
    assert "max_children_per_run = 1" in results[1] and "not started" in results[1]
    assert sum(1 for c in model.calls if "child task" in last_user_text(c)) == 1


async def test_a_child_past_its_timeout_is_cancelled_and_the_parent_told(
    tmp_path: Path, project: Path
) -> None:
    home = home_with(tmp_path, "[agents]\ndefault_child_timeout_ms = 300\n")
    model = routed(
        {
            "slow task": steps(ScriptedResponse.text("too late", pieces=4, delay_s=2.0)),
            "parent": steps(spawn("slow task"), ScriptedResponse.text("moved on")),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("parent")
        result = await asyncio.wait_for(run.wait(), 10)
        events = [e async for e in run.events()]
        store = runtime._container.adapters.session_store()
        (child,) = await store.child_sessions(run.session_id)
        (child_run,) = await store.list_runs(child.id)
    assert result.status == "completed" and result.output == "moved on"
    finished = next(e for e in events if e.type == "child_finished")
    assert finished.status == "cancelled" and "default_child_timeout_ms" in (finished.reason or "")
    returned = tool_result_texts([c for c in model.calls if last_user_text(c) == "parent"][-1])
    assert "did not complete" in returned[0] and "cancelled" in returned[0]
    assert child_run.status == "cancelled"  # the child's session is consistent


async def test_cancelling_the_parent_cancels_every_child(tmp_path: Path, project: Path) -> None:
    home = home_with(tmp_path)
    model = routed(
        {
            "long task": steps(ScriptedResponse.text("never", pieces=10, delay_s=1.0)),
            "parent": steps(
                ScriptedResponse.tool_calls(
                    ("create_sub_agent", {"task": "long task a"}),
                    ("create_sub_agent", {"task": "long task b"}),
                )
            ),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("parent")
        async for event in run.events():
            if event.type == "child_started":
                break
        await asyncio.sleep(0.2)
        result = await run.cancel()
        store = runtime._container.adapters.session_store()
        children = await store.child_sessions(run.session_id)
        statuses = [(await store.list_runs(c.id))[0].status for c in children]
        events = list(await store.run_events(run.run_id))
    assert result is not None and result.status == "cancelled"
    assert len(children) == 2 and statuses == ["cancelled", "cancelled"]
    ended = [e for e in events if e.type == "child_finished"]
    assert sorted(e.child_session_id for e in ended) == sorted(c.id for c in children)
    assert all(e.status == "cancelled" for e in ended)


async def test_a_childs_approval_names_the_child_and_hooks_and_grants_apply(
    tmp_path: Path, project: Path
) -> None:
    home = home_with(tmp_path)
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> str:
        asked.append(request)
        return "allow_once"

    write = ScriptedResponse.tool_calls(
        ("write_file", {"path": "review.md", "content": "looks good"})
    )
    model = routed(
        {
            "write the review": steps(write, ScriptedResponse.text("written")),
            "parent": steps(
                spawn("write the review", agent_id="reviewer"), ScriptedResponse.text("ok")
            ),
        }
    )
    async with AgentRuntime(project, home, approve, model=model) as runtime:  # type: ignore[arg-type]
        await (await runtime.run("parent")).wait()
    assert (project / "review.md").read_text() == "looks good"
    (request,) = asked
    assert request.tool == "write_file" and request.agent == "sub-agent reviewer"


async def test_child_usage_counts_against_the_parents_budget(tmp_path: Path, project: Path) -> None:
    from soong_agent.ports.streaming import Usage

    home = home_with(tmp_path, PRICE)
    heavy = Usage(input_tokens=4_000, output_tokens=1_000)
    light = Usage(input_tokens=100, output_tokens=10)
    model = routed(
        {
            "expensive task": steps(ScriptedResponse.text("costly answer", usage=heavy)),
            "parent": steps(
                ScriptedResponse.tool_calls(
                    ("create_sub_agent", {"task": "expensive task"}), usage=light
                ),
                ScriptedResponse.text("should not be reached", usage=light),
            ),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("parent", max_tokens=3_000)
        result = await run.wait()
        events = [e async for e in run.events()]
    finished = next(e for e in events if e.type == "child_finished")
    assert finished.usage.input_tokens == 4_000 and finished.cost_usd == pytest.approx(5.0)
    assert result.status == "budget_exhausted" and "token budget" in (result.reason or "")
    assert "5110 of 3000" in (result.reason or "")  # the parent's 110 and the child's 5000
    assert not any(last_user_text(c) == "parent" for c in model.calls[2:])


async def test_two_presets_run_side_by_side_in_one_process(tmp_path: Path, project: Path) -> None:
    home = home_with(tmp_path)
    model = routed(
        {
            "minimal question": steps(ScriptedResponse.text("m", delay_s=0.05)),
            "full question": steps(ScriptedResponse.text("f", delay_s=0.05)),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        runs = await asyncio.gather(
            runtime.run("minimal question", agent="minimal"),
            runtime.run("full question", agent="full"),
        )
        results = await asyncio.gather(*(r.wait() for r in runs))
    assert [r.status for r in results] == ["completed", "completed"]
    tools = {last_user_text(c): {t.name for t in c.tools} for c in model.calls}
    prompts = {last_user_text(c): "\n".join(p.text for p in c.system) for c in model.calls}
    # exactly the preset's ceiling: not even `compact`, which it does not list
    assert tools["minimal question"] == {"read_file", "list_dir", "glob", "grep"}
    assert "create_sub_agent" not in prompts["minimal question"]
    assert "write_file" in tools["full question"] and "tool_search" in tools["full question"]
    assert "create_sub_agent" in prompts["full question"]  # offered, behind tool_search


def test_child_events_are_json_serialisable() -> None:
    from soong_agent.ports.events import RUN_EVENT, ChildFinished

    event = ChildFinished(
        seq=1,
        run_id="r",
        session_id="s",
        at=0.0,
        kind="worker",
        agent="default_worker_agent",
        child_session_id="c",
        child_run_id="cr",
        parent_call_id="call",
        status="completed",
        pool="p",
        worker="w",
    )
    assert RUN_EVENT.validate_json(json.dumps(event.model_dump(mode="json"))) == event


async def test_children_cannot_start_children_and_an_unknown_definition_lists_the_known(
    tmp_path: Path, project: Path
) -> None:
    home = home_with(tmp_path)
    model = routed(
        {
            "nested": steps(spawn("grandchild task"), ScriptedResponse.text("fork gave up")),
            "parent": steps(
                ScriptedResponse.tool_calls(("fork_agent", {"task": "nested work"})),
                spawn("anything", agent_id="no-such-agent"),
                ScriptedResponse.text("end"),
            ),
        }
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("parent")
        await run.wait()
        events = [e async for e in run.events()]
    fork_second = [c for c in model.calls if last_user_text(c) == "nested work"][1]
    assert "cannot start other agents" in tool_result_texts(fork_second)[-1]
    assert not any(last_user_text(c) == "grandchild task" for c in model.calls)
    last = [c for c in model.calls if last_user_text(c) == "parent"][-1]
    unknown = tool_result_texts(last)[-1]
    assert "unknown agent 'no-such-agent'" in unknown and "reviewer" in unknown
    assert sum(1 for e in events if e.type == "child_started") == 1


async def test_a_blank_path_may_switch_agent_and_the_switch_is_an_event(
    tmp_path: Path, project: Path
) -> None:
    home = home_with(tmp_path)
    model = routed({"question": steps(ScriptedResponse.text("answer"))})
    async with AgentRuntime(project, home, model=model) as runtime:
        first = await (await runtime.run("question one")).wait()
        store = runtime._container.adapters.session_store()
        (user, _) = await store.active_path(first.session_id)
        again = await runtime.run(
            "question again", session_id=first.session_id, from_message=user.id, agent="minimal"
        )
        await again.wait()
        events = [e async for e in again.events()]
        session = await store.get_session(first.session_id)
    (switched,) = [e for e in events if e.type == "agent_switched"]
    assert switched.previous is None and switched.agent == "minimal"
    assert session is not None and session.agent == "minimal"
    assert {t.name for t in model.last_call.tools} == {
        "read_file",
        "list_dir",
        "glob",
        "grep",
    }


async def test_resuming_after_the_definition_changed_reports_it(
    tmp_path: Path, project: Path
) -> None:
    home = home_with(tmp_path)
    model = routed({"question": steps(ScriptedResponse.text("answer"))})
    async with AgentRuntime(project, home, model=model) as runtime:
        first = await (await runtime.run("question one", agent="reviewer")).wait()
    definition = home / "agents" / "reviewer.md"
    definition.write_text(definition.read_text() + "Be brief.\n", encoding="utf-8")
    async with AgentRuntime(project, home, model=model) as runtime:
        again = await runtime.run("question two", session_id=first.session_id)
        await again.wait()
        events = [e async for e in again.events()]
    (warning,) = [e for e in events if e.type == "error" and e.kind == "agent_changed"]
    assert "'reviewer' changed since this session's last run" in warning.message
    assert "Be brief." in "\n".join(p.text for p in model.last_call.system)
