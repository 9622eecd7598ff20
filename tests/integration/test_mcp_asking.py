"""What a real MCP server asks while a run works (MCP-4), through the SDK: a stdio server built
with the `mcp` SDK (`asking_server.py`) whose tools send `sampling/createMessage`,
`elicitation/create` and `roots/list` back to the client, and a scripted model.

Sampling is answered by the run's model only once the permission policy allows it (asked as
``mcp_sampling__<server>``; a deny rule, the user's no or nobody to ask declines it, mode
bypass allows it), and its usage counts in the run's usage and budget. Questions go to the
`elicitation=` callback (declined without one), answers checked against the form. Each is a
run event.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from soong_agent import (
    AgentRuntime,
    ApprovalRequest,
    ElicitationAnswer,
    ElicitationRequest,
    SamplingAnswer,
    SamplingRequest,
)
from soong_agent.ports.approval import Decision
from soong_agent.ports.streaming import Usage
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config

SERVER = Path(__file__).parents[1] / "support" / "mcp_servers" / "asking_server.py"
WAIT_S = 60


def _world(tmp_path: Path, extra_config: str = "") -> tuple[Path, Path]:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    write_minimal_config(home, extra_config)
    servers = {"ask": {"command": sys.executable, "args": [str(SERVER)]}}
    (home / "mcp.json").write_text(json.dumps({"mcp_servers": servers}), encoding="utf-8")
    return home, project


class Approvals:
    """Allows the server's tools; answers sampling questions with `sampling`."""

    def __init__(self, sampling: Decision = "allow_once") -> None:
        self.sampling = sampling
        self.asked: list[ApprovalRequest] = []

    def __call__(self, request: ApprovalRequest) -> Decision:
        self.asked.append(request)
        if request.tool.startswith("mcp_sampling__"):
            return self.sampling
        return "allow_once"


async def _run(runtime: AgentRuntime, message: str = "go", **options: Any) -> tuple[Any, list[Any]]:
    run = await runtime.run(message, **options)
    with anyio.fail_after(WAIT_S):
        result = await run.wait()
    return result, [event async for event in run.events()]


def _results(events: list[Any]) -> list[str]:
    return [e.content for e in events if e.type == "tool_result"]


def _of(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]


SUMMARIZE = ScriptedResponse.tool_calls(("mcp__ask__summarize", {"text": "a long text"}))


async def test_sampling_is_answered_by_the_runs_model_once_the_user_allows_it(
    tmp_path: Path,
) -> None:
    home, project = _world(tmp_path)
    model = ScriptedModel(
        [
            SUMMARIZE,
            ScriptedResponse.text("It is long.", usage=Usage(input_tokens=30, output_tokens=4)),
            ScriptedResponse.text("the server got its summary"),
        ]
    )
    approvals = Approvals("allow_once")
    async with AgentRuntime(project, home, approvals, model=model) as runtime:
        result, events = await _run(runtime)
    assert result.status == "completed", result.reason
    assert _results(events) == ["sampled by scripted scripted: It is long."]
    (sampling_call,) = [c for c in model.calls if not c.tools]
    assert [m.text for m in sampling_call.messages] == ["a long text"]
    assert [p.text for p in sampling_call.system] == ["Answer in one short sentence."]
    assert sampling_call.max_output_tokens == 50
    asked = [a for a in approvals.asked if a.tool == "mcp_sampling__ask"]
    assert len(asked) == 1
    assert "MCP server 'ask'" in asked[0].summary
    assert "user: a long text" in asked[0].detail
    (sampled,) = _of(events, "mcp_sampling")
    assert (sampled.server, sampled.outcome, sampled.messages) == ("ask", "answered", 1)
    assert sampled.prompt == "a long text" and sampled.model == "scripted scripted"
    usage = [e.usage for e in _of(events, "usage")]
    assert Usage(input_tokens=30, output_tokens=4) in usage
    assert result.usage.input_tokens >= 30  # the sampling's usage is the run's


async def test_sampling_the_user_denies_is_declined_and_no_model_is_called(tmp_path: Path) -> None:
    home, project = _world(tmp_path)
    model = ScriptedModel([SUMMARIZE, ScriptedResponse.text("declined, fine")])
    async with AgentRuntime(project, home, Approvals("deny"), model=model) as runtime:
        result, events = await _run(runtime)
    assert result.status == "completed", result.reason
    (content,) = _results(events)
    assert content.startswith("sampling refused: sampling declined: the user declined it")
    assert len(model.calls) == 2
    (sampled,) = _of(events, "mcp_sampling")
    assert (sampled.outcome, sampled.reason) == ("declined", "the user declined it")


