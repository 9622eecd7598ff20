"""Declarative tools (TOOL-3): real JSON files in a temp home, real processes, no shell."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from soong_agent.adapters.declarative.loader import (
    load_declarative_tools,
    load_enabled_declarative_tools,
)
from soong_agent.application.tools.base import Tool, ToolContext, ToolOutput
from soong_agent.application.tools.catalog import apply_tool_config
from soong_agent.application.tools.declarative import (
    add_declarative_tools,
    build_argv,
    declarative_tool,
)
from soong_agent.application.tools.files import file_tools
from soong_agent.domain.config.schema import ToolOverride, ToolsConfig
from soong_agent.ports.events import ToolResultEvent
from soong_agent.ports.process import ProcessResult
from soong_agent.ports.tools import DeclarativeToolSpec
from soong_agent.testing import (
    InMemoryFileSystem,
    RecordingApprover,
    ScriptedModel,
    ScriptedResponse,
)
from tests.support.harness import Harness

PY = sys.executable
# Prints its arguments and working folder as JSON, so the test sees the exact argv.
ECHO_ARGV = "import json, os, sys; print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd()}))"
ECHO_ENV = "import json, os; print(json.dumps(sorted(os.environ)))"


@dataclass
class ExecRunner:
    """A minimal ProcessRunner for these tests: exec without a shell, own process group."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    def find_program(self, name: str) -> str | None:
        return shutil.which(name)

    async def run(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        timeout_s: float,
        stdout_limit: int,
        stderr_limit: int,
        stdin: bytes | None = None,
    ) -> ProcessResult:
        self.calls.append(
            {"argv": list(argv), "cwd": cwd, "env": dict(env), "timeout_s": timeout_s}
        )
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            env=dict(env),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            return ProcessResult(exit_code=None, stdout="", stderr="", timed_out=True)
        return ProcessResult(
            exit_code=proc.returncode,
            stdout=out[:stdout_limit].decode(errors="replace"),
            stderr=err[:stderr_limit].decode(errors="replace"),
            stdout_truncated=max(0, len(out) - stdout_limit),
            stderr_truncated=max(0, len(err) - stderr_limit),
        )


def write_tool(tools_dir: Path, file: str, definition: Any) -> Path:
    tools_dir.mkdir(parents=True, exist_ok=True)
    path = tools_dir / file
    text = definition if isinstance(definition, str) else json.dumps(definition)
    path.write_text(text, encoding="utf-8")
    return path


def echo_definition(name: str = "echo_args", **changes: Any) -> dict[str, Any]:
    definition: dict[str, Any] = {
        "name": name,
        "description": "Echo the arguments back.",
        "parameters": {
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "Text to echo."},
                "count": {"type": "integer", "minimum": 1, "default": 2},
                "loud": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["text"],
        },
        "command": [PY, "-c", ECHO_ARGV, "--text", "{text}", "{count}", "{loud}", "{tags}"],
        "permission_class": "read_only",
        "timeout_ms": 20_000,
    }
    definition.update(changes)
    return definition


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    return tmp_path / "project"


def ctx() -> ToolContext:
    return ToolContext(fs=InMemoryFileSystem(), session_id="s1", run_id="r1")


def only_spec(tools_dir: Path) -> DeclarativeToolSpec:
    specs, problems = load_declarative_tools(tools_dir)
    assert problems == []
    assert len(specs) == 1
    return specs[0]


def build(
    spec: DeclarativeToolSpec, runner: ExecRunner, project: Path, config: ToolsConfig | None = None
) -> Tool:
    return declarative_tool(
        spec, runner=runner, project=str(project), tools=config or ToolsConfig(), env=os.environ
    )


async def call(tool: Tool, args: dict[str, Any]) -> ToolOutput:
    return await tool.handler(tool.args_model.model_validate(args), ctx())


def echoed(out: ToolOutput) -> dict[str, Any]:
    lines = out.content.splitlines()
    assert lines[0] == "exit code 0", out.content
    assert lines[1] == "--- stdout ---"
    result: dict[str, Any] = json.loads(lines[2])
    return result


