"""SBX-3 end to end: the installed CLI runs the model's commands in the host's OS sandbox.

A command that builds a secret's path itself (no text check can see it) gets nothing from the
kernel, a write outside the project fails while one inside works, and the model is told what
was refused; `sandbox.os = "off"` marks every result unsandboxed; `sandbox check` shows the
project's policy. Skipped where no mechanism works on the host (the unit tests cover that).
"""

from __future__ import annotations

import json
import sys

import pytest

from soong_agent.adapters.ossandbox import probe_host
from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e

SECRET = "ssh-key-body-4b1d93e0"
# the path is assembled at run time: only the kernel-level sandbox can stop this read
READ_KEY = (
    f"{sys.executable} -c \"import os; p = os.path.join(os.environ['HOME'], '.s' + 'sh', "
    "'id_' + 'rsa'); print(open(p).read())\""
)


def works_here() -> bool:
    return any(status.works for status in probe_host().statuses)


needs_sandbox = pytest.mark.skipif(not works_here(), reason="no OS sandbox works on this host")


def configure(world: CliWorld, sandbox: str) -> None:
    config = world.home / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8")
        + f'[permissions]\nmode = "bypass"\n[sandbox]\nos = "{sandbox}"\n',
        encoding="utf-8",
    )
    ssh = world.env["HOME"] + "/.ssh"
    import os

    os.makedirs(ssh, exist_ok=True)
    with open(f"{ssh}/id_rsa", "w", encoding="utf-8") as f:
        f.write(SECRET + "\n")


def tool_results(world: CliWorld, request: int) -> list[str]:
    messages = world.server.requests[request].json["messages"]
    return [m["content"] for m in messages if m["role"] == "tool"]


def run_calls(world: CliWorld, *commands: str) -> None:
    calls = [
        tool_call_response([(f"c{i}", "run_command", json.dumps({"command": command}))])
        for i, command in enumerate(commands)
    ]
    world.server.enqueue(*calls, text_response("done"))


@needs_sandbox
def test_a_command_cannot_read_a_key_or_write_outside_the_project(world: CliWorld) -> None:
    configure(world, "auto")
    outside = world.env["HOME"] + "/outside.txt"
    write_home = (
        f"{sys.executable} -c \"import os; open(os.environ['HOME'] + '/outside' + '.txt', 'w')\""
    )
    run_calls(world, READ_KEY, write_home, "echo inside > made.txt")
    result = world.run("run", "try the commands")
    assert result.returncode == 0, result.stderr
    read, write_out, write_in = tool_results(world, 3)
    assert SECRET not in read
    assert "exit code 1" in read  # python's PermissionError / file not found
    assert "[unsandboxed" not in read
    assert "sandbox" in write_out and "refused" in write_out, write_out
    assert "commands may write only in" in write_out
    import os

    assert not os.path.exists(outside)
    assert (world.project / "made.txt").read_text(encoding="utf-8") == "inside\n"
    assert "exit code 0" in write_in
    # the model was told what the sandbox allows before it ran anything
    tools = world.server.requests[0].json["tools"]
    description = next(t for t in tools if t["function"]["name"] == "run_command")["function"]
    assert "OS sandbox" in description["description"]
    assert "NO OS SANDBOX" not in result.stderr
    assert "⊘ sandbox (" in result.stderr  # the refusal is shown on the terminal too


def test_sandbox_off_marks_every_result_unsandboxed(world: CliWorld) -> None:
    configure(world, "off")
    run_calls(world, "echo plain")
    result = world.run("run", "run it")
    assert result.returncode == 0, result.stderr
    (only,) = tool_results(world, 1)
    assert "[unsandboxed: no OS sandbox confined this command]" in only
    assert "plain" in only


@needs_sandbox
def test_sandbox_check_shows_the_mechanism_and_the_projects_policy(world: CliWorld) -> None:
    configure(world, "required")
    result = world.run("sandbox", "check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "works" in result.stdout
    assert "* required" in result.stdout
    assert str(world.home) in result.stdout  # the agent's home is hidden from commands
    assert ".ssh" in result.stdout
