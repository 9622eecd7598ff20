"""An agent definition's `model_profile` and `permission_mode` apply to the children that follow
it (AGT-1, AGT-2, AGT-4, CFG-7), through the SDK with two loopback OpenAI-style servers: the
main model's and the `[model_overrides.cheap]` profile's.

A sub-agent or a worker whose definition names the profile sends its requests to that profile's
server and model, and nothing to the main one; a child without a profile stays on the main
model. A sub-agent or worker whose definition says `permission_mode: plan` cannot write: its
write is refused without asking, while a child of a definition without it is asked and writes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from soong_agent import AgentRuntime, ApprovalRequest
from soong_agent.ports.approval import Decision
from tests.support.fake_openai import ScriptedResponse, text_response, tool_call_response
from tests.support.routed_openai import RoutedOpenAIServer

AGENTS = {
    "cheap-helper": "tools: [read_file]\nmodel_profile: cheap\n",
    "planner": "tools: [read_file, write_file]\npermission_mode: plan\n",
    "writer": "tools: [read_file, write_file]\n",
}
POOLS = """
[[agents.worker_pools]]
pool_id = "crew"
workers = [
  { worker_id = "thrifty", agent_definition_id = "cheap-helper" },
  { worker_id = "planning", agent_definition_id = "planner" },
]
"""


@dataclass
class World:
    project: Path
    home: Path
    main: RoutedOpenAIServer
    cheap: RoutedOpenAIServer
    asked: list[ApprovalRequest]

    def runtime(self) -> AgentRuntime:
        def approve(request: ApprovalRequest) -> Decision:
            self.asked.append(request)
            return "allow_once"

        return AgentRuntime(self.project, self.home, approve)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    (home / "agents").mkdir(parents=True)
    for name, keys in AGENTS.items():
        (home / "agents" / f"{name}.md").write_text(
            f"---\nid: {name}\ndescription: The {name}\n{keys}---\nYou are the {name}.\n",
            encoding="utf-8",
        )
    with RoutedOpenAIServer() as main, RoutedOpenAIServer() as cheap:
        (home / "config.toml").write_text(
            "[model]\n"
            'provider = "openai"\n'
            f'base_url = "{main.base_url}"\n'
            'api_key_env = ""\n'
            'name = "main-model"\n'
            "[model.retry]\n"
            "initial_backoff_ms = 10\n"
            "[model_overrides.cheap]\n"
            f'base_url = "{cheap.base_url}"\n'
            'name = "cheap-model"\n' + POOLS,
            encoding="utf-8",
        )
        yield World(project, home, main, cheap, [])
        assert main.rejections == [] and cheap.rejections == []


def call(call_id: str, name: str, **args: object) -> tuple[str, str, str]:
    return (call_id, name, json.dumps(args))


def models_asked(server: RoutedOpenAIServer, key: str) -> list[str]:
    return [r.json["model"] for r in server.requests_for(key)]


def tool_results(server: RoutedOpenAIServer, key: str) -> list[str]:
    last = server.requests_for(key)[-1].json["messages"]
    return [m["content"] for m in last if m["role"] == "tool"]


async def test_a_sub_agent_of_a_definition_with_a_profile_uses_that_profiles_server_and_model(
    world: World,
) -> None:
    world.main.route(
        "parent question",
        tool_call_response(
            [
                call("c1", "create_sub_agent", agent_id="cheap-helper", task="cheap task"),
                call("c2", "create_sub_agent", task="plain task"),
            ]
        ),
        text_response("parent done"),
    )
    world.main.route("plain task", text_response("plain answer"))
    world.cheap.route("cheap task", text_response("cheap answer"))
    async with world.runtime() as runtime:
        run = await runtime.run("parent question")
        result = await run.wait()
        events = [e async for e in run.events()]
    assert result.status == "completed" and result.output == "parent done"
    assert models_asked(world.cheap, "cheap task") == ["cheap-model"]
    assert models_asked(world.main, "cheap task") == []
    assert models_asked(world.main, "plain task") == ["main-model"]  # no profile: the main one
    assert models_asked(world.cheap, "plain task") == models_asked(world.cheap, "parent") == []
    assert set(models_asked(world.main, "parent question")) == {"main-model"}
    results = tool_results(world.main, "parent question")
    assert "cheap answer" in results[0] and "plain answer" in results[1]
    started = {e.agent: e for e in events if e.type == "child_started"}
    assert "cheap-model" in started["cheap-helper"].model
    assert "main-model" in started["default_sub_agent"].model


async def test_a_worker_of_a_definition_with_a_profile_uses_that_profiles_server_and_model(
    world: World,
) -> None:
    world.main.route(
        "lead question",
        tool_call_response(
            [call("c1", "dispatch_worker", pool="crew", worker="thrifty", task="worker job")]
        ),
        text_response("lead done"),
    )
    world.cheap.route("worker job", text_response("worker answer"))
    async with world.runtime() as runtime:
        run = await runtime.run("lead question", orchestrator=True)
        result = await run.wait()
    assert result.status == "completed" and result.output == "lead done"
    assert models_asked(world.cheap, "worker job") == ["cheap-model"]
    assert models_asked(world.main, "worker job") == []
    assert "worker answer" in tool_results(world.main, "lead question")[0]


def write_then_report(path: str) -> list[ScriptedResponse]:
    return [
        tool_call_response([call("w1", "write_file", path=path, content="written")]),
        text_response(f"tried to write {path}"),
    ]


async def test_a_sub_agent_of_a_plan_mode_definition_cannot_write(world: World) -> None:
    world.main.route(
        "parent question",
        tool_call_response(
            [
                call("c1", "create_sub_agent", agent_id="planner", task="plan task"),
                call("c2", "create_sub_agent", agent_id="writer", task="write task"),
            ]
        ),
        text_response("parent done"),
    )
    world.main.route("plan task", *write_then_report("planned.txt"))
    world.main.route("write task", *write_then_report("written.txt"))
    async with world.runtime() as runtime:
        result = await (await runtime.run("parent question")).wait()
    assert result.status == "completed"
    assert not (world.project / "planned.txt").exists()
    assert (world.project / "written.txt").read_text(encoding="utf-8") == "written"
    assert [(a.tool, a.agent) for a in world.asked] == [("write_file", "sub-agent writer")]
    (refused,) = tool_results(world.main, "plan task")
    assert "mode plan is read-only" in refused and "did not run" in refused


async def test_a_worker_of_a_plan_mode_definition_cannot_write(world: World) -> None:
    world.main.route(
        "lead question",
        tool_call_response(
            [call("c1", "dispatch_worker", pool="crew", worker="planning", task="worker plan")]
        ),
        text_response("lead done"),
    )
    world.main.route("worker plan", *write_then_report("planned.txt"))
    async with world.runtime() as runtime:
        result = await (await runtime.run("lead question", orchestrator=True)).wait()
    assert result.status == "completed"
    assert not (world.project / "planned.txt").exists()
    assert world.asked == []  # refused by the mode, not by the user
    (refused,) = tool_results(world.main, "worker plan")
    assert "mode plan is read-only" in refused and "did not run" in refused