def test_good_file_becomes_a_tool_with_the_declared_schema(home: Path, project: Path) -> None:
    path = write_tool(home / "tools", "echo.json", echo_definition())
    spec = only_spec(home / "tools")
    assert spec.source == str(path)
    assert spec.permission_class == "read_only"
    tool = build(spec, ExecRunner(), project)
    assert tool.name == "echo_args"
    assert tool.permission_class == "read_only"
    assert tool.timeout_ms == 20_000
    schema = tool.spec.parameters
    assert schema["type"] == "object"
    assert schema["required"] == ["text"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["text"] == {"type": "string", "description": "Text to echo."}
    assert schema["properties"]["count"] == {"type": "integer", "minimum": 1, "default": 2}
    assert tool.spec.description == "Echo the arguments back."


async def test_arguments_are_whole_argv_items_never_a_shell(home: Path, project: Path) -> None:
    write_tool(home / "tools", "echo.json", echo_definition())
    runner = ExecRunner()
    tool = build(only_spec(home / "tools"), runner, project)
    nasty = "a; rm -rf x $(touch marker) `touch marker2` | cat > out && echo hi"
    out = await call(tool, {"text": nasty, "count": 3, "loud": True, "tags": ["x y", "$(z)"]})
    assert not out.is_error
    got = echoed(out)
    assert got["argv"] == ["--text", nasty, "3", "true", '["x y", "$(z)"]']
    assert Path(got["cwd"]).resolve() == project.resolve()
    assert sorted(p.name for p in project.iterdir()) == []
    assert not (Path.cwd() / "marker").exists()
    assert runner.calls[0]["cwd"] == str(project)
    assert runner.calls[0]["timeout_s"] == 20.0


async def test_absent_optional_arguments_drop_their_item_and_defaults_fill_in(
    home: Path, project: Path
) -> None:
    write_tool(home / "tools", "echo.json", echo_definition())
    tool = build(only_spec(home / "tools"), ExecRunner(), project)
    out = await call(tool, {"text": ""})
    assert echoed(out)["argv"] == ["--text", "", "2"]
    out = await call(tool, {"text": "x", "loud": False, "tags": []})
    assert echoed(out)["argv"] == ["--text", "x", "2", "false", "[]"]


async def test_a_failing_command_reports_exit_code_and_stderr(home: Path, project: Path) -> None:
    definition = echo_definition(
        "fails",
        parameters={"type": "object", "properties": {}},
        command=[PY, "-c", "import sys; print('out'); sys.exit('broken: ' + 'bad')"],
    )
    write_tool(home / "tools", "fails.json", definition)
    tool = build(only_spec(home / "tools"), ExecRunner(), project)
    out = await call(tool, {})
    assert out.is_error
    assert out.content.splitlines() == [
        "exit code 1",
        "--- stdout ---",
        "out",
        "--- stderr ---",
        "broken: bad",
    ]


async def test_output_is_cut_at_the_limits_and_marked(home: Path, project: Path) -> None:
    definition = echo_definition(
        "chatty",
        parameters={"type": "object", "properties": {}},
        command=[PY, "-c", "print('x' * 5000)"],
    )
    write_tool(home / "tools", "chatty.json", definition)
    config = ToolsConfig(stdout_limit_bytes=100)
    tool = build(only_spec(home / "tools"), ExecRunner(), project, config)
    out = await call(tool, {})
    assert not out.is_error
    assert out.content.splitlines()[2] == "x" * 100
    assert "[stdout cut: 4901 more bytes]" in out.content


async def test_timeout_kills_and_is_an_error(home: Path, project: Path) -> None:
    definition = echo_definition(
        "sleepy",
        parameters={"type": "object", "properties": {}},
        command=[PY, "-c", "import time; time.sleep(30)"],
        timeout_ms=300,
    )
    write_tool(home / "tools", "sleepy.json", definition)
    tool = build(only_spec(home / "tools"), ExecRunner(), project)
    out = await asyncio.wait_for(call(tool, {}), 10)
    assert out.is_error
    assert out.content.startswith("killed after timeout of 0.3 s")


async def test_env_is_the_allowlist_without_secrets(home: Path, project: Path) -> None:
    definition = echo_definition(
        "env_dump", parameters={"type": "object", "properties": {}}, command=[PY, "-c", ECHO_ENV]
    )
    write_tool(home / "tools", "env.json", definition)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin"),
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "OPENAI_API_KEY": "sk-canary",
        "GITHUB_TOKEN": "ghp-canary",
        "MY_KEY_VAR": "profile-key",
        "UNLISTED": "x",
    }
    allow = ["PATH", "LANG", "TZ", "OPENAI_API_KEY", "GITHUB_TOKEN", "MY_KEY_VAR"]
    config = ToolsConfig(env_allowlist=allow)
    runner = ExecRunner()
    tool = declarative_tool(
        only_spec(home / "tools"),
        runner=runner,
        project=str(project),
        tools=config,
        env=env,
        secret_names=["MY_KEY_VAR"],
    )
    out = await call(tool, {})
    seen = set(json.loads(out.content.splitlines()[2]))
    assert {"PATH", "LANG", "TZ"} <= seen
    assert not seen & {"OPENAI_API_KEY", "GITHUB_TOKEN", "MY_KEY_VAR", "UNLISTED"}
    assert "sk-canary" not in runner.calls[0]["env"].values()


