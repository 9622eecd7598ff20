"""HOOK-1 end to end: `${SOONG_AGENT_HOME}/hooks.json` with real hook processes, driven through
the installed CLI against the loopback OpenAI server."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import CANARY, CliWorld
from tests.support.fake_openai import text_response, tool_call_response

pytestmark = pytest.mark.e2e

PY = sys.executable


def script(world: CliWorld, name: str, body: str) -> str:
    """A Python hook script in the test's temp folder; the command line that runs it."""
    path = world.home.parent / f"{name}.py"
    path.write_text(body, encoding="utf-8")
    return f"{PY} {path}"


def write_hooks(world: CliWorld, hooks: dict[str, Any], where: Path | None = None) -> None:
    target = (where or world.home) / "hooks.json"
    target.write_text(json.dumps({"hooks": hooks}), encoding="utf-8")


def add_config(world: CliWorld, text: str) -> None:
    config = world.home / "config.toml"
    config.write_text(config.read_text(encoding="utf-8") + text, encoding="utf-8")


def events_of(world: CliWorld, kind: str) -> list[dict[str, Any]]:
    with sqlite3.connect(world.home / "sessions.sqlite") as db:
        rows = db.execute("SELECT payload FROM events WHERE type = ? ORDER BY seq", (kind,))
        return [json.loads(row[0]) for row in rows]


def write_call(path: str = "out.txt") -> object:
    args = json.dumps({"path": path, "content": "hello"})
    return tool_call_response([("c1", "write_file", args)])


def tool_results(world: CliWorld, request: int) -> list[str]:
    messages = world.server.requests[request].json["messages"]
    return [m["content"] for m in messages if m["role"] == "tool"]


def test_a_pre_tool_use_hook_blocks_write_file(world: CliWorld) -> None:
    guard = script(
        world,
        "guard",
        "import json, sys\n"
        "data = json.load(sys.stdin)\n"
        "print(json.dumps({'decision': 'block', 'reason': 'no writes to ' + "
        "data['tool_input']['path']}))\n",
    )
    write_hooks(world, {"pre_tool_use": [{"command": guard, "matcher": "^write_file$"}]})
    add_config(world, '[permissions]\nmode = "accept_edits"\n')
    world.server.enqueue(write_call(), text_response("ok"))
    result = world.run("run", "write it")
    assert result.returncode == 0, result.stderr
    assert not (world.project / "out.txt").exists()
    (told,) = tool_results(world, 1)
    assert "no writes to out.txt" in told


def test_a_hook_past_its_timeout_fails_open_and_leaves_no_process(world: CliWorld) -> None:
    marker = f"soong-hook-sleeper-{os.getpid()}"
    sleeper = script(
        world,
        "sleeper",
        f"import subprocess, time\nsubprocess.Popen(['{PY}', '-c', 'import time; "
        f"time.sleep(60)', '{marker}'])\ntime.sleep(60)\n",
    )
    write_hooks(world, {"post_sampling": [{"command": sleeper, "timeout": 1}]})
    world.server.enqueue(text_response("done"))
    started = time.monotonic()
    result = world.run("run", "hi")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 30
    assert "done" in result.stdout
    assert "post_sampling hook failed" in result.stderr
    (failed,) = events_of(world, "hook_failed")
    assert "timed out" in failed["reason"]
    alive = []
    for entry in Path("/proc").iterdir():
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                alive.append(entry.name)
        except OSError:
            continue
    assert alive == [], "the hook's child outlived it"


def test_a_hook_printing_10_mb_is_capped(world: CliWorld) -> None:
    # a stop hook's stdout becomes the reminder the model gets: the cap is visible there
    loud = script(world, "loud", "import sys\nsys.stdout.write('x' * 10_000_000)\nsys.exit(1)\n")
    write_hooks(world, {"stop": [{"command": loud}]})
    add_config(world, "[hooks]\nmax_stop_continuations = 1\n")
    world.server.enqueue(text_response("first"), text_response("second"))
    result = world.run("run", "hi")
    assert result.returncode == 0, result.stderr
    reminder = world.server.requests[1].json["messages"][-1]
    assert reminder["role"] == "user"
    assert 1_000 < len(reminder["content"]) <= 10_000
    assert (world.home / "sessions.sqlite").stat().st_size < 2_000_000
    assert len(events_of(world, "hook_ran")) == 2


def test_a_permission_request_hook_that_allows_means_no_prompt(world: CliWorld) -> None:
    allow = script(world, "allow", 'print(\'{"decision": "allow", "reason": "ci"}\')\n')
    write_hooks(world, {"permission_request": [{"command": allow}]})
    world.server.enqueue(write_call(), text_response("ok"))
    # a prompt would read "n" from stdin and deny
    result = world.run("run", "write it", input="n\n")
    assert result.returncode == 0, result.stderr
    assert (world.project / "out.txt").read_text(encoding="utf-8") == "hello"
    assert "allow once" not in result.stderr.lower()


