"""A rewind covers what a sub-agent changed (RWD-1): its checkpoints are in its own session, and
count as the turn of the parent that started it. Through the installed CLI; one loopback server
answers parent and child by the task each request ends with."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import CANARY, CliWorld
from tests.support.fake_openai import text_response, tool_call_response
from tests.support.routed_openai import RoutedOpenAIServer

pytestmark = pytest.mark.e2e


@pytest.fixture
def world(tmp_path: Path) -> Iterator[CliWorld]:
    home, project, user = tmp_path / "home", tmp_path / "project", tmp_path / "user"
    for d in (home, project, user):
        d.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(user),
        "LANG": "C.UTF-8",
        "SOONG_AGENT_HOME": str(home),
        "SOONG_TEST_KEY": CANARY,
        "PYTHONIOENCODING": "utf-8",
    }
    with RoutedOpenAIServer() as server:
        world = CliWorld(server=server, home=home, project=project, env=env)
        world.write_config(
            "[model]\n"
            'provider = "openai"\n'
            f'base_url = "{server.base_url}"\n'
            'api_key_env = "SOONG_TEST_KEY"\n'
            'name = "fake-model"\n'
        )
        yield world


def call(call_id: str, name: str, **args: object) -> tuple[str, str, str]:
    return (call_id, name, json.dumps(args))


def test_a_rewind_of_the_parents_turn_puts_back_what_its_sub_agent_wrote(
    world: CliWorld,
) -> None:
    assert isinstance(world.server, RoutedOpenAIServer)
    (world.project / "shared.txt").write_text("original\n")
    world.server.route(
        "rewrite shared.txt",
        tool_call_response(
            [
                call("k1", "write_file", path="shared.txt", content="by the child\n"),
                call("k2", "write_file", path="child-made.txt", content="new\n"),
            ]
        ),
        text_response("child done"),
    )
    world.server.route(
        "delegate it",
        tool_call_response([call("p1", "create_sub_agent", task="rewrite shared.txt")]),
        text_response("parent done"),
    )
    result = world.run("run", "--permission-mode", "bypass", "delegate it")
    assert result.returncode == 0, result.stderr
    assert (world.project / "shared.txt").read_text() == "by the child\n"
    sid = re.search(r"session: (ses_\w+)", result.stdout)
    assert sid, result.stdout
    shown = world.run("sessions", "show", sid.group(1), "-o", "json")
    (turn,) = [m["id"] for m in json.loads(shown.stdout)["messages"] if m["role"] == "user"]
    rewound = world.run("sessions", "rewind", sid.group(1), "--to", turn)
    assert rewound.returncode == 0, rewound.stderr
    assert (world.project / "shared.txt").read_text() == "original\n"
    assert not (world.project / "child-made.txt").exists()
    assert re.search(r"removed\s+child-made\.txt", rewound.stdout)
