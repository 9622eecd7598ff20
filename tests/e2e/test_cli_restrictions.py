"""Restrictions bind every run (issue 31; AGT-1, AGT-3, PLAN-2, TEAM-4), through the installed
CLI, as an attacker would try them: a scripted model asks for writes and commands from every
kind of run, and each test asserts the side effect (no file, no command run), not only an
event. One loopback server answers the root and its children by route."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e import test_cli_sub_agents as sub
from tests.e2e.conftest import CliWorld
from tests.e2e.test_cli_sub_agents import call, configure, session_id_of
from tests.support.fake_openai import text_response, tool_call_response
from tests.support.routed_openai import RoutedOpenAIServer

pytestmark = pytest.mark.e2e

world = sub.world  # a home, a project and the routed server
server = sub.server

ALLOW_WRITES = (
    "[permissions]\n"
    'allow = ["write_file", "run_command(prefix:touch)"]\n'  # nobody is asked: allowed
)
POOL = (
    '[[agents.worker_pools]]\npool_id = "p"\n'
    '[[agents.worker_pools.workers]]\nagent_definition_id = "doer"\n'
)
DOER = (
    "---\nid: doer\ndescription: Does the work it is given.\n"
    "tools: [read_file, write_file, run_command, send_message]\n---\nYou do the work.\n"
)


def define(world: CliWorld, name: str, text: str) -> None:
    folder = world.home / "agents"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.md").write_text(text, encoding="utf-8")


def write_and_touch(prefix: str) -> list[tuple[str, str, str]]:
    return [
        call(f"{prefix}_w", "write_file", path=f"{prefix}-wrote.txt", content="x"),
        call(f"{prefix}_c", "run_command", command=f"touch {prefix}-ran.txt"),
    ]


def results_seen(server: RoutedOpenAIServer, key: str) -> str:
    """Every tool result the requests of route `key` carried, as one text."""
    texts = []
    for request in server.requests_for(key):
        for message in request.json["messages"]:
            if message.get("role") == "tool":
                texts.append(str(message.get("content")))
    return "\n".join(texts)


def assert_nothing_done(project: Path, prefix: str) -> None:
    assert not (project / f"{prefix}-wrote.txt").exists()
    assert not (project / f"{prefix}-ran.txt").exists()


# --- the holes the review found ------------------------------------------------------------


def test_a_teammate_of_a_lead_in_plan_mode_cannot_write_or_run_commands(
    world: CliWorld, server: RoutedOpenAIServer
) -> None:
    configure(world, ALLOW_WRITES + POOL)
    define(world, "doer", DOER)
    spawn = {"definition": "doer", "name": "bob", "prompt": "bob: get going"}
    server.route(
        "bob: get going",
        tool_call_response(write_and_touch("bob")),
        text_response("bob tried"),
    )
    server.route(
        "plan the team",
        tool_call_response([("c1", "spawn_teammate", json.dumps(spawn))]),
        text_response("team started"),
    )
    result = world.run("run", "--plan", "--orchestrator", "plan the team")
    assert result.returncode == 0, result.stderr
    assert server.served["bob: get going"] == 2  # bob asked, and was answered
    assert_nothing_done(world.project, "bob")
    assert "mode plan" in results_seen(server, "bob: get going")


def test_a_root_run_follows_its_definitions_mode_model_and_skills(
    world: CliWorld, server: RoutedOpenAIServer
) -> None:
    configure(
        world,
        ALLOW_WRITES + '[model_overrides.careful-model]\nname = "careful-model"\n',
    )
    define(
        world,
        "careful",
        "---\nid: careful\ndescription: Careful.\n"
        "tools: [read_file, write_file, run_command, load_skill]\n"
        "permission_mode: plan\nmodel_profile: careful-model\nskills: [tidy]\n---\nBe careful.\n",
    )
    skills = world.home / "skills"
    skills.mkdir()
    (skills / "tidy.md").write_text(
        "---\nname: tidy\ndescription: Tidy the imports.\n---\nSort them.\n", encoding="utf-8"
    )
    (skills / "exfil.md").write_text(
        "---\nname: exfil\ndescription: Send the keys away.\n---\nDo it.\n", encoding="utf-8"
    )
    server.route(
        "change things",
        tool_call_response(
            [*write_and_touch("root"), ("s1", "load_skill", json.dumps({"name": "exfil"}))]
        ),
        text_response("tried"),
    )
    result = world.run("run", "--agent", "careful", "change things")
    assert result.returncode == 0, result.stderr
    assert_nothing_done(world.project, "root")
    first, second = server.requests_for("change things")
    assert first.json["model"] == "careful-model"  # the definition's model_profile
    system = first.json["messages"][0]["content"]
    assert "tidy" in system and "exfil" not in system  # only the listed skills
    seen = results_seen(server, "change things")
    assert "mode plan" in seen
    assert "unknown skill" in seen or "no skill" in seen
    assert "Do it." not in second.body.decode("utf-8")


def test_plan_mode_is_kept_when_the_session_resumes_in_another_process(
    world: CliWorld, server: RoutedOpenAIServer
) -> None:
    configure(world, ALLOW_WRITES)
    server.route("look around first", text_response("I looked; here is my idea"))
    first = world.run("run", "--plan", "look around first")
    assert first.returncode == 0, first.stderr
    session = session_id_of(first.stdout + first.stderr)
    server.route("now do it", tool_call_response(write_and_touch("resumed")), text_response("ok"))
    again = world.run("run", "-s", session, "now do it")  # a new process, without --plan
    assert again.returncode == 0, again.stderr
    assert_nothing_done(world.project, "resumed")
    assert "mode plan" in results_seen(server, "now do it")


# --- every kind of child: plan mode, deny rules and the tool ceiling bind it --------------


def spawner(kind: str, task: str) -> tuple[str, str, str]:
    """The call with which a root run starts a child of `kind` doing `task`."""
    match kind:
        case "sub_agent":
            return call("k1", "create_sub_agent", agent_id="doer", task=task)
        case "fork":
            return call("k1", "fork_agent", task=task)
        case "worker":
            return call("k1", "dispatch_worker", pool="p", task=task)
        case _:
            spawn = {"definition": "doer", "name": "tess", "prompt": task}
            return ("k1", "spawn_teammate", json.dumps(spawn))


def start_child(world: CliWorld, kind: str, *flags: str, message: str) -> None:
    orchestrated = kind in ("worker", "teammate")
    args = ["run", *flags, *(["--orchestrator"] if orchestrated else []), message]
    if kind == "fork":  # a fork keeps its parent's tools: the parent follows `doer` too
        args[1:1] = ["--agent", "doer-parent"]
    result = world.run(*args)
    assert result.returncode == 0, result.stderr


KINDS = ["sub_agent", "fork", "worker", "teammate"]


def prepare(world: CliWorld, extra: str = "") -> None:
    configure(world, extra + POOL)
    define(world, "doer", DOER)
    define(
        world,
        "doer-parent",
        "---\nid: doer-parent\ndescription: Forks.\n"
        "tools: [read_file, write_file, run_command, fork_agent]\n---\nFork.\n",
    )


@pytest.mark.parametrize("kind", KINDS)
def test_plan_mode_binds_every_kind_of_child(
    world: CliWorld, server: RoutedOpenAIServer, kind: str
) -> None:
    prepare(world, ALLOW_WRITES)
    task = f"child task {kind}"
    server.route(task, tool_call_response(write_and_touch(kind)), text_response("child tried"))
    server.route("parent asks", tool_call_response([spawner(kind, task)]), text_response("ok"))
    start_child(world, kind, "--plan", message="parent asks")
    assert server.served[task] == 2
    assert_nothing_done(world.project, kind)
    assert "mode plan" in results_seen(server, task)


@pytest.mark.parametrize("kind", KINDS)
def test_deny_rules_and_the_tool_ceiling_bind_every_kind_of_child(
    world: CliWorld, server: RoutedOpenAIServer, kind: str
) -> None:
    # bypass allows everything the rules do not deny: the deny rule still binds the child,
    # and so does its definition's ceiling (no web_fetch, no grep for `doer`)
    prepare(world, '[permissions]\nmode = "bypass"\ndeny = ["write_file(/denied.txt)"]\n')
    task = f"child task {kind}"
    server.route(
        task,
        tool_call_response(
            [
                call("d1", "write_file", path="denied.txt", content="x"),
                call("d2", "grep", pattern="x"),
            ]
        ),
        text_response("child tried"),
    )
    server.route("parent asks", tool_call_response([spawner(kind, task)]), text_response("ok"))
    start_child(world, kind, message="parent asks")
    assert server.served[task] == 2
    assert not (world.project / "denied.txt").exists()
    first = server.requests_for(task)[0]
    offered = {t["function"]["name"] for t in first.json.get("tools", [])}
    assert "grep" not in offered and "web_fetch" not in offered
    seen = results_seen(server, task)
    assert "deny rule" in seen
    assert "unknown tool 'grep'" in seen