async def test_bad_arguments_go_back_to_the_model_as_tool_results(
    home: Path, project: Path
) -> None:
    write_tool(home / "tools", "echo.json", echo_definition(permission_class="exec"))
    tool = build(only_spec(home / "tools"), ExecRunner(), project)
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("echo_args", {"count": 2})),
            ScriptedResponse.tool_calls(("echo_args", {"text": "a", "count": "many"})),
            ScriptedResponse.tool_calls(("echo_args", {"text": "a", "extra": 1})),
            ScriptedResponse.tool_calls(("echo_args", {"text": "a", "count": 0})),
            ScriptedResponse.tool_calls(("echo_args", {"text": "ok"})),
            ScriptedResponse.text("done"),
        ]
    )
    h = Harness(model, approver=RecordingApprover(["allow_once"]), extra_tools=[tool])
    run = await h.service.start("use the tool")
    events = [e async for e in run.events()]
    result = await run.wait()
    assert result.status == "completed"
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert [r.is_error for r in results] == [True, True, True, True, False]
    assert results[0].content.startswith("invalid arguments for echo_args: text: Field required")
    assert "count: Input should be a valid integer" in results[1].content
    assert "extra: Extra inputs are not permitted" in results[2].content
    assert "count: Input should be greater than or equal to 1" in results[3].content
    assert '"argv": ["--text", "ok", "2"]' in results[4].content


def test_describe_shows_the_command_for_approval(home: Path, project: Path) -> None:
    write_tool(home / "tools", "echo.json", echo_definition())
    spec = only_spec(home / "tools")
    tool = build(spec, ExecRunner(), project)
    args = tool.args_model.model_validate({"text": "two words"})
    scope, summary = tool.describe(args, ctx())
    assert scope == "*"
    assert summary.startswith("run ") and "--text 'two words' 2" in summary
    assert build_argv(spec, args)[-2:] == ["two words", "2"]


BAD_FILES: dict[str, tuple[Any, str]] = {
    "a_invalid_json.json": ('{"name": "x",', "invalid JSON: "),
    "b_not_object.json": ("[1, 2]", "expected a JSON object, found an array"),
    "c_missing_name.json": (
        {"description": "d", "command": ["true"]},
        "name: expected a string, found null",
    ),
    "d_bad_name.json": (
        {"name": "Bad-Name", "description": "d", "command": ["true"]},
        "name: 'Bad-Name' must start with a lower-case letter",
    ),
    "e_spliced_placeholder.json": (
        echo_definition("spliced", command=["prog", "--x={text}", "{count}", "{loud}", "{tags}"]),
        "command[1]: '--x={text}': a placeholder must be a whole argv item",
    ),
    "f_unknown_placeholder.json": (
        echo_definition("unknown_ph", command=["prog", "{text}", "{nope}"]),
        "command[2]: placeholder '{nope}' names no declared parameter",
    ),
    "g_bad_permission.json": (
        echo_definition("bad_perm", permission_class="root"),
        'permission_class: expected one of read_only, write, exec, network, found "root"',
    ),
    "h_required_unknown.json": (
        echo_definition(
            "req_unknown",
            parameters={"type": "object", "properties": {}, "required": ["ghost"]},
            command=["prog"],
        ),
        "parameters.required: 'ghost' is not in parameters.properties",
    ),
    "i_bad_type.json": (
        echo_definition(
            "bad_type",
            parameters={"type": "object", "properties": {"o": {"type": "object"}}},
            command=["prog", "{o}"],
        ),
        "parameters.properties.o.type: expected one of string, integer, number, boolean, array",
    ),
    "j_empty_command.json": (
        echo_definition("no_cmd", command=[]),
        "command: expected a non-empty",
    ),
    "k_unused_param.json": (
        echo_definition("unused", command=["prog", "{text}"]),
        "parameters.properties.count: declared but not used in command",
    ),
    "l_bad_timeout.json": (
        echo_definition("bad_timeout", timeout_ms=0),
        "timeout_ms: expected a whole number of milliseconds > 0, found 0",
    ),
    "m_program_placeholder.json": (
        echo_definition(
            "prog_ph",
            parameters={"type": "object", "properties": {"p": {"type": "string"}}},
            command=["{p}"],
        ),
        "command[0]: the program itself cannot be a placeholder",
    ),
    "n_unknown_key.json": (
        echo_definition("typo", timeout=5),
        "unknown key 'timeout'",
    ),
    "o_schema_not_object.json": (
        echo_definition("arr_schema", parameters={"type": "array"}),
        'parameters.type: expected "object", found "array"',
    ),
    "p_bad_default.json": (
        echo_definition(
            "bad_default",
            parameters={"type": "object", "properties": {"n": {"type": "integer", "default": "1"}}},
            command=["prog", "{n}"],
        ),
        'parameters.properties.n.default: "1" is not integer',
    ),
}