async def test_a_deny_rule_declines_sampling_without_asking(tmp_path: Path) -> None:
    home, project = _world(tmp_path, '\n[permissions]\ndeny = ["mcp_sampling__*"]\n')
    model = ScriptedModel([SUMMARIZE, ScriptedResponse.text("ok")])
    approvals = Approvals("allow_once")
    async with AgentRuntime(project, home, approvals, model=model) as runtime:
        _, events = await _run(runtime)
    (content,) = _results(events)
    assert 'not allowed (deny rule "mcp_sampling__*"' in content
    assert all(a.tool != "mcp_sampling__ask" for a in approvals.asked)


async def test_with_nobody_to_ask_sampling_is_declined_and_bypass_allows_it(
    tmp_path: Path,
) -> None:
    home, project = _world(tmp_path, '\n[permissions]\nallow = ["mcp__ask__*"]\n')
    model = ScriptedModel([SUMMARIZE, ScriptedResponse.text("ok")])
    async with AgentRuntime(project, home, model=model) as runtime:
        _, events = await _run(runtime)
    (content,) = _results(events)
    assert "sampling declined: nobody to approve it" in content

    model = ScriptedModel([SUMMARIZE, ScriptedResponse.text("Short."), ScriptedResponse.text("ok")])
    async with AgentRuntime(project, home, model=model, permission_mode="bypass") as runtime:
        _, events = await _run(runtime)
    assert _results(events) == ["sampled by scripted scripted: Short."]


async def test_sampling_usage_counts_in_the_runs_token_budget(tmp_path: Path) -> None:
    home, project = _world(tmp_path)
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(
                ("mcp__ask__summarize", {"text": "x"}), usage=Usage(input_tokens=10)
            ),
            ScriptedResponse.text("Big.", usage=Usage(input_tokens=5_000, output_tokens=10)),
            ScriptedResponse.text("never reached"),
        ]
    )
    async with AgentRuntime(project, home, Approvals(), model=model) as runtime:
        result, _ = await _run(runtime, max_tokens=1_000)
    assert result.status == "budget_exhausted", result.reason
    assert len(model.calls) == 2


async def test_an_sdk_sampling_callable_answers_instead_of_the_model(tmp_path: Path) -> None:
    home, project = _world(tmp_path)
    seen: list[SamplingRequest] = []

    def answer(request: SamplingRequest) -> SamplingAnswer:
        seen.append(request)
        return SamplingAnswer(text="from the app", model="app-model")

    model = ScriptedModel([SUMMARIZE, ScriptedResponse.text("ok")])
    async with AgentRuntime(project, home, Approvals(), model=model, sampling=answer) as runtime:
        _, events = await _run(runtime)
    assert _results(events) == ["sampled by app-model: from the app"]
    assert seen[0].server == "ask" and seen[0].messages == (("user", "a long text"),)
    assert seen[0].system_prompt == "Answer in one short sentence." and seen[0].max_tokens == 50


BOOK = ScriptedResponse.tool_calls(("mcp__ask__book", {"city": "Lyon"}))


async def test_a_question_goes_to_the_elicitation_callback_and_its_answer_is_checked(
    tmp_path: Path,
) -> None:
    home, project = _world(tmp_path)
    asked: list[ElicitationRequest] = []

    async def elicitation(request: ElicitationRequest) -> ElicitationAnswer:
        asked.append(request)
        if len(asked) == 1:
            return ElicitationAnswer("accept", {"date": "2026-12-24", "room": "double"})
        return ElicitationAnswer("accept", {"date": "2026-12-24", "room": "suite"})

    model = ScriptedModel([BOOK, BOOK, ScriptedResponse.text("booked")])
    async with AgentRuntime(
        project, home, Approvals(), model=model, elicitation=elicitation
    ) as runtime:
        result, events = await _run(runtime)
    assert result.status == "completed", result.reason
    first, second = _results(events)
    assert json.loads(first.removeprefix("accept ")) == {
        "date": "2026-12-24",
        "room": "double",
        "nights": 1,
        "breakfast": True,
    }
    assert second.startswith("elicitation failed:")
    assert "room: 'suite' is not one of ['single', 'double']" in second
    assert asked[0].server == "ask" and asked[0].mode == "form"
    assert asked[0].message == "Booking a room in Lyon: when, and which room?"
    assert asked[0].schema is not None and asked[0].schema["required"] == ["date", "room"]
    elicited = _of(events, "mcp_elicitation")
    assert [(e.server, e.action) for e in elicited] == [("ask", "accept"), ("ask", "accept")]
    assert elicited[0].fields == ["date", "nights", "breakfast", "room"]
    assert "2026-12-24" not in json.dumps([e.model_dump() for e in elicited])


