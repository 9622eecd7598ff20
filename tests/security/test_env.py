"""Environment leakage (TOOL-2, TOOL-3): a secret in the agent's own environment never reaches
a command it runs, whatever the command does to look for it.

The approval callback allows every call; the canaries must be absent from what the model
received and from every file in the soong-agent home (the session database included).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.security.conftest import ALLOW, Outcome, Secret, World, canary

SECRET_VARS = ("SOONG_CANARY_SECRET", "OPENAI_API_KEY", "GITHUB_TOKEN", "CORP_LLM_CREDENTIAL")
# The model profile reads its key from a variable whose name does not look like a secret.
MODEL = '[model]\nprovider = "openai"\nname = "scripted"\napi_key_env = "CORP_LLM_CREDENTIAL"\n'
PUBLIC_VAR = "SOONG_PUBLIC_SETTING"
ALLOW_LIST_THEM = "[tools]\nenv_allowlist = [{}]\n".format(
    ", ".join(f'"{name}"' for name in ("PATH", "HOME", "LANG", PUBLIC_VAR, *SECRET_VARS))
)


@pytest.fixture
def secret_env(world: World, monkeypatch: pytest.MonkeyPatch) -> World:
    """The canaries set in this (the parent) process before any runtime is built; the config's
    model profile reads its key from CORP_LLM_CREDENTIAL (a name that does not look secret)."""
    world.model_section = MODEL
    for name in SECRET_VARS:
        value = canary(name)
        monkeypatch.setenv(name, value)
        world.secrets[name] = Secret(world.root / "environment", value)
    return world


def assert_no_env_secret(world: World, outcome: Outcome) -> None:
    assert world.leaks(outcome, *SECRET_VARS) == []


ENV_COMMANDS = [
    "env",
    "printenv",
    "printenv SOONG_CANARY_SECRET",
    "printenv OPENAI_API_KEY",
    "echo $SOONG_CANARY_SECRET $OPENAI_API_KEY $GITHUB_TOKEN $CORP_LLM_CREDENTIAL",
    "export -p",
    "set",
    "cat /proc/self/environ",
    "bash -lc env",
    "python3 -c 'import os; print(dict(os.environ))'",
]


@pytest.mark.parametrize("command", ENV_COMMANDS)
@pytest.mark.parametrize("allow_list", ["default", "secrets_allow_listed"])
async def test_run_command_never_sees_the_parents_secrets(
    secret_env: World, command: str, allow_list: str
) -> None:
    config = ALLOW_LIST_THEM if allow_list == "secrets_allow_listed" else ""
    outcome = await secret_env.run(
        ("run_command", {"command": command}), approval=ALLOW, config=config
    )
    assert_no_env_secret(secret_env, outcome)


async def test_control_an_allow_listed_ordinary_variable_does_reach_the_command(
    secret_env: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = canary("public")
    monkeypatch.setenv(PUBLIC_VAR, value)
    outcome = await secret_env.run(
        ("run_command", {"command": "env"}), approval=ALLOW, config=ALLOW_LIST_THEM
    )
    assert value in outcome.seen_by_model
    assert_no_env_secret(secret_env, outcome)


def envdump_tool(home: Path, permission_class: str) -> None:
    tools = home / "tools"
    tools.mkdir(exist_ok=True)
    definition = {
        "name": "envdump",
        "description": "Print the environment.",
        "parameters": {"type": "object", "properties": {}},
        "command": ["env"],
        "permission_class": permission_class,
    }
    (tools / "envdump.json").write_text(json.dumps(definition), encoding="utf-8")


@pytest.mark.parametrize("permission_class", ["read_only", "exec"])
@pytest.mark.parametrize("allow_list", ["default", "secrets_allow_listed"])
async def test_declarative_tool_never_sees_the_parents_secrets(
    secret_env: World, permission_class: str, allow_list: str
) -> None:
    envdump_tool(secret_env.home, permission_class)
    config = ALLOW_LIST_THEM if allow_list == "secrets_allow_listed" else ""
    outcome = await secret_env.run(("envdump", {}), approval=ALLOW, config=config)
    assert "PATH=" in outcome.seen_by_model  # the tool did run and print its environment
    assert_no_env_secret(secret_env, outcome)


# --- the agent started with the secret in its environment from the start ---------------------

CHILD = """
import asyncio, json, sys
from soong_agent import AgentRuntime
from soong_agent.testing import ScriptedModel, ScriptedResponse

project, home, command = sys.argv[1:4]

