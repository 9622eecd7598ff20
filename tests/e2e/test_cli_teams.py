"""Teams through the installed CLI (issue 20): `run --orchestrator` waits for its teammates,
`team show` prints the roster with mail and cost, and a resumed lead reads its mail at its
first turn. One loopback server answers the lead and the teammate by route."""

from __future__ import annotations

import json

import pytest

from tests.e2e import test_cli_sub_agents as sub
from tests.e2e.conftest import CliWorld
from tests.e2e.test_cli_sub_agents import PRICE, call, configure, session_id_of
from tests.support.fake_openai import text_response, tool_call_response
from tests.support.routed_openai import RoutedOpenAIServer

pytestmark = pytest.mark.e2e

world = sub.world  # the same fixtures: a home, a project and the routed server
server = sub.server

POOL = (
    '[[agents.worker_pools]]\npool_id = "p"\n'
    '[[agents.worker_pools.workers]]\nagent_definition_id = "default_worker_agent"\n'
)


def test_a_lead_waits_for_its_teammate_then_team_show_and_resume_read_the_mail(
    world: CliWorld, server: RoutedOpenAIServer
) -> None:
    configure(world, PRICE + POOL)
    spawn = {"definition": "default_worker_agent", "name": "alice", "prompt": "alice: say hi"}
    server.route(
        "alice: say hi",
        tool_call_response(
            [call("c1", "send_message", to="lead", body="hi lead, alice here")],
            prompt_tokens=100,
            completion_tokens=10,
        ),
        text_response("said hi", prompt_tokens=100, completion_tokens=10),
    )
    server.route(
        "start the team",
        tool_call_response([("c2", "spawn_teammate", json.dumps(spawn))]),
        text_response("team started"),
    )
    result = world.run("run", "--orchestrator", "start the team")
    assert result.returncode == 0, result.stderr
    assert "waiting for the teammates to finish" in result.stderr
    assert "◆ teammate alice idle: joined the team" in result.stderr
    lead = session_id_of(result.stdout + result.stderr)
    assert server.served["alice: say hi"] == 2  # the CLI did not exit before alice was done

    shown = world.run("team", "show", lead)
    assert shown.returncode == 0, shown.stderr
    assert "alice (default_worker_agent): idle" in shown.stdout
    assert "$0.2400" in shown.stdout  # alice's two calls: 2 x (100 in + 10 out)
    assert "lead: 1 unread mail" in shown.stdout

    server.route("from alice, message", text_response("thanks, alice"))
    again = world.run("run", "-s", lead, "anything new?")
    assert again.returncode == 0, again.stderr
    assert "thanks, alice" in again.stdout
    (asked,) = server.requests_for("from alice, message")
    assert "hi lead, alice here" in asked.body.decode("utf-8")
    after = world.run("team", "show", lead)
    assert "unread" not in after.stdout

    unknown = world.run("team", "show", "ses_nope")
    assert unknown.returncode != 0 and "ses_nope" in unknown.stderr