def test_a_hook_never_sees_a_secret_in_its_environment(world: CliWorld) -> None:
    dump = script(
        world,
        "dump",
        "import os, sys\n"
        f"open({str(world.project / 'env.txt')!r}, 'w').write(repr(dict(os.environ)))\n"
        "open(" + repr(str(world.project / "stdin.txt")) + ", 'w').write(sys.stdin.read())\n",
    )
    write_hooks(world, {"session_start": [{"command": dump}]})
    world.server.enqueue(text_response("done"))
    world.env["SOME_TOKEN"] = "tok-should-not-leak-9f8e"
    result = world.run("run", "hi")
    assert result.returncode == 0, result.stderr
    env = (world.project / "env.txt").read_text(encoding="utf-8")
    assert CANARY not in env and "tok-should-not-leak-9f8e" not in env
    assert str(world.project) in env  # PROJECT_ROOT and CWD
    for name in ("PROJECT_ROOT", "PLATFORM", "ARCH", "CWD", "SESSION_ID"):
        assert f"'{name}'" in env
    data = json.loads((world.project / "stdin.txt").read_text(encoding="utf-8"))
    assert data["hook"] == "session_start" and data["depth"] == 0
    assert data["session_id"].startswith("ses_")


def test_async_session_hooks_do_not_hold_up_the_run(world: CliWorld) -> None:
    stamp = world.project / "end.txt"
    slow = script(
        world,
        "slow",
        f"import time\ntime.sleep(1.5)\nopen({str(stamp)!r}, 'w').write('ended')\n",
    )
    write_hooks(
        world,
        {
            "session_start": [{"command": slow, "async": True}],
            "session_end": [{"command": slow, "async": True}],
        },
    )
    world.server.enqueue(text_response("done"))
    started = time.monotonic()
    result = world.run("run", "hi")
    took = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert stamp.read_text(encoding="utf-8") == "ended"  # they completed
    assert took < 1.5 + 4.5  # the hooks' own 1.5 s (they overlap the run), plus start-up


def test_a_hooks_json_in_the_project_folder_has_no_effect(world: CliWorld) -> None:
    guard = script(world, "guard2", "import sys\nsys.exit(2)\n")
    (world.project / ".soong-agent").mkdir()
    for where in (world.project, world.project / ".soong-agent"):
        write_hooks(world, {"pre_tool_use": [{"command": guard}]}, where=where)
    add_config(world, '[permissions]\nmode = "accept_edits"\n')
    world.server.enqueue(write_call(), text_response("ok"))
    result = world.run("run", "write it")
    assert result.returncode == 0, result.stderr
    assert (world.project / "out.txt").read_text(encoding="utf-8") == "hello"


def test_a_bad_hooks_json_is_one_clear_line_and_exit_2(world: CliWorld) -> None:
    write_hooks(world, {"pre_tool_use": [{"command": "true", "timeout": "soon"}]})
    result = world.run("run", "hi")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "hooks.json" in lines[0] and "pre_tool_use[0].timeout" in lines[0]
    assert world.server.requests == []


def test_hooks_enabled_false_turns_them_all_off(world: CliWorld) -> None:
    guard = script(world, "guard3", "import sys\nsys.exit(2)\n")
    write_hooks(world, {"pre_tool_use": [{"command": guard}]})
    add_config(world, '[permissions]\nmode = "accept_edits"\n[hooks]\nenabled = false\n')
    world.server.enqueue(write_call(), text_response("ok"))
    result = world.run("run", "write it")
    assert result.returncode == 0, result.stderr
    assert (world.project / "out.txt").exists()
    assert re.search(r"session: ses_\w+", result.stdout)


def test_hooks_run_in_the_os_sandbox_unless_told_otherwise(world: CliWorld) -> None:
    from soong_agent.adapters.ossandbox import probe_host

    if not any(status.works for status in probe_host().statuses):
        pytest.skip("no OS sandbox works on this host")
    outside = world.home.parent / "hook-was-here.txt"
    writer = script(world, "writer", f"open({str(outside)!r}, 'w').write('x')\n")
    write_hooks(world, {"session_start": [{"command": writer}]})
    world.server.enqueue(text_response("done"), text_response("done"))
    sandboxed = world.run("run", "hi")
    assert sandboxed.returncode == 0, sandboxed.stderr
    assert not outside.exists()  # the sandbox refused the write outside the project
    assert "session_start hook failed" in sandboxed.stderr
    add_config(world, "[hooks]\nsandboxed = false\n")
    plain = world.run("run", "hi")
    assert plain.returncode == 0, plain.stderr
    assert outside.read_text(encoding="utf-8") == "x"