async def main() -> None:
    model = ScriptedModel([
        ScriptedResponse.tool_calls(("run_command", {"command": command})),
        ScriptedResponse.text("done"),
    ])
    runtime = AgentRuntime(project_dir=project, home=home, approval=lambda r: "allow_once",
                           model=model)
    async with runtime:
        result = await (await runtime.run("go")).wait()
    seen = [b.content for c in model.calls[1:] for b in c.messages[-1].tool_results]
    print(json.dumps({"status": result.status, "seen": seen}))

asyncio.run(main())
"""


@pytest.mark.parametrize(
    "command",
    [
        "env",
        "cat /proc/$PPID/environ",
        "tr '\\0' '\\n' < /proc/${PPID}/environ",
    ],
)
def test_secret_in_the_agents_initial_environment_never_reaches_a_command(
    world: World, command: str
) -> None:
    """The agent process is started with the canary in its environment (as a user exports
    OPENAI_API_KEY before running it), the way `os.environ` changes in this process cannot
    show: a command must not find it, not even in its parent's /proc entry."""
    value = canary("initial_env")
    world.secrets["initial_env"] = Secret(world.root / "environment", value)
    world.write_config()
    env = {**os.environ, "SOONG_CANARY_SECRET": value, "OPENAI_API_KEY": value}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(world.project), str(world.home), command],
        env=env,
        cwd=world.root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["status"] == "completed" and len(report["seen"]) == 1
    assert value not in report["seen"][0]
    files = [p for p in world.home.rglob("*") if p.is_file()]
    assert not [p for p in files if value.encode() in p.read_bytes()]


# --- PATH hygiene (issue 11 item 4) ----------------------------------------------------------

PLANTED = "#!/bin/sh\ntouch planted-ran\necho PLANTED\n"


def plant_program(folder: Path, name: str = "cat") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / name
    program.write_text(PLANTED, encoding="utf-8")
    program.chmod(0o755)


@pytest.mark.parametrize(
    ("entry", "where"),
    [(".", "."), ("", "."), ("./bin", "bin"), ("bin", "bin"), ("tools/../bin", "bin")],
    ids=["dot", "empty", "dot_bin", "bin", "dotdot"],
)
async def test_a_relative_path_entry_never_runs_a_planted_program(
    world: World, monkeypatch: pytest.MonkeyPatch, entry: str, where: str
) -> None:
    """`.` (or an empty or relative entry) first on PATH: `cat` would be the project's ./cat."""
    plant_program(world.project / where)
    (world.project / "tools").mkdir(exist_ok=True)
    monkeypatch.setenv("PATH", f"{entry}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    outcome = await world.run(("run_command", {"command": "cat readme.txt"}), approval=ALLOW)
    assert "an ordinary project file" in outcome.seen_by_model
    assert "PLANTED" not in outcome.seen_by_model
    assert not (world.project / "planted-ran").exists()


async def test_a_declarative_tool_never_runs_a_planted_program(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    plant_program(world.project)
    monkeypatch.setenv("PATH", f".:{os.environ.get('PATH', '/usr/bin:/bin')}")
    tools = world.home / "tools"
    tools.mkdir(exist_ok=True)
    definition = {
        "name": "show_readme",
        "description": "Print the readme.",
        "parameters": {"type": "object", "properties": {}},
        "command": ["cat", "readme.txt"],
        "permission_class": "read_only",
    }
    (tools / "show_readme.json").write_text(json.dumps(definition), encoding="utf-8")
    outcome = await world.run(("show_readme", {}), approval=ALLOW)
    assert "an ordinary project file" in outcome.seen_by_model
    assert not (world.project / "planted-ran").exists()


async def test_control_absolute_entries_stay_and_dot_slash_still_runs(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's own absolute folders stay on PATH, in order; a program in the project still
    runs when named as ``./name`` (what the tool's description says)."""
    bin_dir = world.root / "bin"
    plant_program(bin_dir, "hello-tool")
    plant_program(world.project, "local-tool")
    monkeypatch.setenv("PATH", f".:{bin_dir}::{os.environ.get('PATH', '/usr/bin:/bin')}")
    outcome = await world.run(
        ("run_command", {"command": 'hello-tool && ./local-tool && echo "PATH=$PATH"'}),
        approval=ALLOW,
    )
    assert outcome.seen_by_model.count("PLANTED") == 2
    assert f"PATH={bin_dir}:" in outcome.seen_by_model
    assert "::" not in outcome.seen_by_model
