"""The fuzzer's cases of issue 39, one by one, through the SDK over a real project folder and a
real SQLite session store: each bad call gets a clear error result (never `tool_crash`, never
an internal error), the run completes, and the session resumes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from soong_agent import AgentRuntime
from soong_agent.ports.events import ErrorEvent, RunEvent, ToolCallRequested, ToolResultEvent
from soong_agent.ports.messages import ToolCallBlock
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config

pytestmark = pytest.mark.asyncio


@pytest.fixture
def home(tmp_path: Path) -> Path:
    write_minimal_config(tmp_path / "home")
    return tmp_path / "home"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    with open(os.path.join(os.fsencode(root), b"caf\xe9.txt"), "wb") as f:
        f.write(b"caf\xc3\xa9 au lait\n")
    os.mkdir(os.path.join(os.fsencode(root), b"d\xe9j\xe0"))
    return root


async def run_calls(
    home: Path, project: Path, *calls: tuple[str, Any] | ToolCallBlock
) -> tuple[list[RunEvent], list[ToolResultEvent], str]:
    model = ScriptedModel(
        [ScriptedResponse.tool_calls(*calls)],
        default=ScriptedResponse.text("done"),  # (and the summary, should the context compact)
        unique_call_ids=False,
    )
    async with AgentRuntime(project, home, lambda request: "allow_once", model=model) as runtime:
        run = await runtime.run("go")
        events = [e async for e in run.events()]
        result = await run.wait()
        assert result.status == "completed", result.reason
        [stored] = await runtime.session_runs(run.session_id)
        assert stored.status == "completed"
        again_model = ScriptedModel([ScriptedResponse.text("again")])
    async with AgentRuntime(project, home, model=again_model) as runtime:
        again = await (await runtime.run("more", session_id=run.session_id)).wait()
        assert again.status == "completed", again.reason
    assert not [e for e in events if isinstance(e, ErrorEvent) and e.kind == "tool_crash"]
    # in the order of the calls: read-only calls run at once and may end in any order
    order: dict[str, int] = {}
    for event in events:
        if isinstance(event, ToolCallRequested):
            order.setdefault(event.call_id, len(order))
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    results.sort(key=lambda r: order.get(r.call_id, len(order)))
    return events, results, run.session_id


async def test_arguments_nested_5000_deep_get_a_clear_argument_error(
    home: Path, project: Path
) -> None:
    deep = '{"path": ' + "[" * 5000 + "]" * 5000 + "}"
    _, [result], _ = await run_calls(home, project, ("read_file", deep))
    assert result.is_error
    assert (
        result.content
        == "arguments are nested too deeply to read (objects or arrays inside each other)"
    )


async def test_an_escaped_lone_surrogate_in_a_path_or_content_is_refused(
    home: Path, project: Path
) -> None:
    _, results, _ = await run_calls(
        home,
        project,
        ("read_file", '{"path": "a\\ud800.txt"}'),
        ("write_file", '{"path": "new.txt", "content": "x\\udfff"}'),
    )
    assert [r.is_error for r in results] == [True, True]
    for r in results:
        assert "lone surrogate" in r.content and "did not run" in r.content
    assert not (project / "new.txt").exists()


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        ("glob", {"pattern": "*.py\x00"}, "pattern"),
        ("grep", {"pattern": "a\x00b"}, "pattern"),
        ("grep", {"pattern": "a", "glob": "*\x00"}, "glob"),
        ("run_command", {"command": "echo a\x00b"}, "command"),
    ],
)
async def test_a_nul_in_a_pattern_or_a_command_is_an_argument_error(
    home: Path, project: Path, name: str, arguments: dict[str, str], field: str
) -> None:
    _, [result], _ = await run_calls(home, project, (name, arguments))
    assert result.is_error
    assert result.content == (
        f"invalid arguments for {name}: {field}: holds a NUL character (\\x00), which it cannot"
    )


async def test_a_5_mb_value_is_written_whole(home: Path, project: Path) -> None:
    content = "x" * 5_000_000
    _, [result], _ = await run_calls(
        home, project, ("write_file", {"path": "big.txt", "content": content})
    )
    assert not result.is_error
    assert (project / "big.txt").stat().st_size == 5_000_000


async def test_an_unknown_huge_tool_name_is_told_back_short(home: Path, project: Path) -> None:
    _, [result], _ = await run_calls(home, project, ("no_such_tool" * 10_000, {}))
    assert result.is_error and result.content.startswith("unknown tool 'no_such_toolno_such")
    assert len(result.content) < 2_000


async def test_fifty_calls_and_duplicate_ids_each_get_one_result(home: Path, project: Path) -> None:
    calls = [
        ToolCallBlock(id=f"c{i % 25}", name="read_file", arguments=json.dumps({"path": f"m{i}"}))
        for i in range(50)
    ]
    _, results, _ = await run_calls(home, project, *calls)
    assert len(results) == 50
    assert len({r.call_id for r in results}) == 50  # a repeated id runs as a fresh one
    assert all(r.content.startswith("not found: m") for r in results)


async def test_non_utf8_names_are_listed_globbed_and_grepped_as_escapes(
    home: Path, project: Path
) -> None:
    _, results, _ = await run_calls(
        home,
        project,
        ("list_dir", {}),
        ("glob", {"pattern": "**/*"}),
        ("grep", {"pattern": "au lait"}),
    )
    listed, globbed, grepped = (r.content for r in results)
    assert "caf\\xe9.txt (14 bytes)" in listed and "d\\xe9j\\xe0/" in listed
    assert "caf\\xe9.txt" in globbed.splitlines()
    assert grepped == "caf\\xe9.txt:1: café au lait"


async def test_a_new_file_in_a_non_utf8_folder_is_written_through_its_escapes(
    home: Path, project: Path
) -> None:
    _, [result], _ = await run_calls(
        home, project, ("write_file", {"path": "d\\xe9j\\xe0/note.txt", "content": "hi"})
    )
    assert not result.is_error, result.content
    assert result.content == "created d\\xe9j\\xe0/note.txt (2 bytes)"
    with open(os.path.join(os.fsencode(project), b"d\xe9j\xe0", b"note.txt"), "rb") as f:
        assert f.read() == b"hi"


async def test_a_file_literally_named_like_an_escape_is_that_file(
    home: Path, project: Path
) -> None:
    (project / "caf\\xe9.txt").write_text("the literal one\n", encoding="utf-8")
    _, [result], _ = await run_calls(home, project, ("read_file", {"path": "caf\\xe9.txt"}))
    assert "the literal one" in result.content


async def test_after_a_refused_surrogate_the_name_the_reason_gives_works(
    home: Path, project: Path
) -> None:
    # the model spells the byte as Python carries it, is told to write \xe9, and does
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("read_file", '{"path": "caf\\udce9.txt"}')),
            ScriptedResponse.tool_calls(("read_file", '{"path": "caf\\\\xe9.txt"}')),
            ScriptedResponse.text("done"),
        ]
    )
    async with AgentRuntime(project, home, model=model) as runtime:
        run = await runtime.run("read it")
        events = [e async for e in run.events()]
        assert (await run.wait()).status == "completed"
    first, second = (e for e in events if isinstance(e, ToolResultEvent))
    assert first.is_error and "lone surrogate (U+DCE9)" in first.content
    assert "write \\xNN" in first.content or "written \\xNN" in first.content
    assert not second.is_error and "café au lait" in second.content
    called = [e for e in events if e.type == "tool_call_requested"]
    assert [json.loads(e.arguments)["path"] for e in called] == ["caf\\xe9.txt"] * 2