def test_each_bad_file_is_reported_with_path_and_reason_and_good_ones_load(home: Path) -> None:
    tools_dir = home / "tools"
    paths = {file: write_tool(tools_dir, file, body) for file, (body, _) in BAD_FILES.items()}
    write_tool(tools_dir, "z_good.json", echo_definition())
    write_tool(tools_dir, "notes.txt", "not a tool")
    specs, problems = load_declarative_tools(tools_dir)
    assert [s.name for s in specs] == ["echo_args"]
    assert len(problems) == len(BAD_FILES)
    for problem, (file, (_, reason)) in zip(problems, BAD_FILES.items(), strict=True):
        assert problem.startswith(f"{paths[file]}: "), problem
        assert reason in problem, problem


def test_a_name_defined_twice_keeps_the_first_file(home: Path) -> None:
    tools_dir = home / "tools"
    write_tool(tools_dir, "a.json", echo_definition())
    later = write_tool(tools_dir, "b.json", echo_definition(description="Other."))
    specs, problems = load_declarative_tools(tools_dir)
    assert [s.description for s in specs] == ["Echo the arguments back."]
    assert problems == [
        f"{later}: name: tool 'echo_args' is already defined by {tools_dir / 'a.json'}; "
        "this file is skipped"
    ]


def test_missing_folder_is_no_problem_and_the_switch_turns_loading_off(home: Path) -> None:
    assert load_declarative_tools(home / "tools") == ([], [])
    write_tool(home / "tools", "echo.json", echo_definition())
    write_tool(home / "tools", "broken.json", "{")
    off = ToolsConfig(declarative_enabled=False)
    assert load_enabled_declarative_tools(home / "tools", off) == ([], [])
    specs, problems = load_enabled_declarative_tools(home / "tools", ToolsConfig())
    assert [s.name for s in specs] == ["echo_args"]
    assert len(problems) == 1


async def test_built_in_names_win_and_config_applies_to_declarative_tools(
    home: Path, project: Path
) -> None:
    tools_dir = home / "tools"
    clash = write_tool(tools_dir, "clash.json", echo_definition("read_file"))
    write_tool(tools_dir, "echo.json", echo_definition())
    write_tool(
        tools_dir,
        "other.json",
        echo_definition("other_echo", parameters={"type": "object"}, command=[PY, "-c", "0"]),
    )
    specs, problems = load_declarative_tools(tools_dir)
    assert problems == []
    config = ToolsConfig(
        disabled=["other_echo", "glob"],
        overrides={
            "echo_args": ToolOverride(
                description="Custom echo.", timeout_ms=4_000, permission_class="exec"
            )
        },
    )
    runner = ExecRunner()
    tools, problems = add_declarative_tools(
        file_tools(), specs, runner=runner, project=str(project), config=config, env=os.environ
    )
    assert problems == [f"{clash}: name: 'read_file' is already a tool; this definition is skipped"]
    tools, warnings = apply_tool_config(tools, config)
    assert warnings == []
    by_name = {t.name: t for t in tools}
    assert "glob" not in by_name and "other_echo" not in by_name
    echo = by_name["echo_args"]
    assert echo.description == "Custom echo."
    assert echo.permission_class == "exec"
    assert echo.timeout_ms == 4_000
    await call(echo, {"text": "t"})
    assert runner.calls[0]["timeout_s"] == 4.0
    assert by_name["read_file"].handler is file_tools()[0].handler


async def test_a_missing_program_or_nul_argument_is_an_error_result(
    home: Path, project: Path
) -> None:
    definition = echo_definition(
        "missing_prog",
        parameters={"type": "object", "properties": {"a": {"type": "string"}}},
        command=[str(project / "no-such-program"), "{a}"],
    )
    write_tool(home / "tools", "missing.json", definition)
    runner = ExecRunner()
    tool = build(only_spec(home / "tools"), runner, project)
    out = await call(tool, {"a": "x"})
    assert out.is_error
    assert "could not be started" in out.content
    out = await call(tool, {"a": "x\x00y"})
    assert out.is_error
    assert "NUL" in out.content
    assert len(runner.calls) == 1