async def test_without_an_elicitation_callback_questions_are_declined(tmp_path: Path) -> None:
    home, project = _world(tmp_path)
    model = ScriptedModel([BOOK, ScriptedResponse.text("no booking")])
    async with AgentRuntime(project, home, Approvals(), model=model) as runtime:
        _, events = await _run(runtime)
    assert _results(events) == ["decline null"]
    (elicited,) = _of(events, "mcp_elicitation")
    assert elicited.action == "decline" and "nobody to ask" in elicited.reason


async def test_a_callback_answering_garbage_is_an_error_the_server_sees(tmp_path: Path) -> None:
    home, project = _world(tmp_path)
    model = ScriptedModel([BOOK, ScriptedResponse.text("ok")])
    async with AgentRuntime(
        project, home, Approvals(), model=model, elicitation=lambda request: "yes"
    ) as runtime:
        _, events = await _run(runtime)
    (content,) = _results(events)
    assert content.startswith("elicitation failed:")
    assert "returned str, not an ElicitationAnswer" in content


async def test_roots_are_the_project_and_the_write_roots(tmp_path: Path) -> None:
    extra = tmp_path / "shared"
    extra.mkdir()
    home, project = _world(
        tmp_path, f'\n[tools]\nallowed_write_roots = ["<project>", "{extra.as_posix()}"]\n'
    )
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(("mcp__ask__roots", {})), ScriptedResponse.text("ok")]
    )
    async with AgentRuntime(project, home, Approvals(), model=model) as runtime:
        _, events = await _run(runtime)
    (content,) = _results(events)
    assert content.splitlines() == [project.resolve().as_uri(), extra.resolve().as_uri()]


async def test_outside_a_run_sampling_is_declined() -> None:
    from soong_agent.application.mcp.asking import McpAsks
    from soong_agent.ports.mcp import SamplingDeclined

    with pytest.raises(SamplingDeclined, match="no run is under way"):
        await McpAsks().sample(SamplingRequest("ask", (("user", "hi"),)))


async def test_oauth_secret_variables_are_scrubbed_from_what_servers_ask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "tracker-secret-5d1f9a77c3"
    monkeypatch.setenv("TRACKER_SECRET", secret)
    home, project = _world(tmp_path, '\n[tools.mcp]\ndisabled_servers = ["tracker"]\n')
    servers = json.loads((home / "mcp.json").read_text(encoding="utf-8"))["mcp_servers"]
    servers["tracker"] = {
        "url": "http://127.0.0.1:9/mcp",
        "oauth": {"client_id": "c", "client_secret_env": "TRACKER_SECRET"},
    }
    (home / "mcp.json").write_text(json.dumps({"mcp_servers": servers}), encoding="utf-8")
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("mcp__ask__summarize", {"text": f"key {secret}"})),
            ScriptedResponse.text("Short."),
            ScriptedResponse.text("ok"),
        ]
    )
    async with AgentRuntime(project, home, Approvals(), model=model) as runtime:
        _, events = await _run(runtime)
        stored = await runtime.session_messages(events[0].session_id)
    (sampled,) = _of(events, "mcp_sampling")
    assert sampled.prompt == "key [redacted:TRACKER_SECRET]"
    assert secret not in json.dumps([e.model_dump() for e in events])
    assert secret not in json.dumps([m.model_dump() for m in stored])


async def test_mcp_authorize_takes_a_run_through_a_servers_login(tmp_path: Path) -> None:
    from tests.integration.test_mcp_oauth import browser
    from tests.support.mcp_servers.oauth_http import oauth_server

    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    write_minimal_config(home)
    logins: list[tuple[str, str]] = []

    async def authorize(server: str, url: str) -> None:
        logins.append((server, url))
        await browser(server, url)

    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("mcp__tracker__add", {"a": 20, "b": 22})),
            ScriptedResponse.text("done"),
        ]
    )
    with oauth_server(tmp_path) as server:
        servers = {"tracker": {"url": server.url}}
        (home / "mcp.json").write_text(json.dumps({"mcp_servers": servers}), encoding="utf-8")
        async with AgentRuntime(
            project, home, Approvals(), model=model, mcp_authorize=authorize
        ) as runtime:
            result, events = await _run(runtime)
    assert result.status == "completed", result.reason
    assert [server for server, _ in logins] == ["tracker"]
    assert logins[0][1].startswith(server.url.split("/mcp")[0])
    (content,) = _results(events)
    assert "42" in content
    assert (home / "mcp-auth" / "tracker.json").exists()
