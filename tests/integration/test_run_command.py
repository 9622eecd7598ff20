"""The run_command tool over the real SubprocessRunner: env, caps, timeouts, cancel, describe."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from soong_agent.adapters.inmemory.filesystem import InMemoryFileSystem
from soong_agent.adapters.process import SubprocessRunner
from soong_agent.application.tools.base import Tool, ToolContext, ToolOutput
from soong_agent.application.tools.shell import (
    RunCommandArgs,
    command_env,
    command_summary,
    run_command_tool,
)
from soong_agent.domain.config.schema import ToolsConfig

pytestmark = pytest.mark.skipif(not os.access("/bin/bash", os.X_OK), reason="needs /bin/bash")

CTX = ToolContext(fs=InMemoryFileSystem(), session_id="s1", run_id="r1")
PARENT_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": "/home/someone",
    "TERM": "xterm",
    "SOONG_VISIBLE": "yes-visible",
    "SOONG_CANARY_SECRET": "canary-7d1c",
    "OPENAI_API_KEY": "sk-canary-0b3a",
    "GITHUB_TOKEN": "ghp-canary-55aa",
    "MY_PROVIDER_KEY": "provider-canary-9e2f",
}


def make_tool(
    project: Path,
    *,
    base_env: Mapping[str, str] = PARENT_ENV,
    secret_names: tuple[str, ...] = (),
    **tools: Any,
) -> Tool:
    return run_command_tool(
        runner=SubprocessRunner(),
        project=str(project),
        tools=ToolsConfig(**tools),
        base_env=base_env,
        secret_names=secret_names,
    )


async def call(tool: Tool, **args: Any) -> ToolOutput:
    return await asyncio.wait_for(tool.handler(tool.args_model.model_validate(args), CTX), 60)


async def test_exit_code_and_output_sections(tmp_path: Path) -> None:
    tool = make_tool(tmp_path)
    out = await call(tool, command="echo hello; echo warn >&2; exit 4")
    assert out.is_error
    assert out.content == "exit code 4\n--- stdout ---\nhello\n--- stderr ---\nwarn"
    ok = await call(tool, command="true")
    assert not ok.is_error
    assert ok.content == "exit code 0\n(no output)"


async def test_runs_in_the_project_folder(tmp_path: Path) -> None:
    (tmp_path / "here.txt").write_text("x")
    out = await call(make_tool(tmp_path), command="pwd; ls")
    assert out.content.splitlines()[2:4] == [str(tmp_path.resolve()), "here.txt"]


async def test_environment_is_allow_listed_and_never_has_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOONG_CANARY_SECRET", "canary-7d1c")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-canary-0b3a")
    tool = make_tool(
        tmp_path,
        base_env=os.environ | PARENT_ENV,
        secret_names=("MY_PROVIDER_KEY",),
        env_allowlist=[
            "PATH",
            "SOONG_VISIBLE",
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "MY_PROVIDER_KEY",
            "SOONG_CANARY_SECRET",
        ],
    )
    out = await call(tool, command="env")
    assert not out.is_error
    lines = set(out.content.splitlines())
    for leaked in ("canary-7d1c", "sk-canary", "ghp-canary", "provider-canary"):
        assert leaked not in out.content
    for name in ("SOONG_CANARY_SECRET", "OPENAI_API_KEY", "GITHUB_TOKEN", "MY_PROVIDER_KEY"):
        assert not any(line.startswith(f"{name}=") for line in lines)
    assert "SOONG_VISIBLE=yes-visible" in lines
    assert f"PATH={PARENT_ENV['PATH']}" in lines
    assert "HOME=/home/someone" in lines  # a minimal HOME and LANG even when not allow-listed
    assert "LANG=C.UTF-8" in lines
    assert "TERM=xterm" not in lines


def test_command_env_defaults() -> None:
    env = command_env({}, ["PATH", "HOME", "LANG"], home="/proj")
    assert env == {"PATH": "/usr/bin:/bin", "HOME": "/proj", "LANG": "C.UTF-8"}
    kept = command_env({"LANG": "de_DE.UTF-8", "PATH": "/x"}, ["LANG"])
    assert kept["LANG"] == "de_DE.UTF-8"
    assert kept["PATH"] == "/x"
    secret = command_env({"API_KEY": "k", "x_token": "t", "A": "a"}, ["API_KEY", "x_token", "A"])
    assert "API_KEY" not in secret and "x_token" not in secret and secret["A"] == "a"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (".:/usr/bin:/bin", "/usr/bin:/bin"),
        ("/usr/bin::/bin:", "/usr/bin:/bin"),
        ("bin:./node_modules/.bin:/opt/x/bin", "/opt/x/bin"),
        ("~/bin:/usr/bin", "/usr/bin"),
        (".:bin", "/usr/bin:/bin"),  # nothing absolute is left: the default
        ("/a:/b:/a", "/a:/b:/a"),  # the user's order and repeats stay
    ],
)
def test_command_env_keeps_only_absolute_path_entries(path: str, expected: str) -> None:
    assert command_env({"PATH": path}, ["PATH"])["PATH"] == expected
    assert command_env({"PATH": path}, [])["PATH"] == expected  # PATH added when not listed


def test_command_env_drops_what_changes_a_line_after_the_check() -> None:
    base = {"CDPATH": "/elsewhere", "GIT_LITERAL_PATHSPECS": "1", "GIT_NOGLOB_PATHSPECS": "1"}
    env = command_env({**base, "A": "a"}, [*base, "A"])
    assert not set(base) & set(env) and env["A"] == "a"


async def test_a_planted_program_in_the_folder_never_runs(tmp_path: Path) -> None:
    planted = tmp_path / "ls"
    planted.write_text("#!/bin/sh\necho PLANTED\n")
    planted.chmod(0o755)
    tool = make_tool(tmp_path, base_env={"PATH": f".::{os.environ.get('PATH', '/usr/bin')}"})
    out = await call(tool, command="ls && echo PATH=$PATH")
    assert "PLANTED" not in out.content
    assert "PATH=/" in out.content and "PATH=." not in out.content


async def test_output_caps_are_marked(tmp_path: Path) -> None:
    tool = make_tool(tmp_path, stdout_limit_bytes=1000, stderr_limit_bytes=300)
    out = await call(tool, command="yes | head -c 5000000; yes e | head -c 2000000 >&2")
    assert not out.is_error
    stdout = out.content.split("--- stdout ---\n", 1)[1].split("\n[stdout cut", 1)[0]
    assert len(stdout) == 999  # 1000 bytes kept, the final newline dropped in the text
    assert "[stdout cut: 4999000 more bytes]" in out.content
    assert "[stderr cut: 1999700 more bytes]" in out.content


async def test_timeout_kills_the_group_and_says_so(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    tool = make_tool(tmp_path)
    started = time.monotonic()
    out = await call(tool, command=f"(sleep 2; touch {marker}) & sleep 30", timeout_ms=500)
    assert time.monotonic() - started < 15
    assert out.is_error
    assert out.content.startswith("killed after timeout of 0.5 s")
    await asyncio.sleep(3)
    assert not marker.exists()


async def test_timeout_above_the_maximum_is_clamped_and_stated(tmp_path: Path) -> None:
    tool = make_tool(tmp_path, default_timeout_ms=120_000, max_timeout_ms=400)
    started = time.monotonic()
    out = await call(tool, command="sleep 30", timeout_ms=900_000)
    assert time.monotonic() - started < 15
    assert out.content.splitlines()[:2] == [
        "killed after timeout of 0.4 s",
        "[timeout_ms 900000 is above the maximum of 400; the timeout was 0.4 s]",
    ]


async def test_default_timeout_is_capped_by_the_maximum(tmp_path: Path) -> None:
    tool = make_tool(tmp_path, default_timeout_ms=120_000, max_timeout_ms=300)
    out = await call(tool, command="sleep 30")
    assert out.content.startswith("killed after timeout of 0.3 s")
    assert "above the maximum" not in out.content


async def test_cancel_kills_the_command(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    started = tmp_path / "started"
    tool = make_tool(tmp_path)
    task = asyncio.create_task(
        call(tool, command=f"(sleep 2; touch {marker}) & touch {started}; sleep 30")
    )
    deadline = time.monotonic() + 10
    while not started.exists():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(3)
    assert not marker.exists()


async def test_missing_project_folder_is_an_error_result(tmp_path: Path) -> None:
    out = await call(make_tool(tmp_path / "gone"), command="true")
    assert out.is_error
    assert out.content.startswith("the command could not be started")


def test_spec_describe_and_permission_class(tmp_path: Path) -> None:
    tool = make_tool(tmp_path)
    assert tool.name == "run_command"
    assert tool.permission_class == "exec"
    assert set(tool.spec.parameters["properties"]) == {"command", "timeout_ms", "description"}
    args = RunCommandArgs.model_validate({"command": "  git   status --short\necho more"})
    scope, summary = tool.describe(args, CTX)
    assert scope == "git status"
    assert summary == "run: git   status --short …"
    long = "x" * 300
    assert len(command_summary(long)) == len("run: ") + 120
    assert tool.describe(RunCommandArgs(command="ls"), CTX) == ("ls", "run: ls")


async def test_without_bash_the_call_says_so_and_runs_nothing(tmp_path: Path) -> None:
    from soong_agent.testing import ScriptedProcessRunner

    runner = ScriptedProcessRunner()
    runner.missing.add("bash")
    tool = run_command_tool(
        runner=runner, project=str(tmp_path), tools=ToolsConfig(), base_env=PARENT_ENV
    )
    out = await call(tool, command="echo hi")
    assert out.is_error and out.content == "bash was not found on this system."
    assert runner.calls == []
