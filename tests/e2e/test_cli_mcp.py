"""MCP end to end (MCP-1, MCP-2): the installed CLI with real MCP servers from PyPI
(`mcp-server-time`, `mcp-server-git`, installed by the README's set-up through the dev extras)
and the loopback OpenAI server playing the model."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import CliWorld
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e


def git_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "GIT_CONFIG_NOSYSTEM": "1"}
    for args in (
        ["init", "-q", "-b", "main"],
        ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "--allow-empty", "-m", "x"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env)
    (repo / "new.txt").write_text("untracked\n", encoding="utf-8")
    return repo


def write_mcp(world: CliWorld, servers: dict[str, Any], key: str = "mcp_servers") -> None:
    (world.home / "mcp.json").write_text(json.dumps({key: servers}), encoding="utf-8")


def time_and_git(repo: Path) -> dict[str, Any]:
    return {
        "time": {
            "transport": "stdio",
            "command": sys.executable,
            "args": ["-m", "mcp_server_time"],
        },
        "git": {
            "command": sys.executable,
            "args": ["-m", "mcp_server_git", "--repository", str(repo)],
        },
    }


def tool_results(world: CliWorld, request: int) -> list[str]:
    messages = world.server.requests[request].json["messages"]
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_the_model_calls_a_time_tool_and_a_git_tool(world: CliWorld, tmp_path: Path) -> None:
    repo = git_repo(tmp_path)
    write_mcp(world, time_and_git(repo), key="mcpServers")  # a Claude-style file works as is
    config = world.home / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8")
        + '[permissions]\nallow = ["mcp__time__*", "mcp__git__git_status"]\n'
        + "[tools]\ndefer_threshold = 100\n",
        encoding="utf-8",
    )
    world.server.enqueue(
        tool_call_response(
            [("t1", "mcp__time__get_current_time", json.dumps({"timezone": "UTC"}))]
        ),
        tool_call_response([("g1", "mcp__git__git_status", json.dumps({"repo_path": str(repo)}))]),
        text_response("done"),
    )
    result = world.run("run", "what time is it, and what is the repo's status?", timeout=90)
    assert result.returncode == 0, result.stderr
    sent = [t["function"]["name"] for t in world.server.requests[0].json["tools"]]
    assert "mcp__time__get_current_time" in sent and "mcp__git__git_status" in sent
    (clock,) = tool_results(world, 1)
    assert "UTC" in clock and "datetime" in clock
    git_status = tool_results(world, 2)[-1]
    assert "new.txt" in git_status
    assert "mcp time: ready" in result.stderr and "mcp git: ready" in result.stderr
    with sqlite3.connect(world.home / "sessions.sqlite") as db:
        states = [
            json.loads(row[0])["state"]
            for row in db.execute("SELECT payload FROM events WHERE type = 'mcp_server'")
        ]
    assert "ready" in states


def test_mcp_status_lists_each_server_and_fails_when_one_does(
    world: CliWorld, tmp_path: Path
) -> None:
    repo = git_repo(tmp_path)
    servers = time_and_git(repo)
    write_mcp(world, servers)
    ok = world.run("mcp", "status", timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    lines = ok.stdout.strip().splitlines()
    assert [line.split()[:2] for line in lines] == [["time", "ready"], ["git", "ready"]]
    assert "tools" in lines[0] and "started in" in lines[0]

    broken = tmp_path / "broken.py"
    broken.write_text("import sys\nsys.stderr.write('no config here\\n')\nsys.exit(3)\n")
    servers["broken"] = {"command": sys.executable, "args": [str(broken)]}
    write_mcp(world, servers)
    bad = world.run("mcp", "status", timeout=60)
    assert bad.returncode == 1
    broken_line = next(line for line in bad.stdout.splitlines() if line.startswith("broken"))
    assert "failed" in broken_line and "no config here" in broken_line
    assert "not ready: broken" in bad.stderr


def test_mcp_tools_prints_the_names_the_model_sees(world: CliWorld) -> None:
    write_mcp(
        world,
        {"time": {"command": sys.executable, "args": ["-m", "mcp_server_time"]}},
    )
    result = world.run("mcp", "tools", "time", timeout=60)
    assert result.returncode == 0, result.stderr
    assert "mcp__time__get_current_time" in result.stdout
    unknown = world.run("mcp", "tools", "nope", timeout=60)
    assert unknown.returncode == 2 and "servers: time" in unknown.stderr


def test_a_bad_mcp_json_is_one_line_naming_the_server_and_field(world: CliWorld) -> None:
    write_mcp(world, {"Bad Name": {"command": "x"}})
    result = world.run("run", "hi")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "mcp.json" in lines[0] and "Bad Name" in lines[0]
    assert world.server.requests == []


def test_a_project_mcp_json_adds_no_server(world: CliWorld) -> None:
    (world.project / "mcp.json").write_text(
        json.dumps({"mcp_servers": {"evil": {"command": "touch", "args": ["pwned"]}}})
    )
    (world.project / ".soong-agent").mkdir()
    (world.project / ".soong-agent" / "mcp.json").write_text(
        json.dumps({"mcpServers": {"evil": {"command": "touch", "args": ["pwned"]}}})
    )
    world.server.enqueue(text_response("done"))
    result = world.run("run", "hi")
    assert result.returncode == 0, result.stderr
    assert not (world.project / "pwned").exists()
    sent = [t["function"]["name"] for t in world.server.requests[0].json["tools"]]
    assert not [n for n in sent if n.startswith("mcp__")]
