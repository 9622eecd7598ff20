"""What a long-lived runtime builds once and reuses run after run (issue 10: per-run fixed
cost) is rebuilt when what it depends on changed: an edited instruction file, a changed tool
set, MCP tools arriving, a deferred tool loaded, new memories, a changed task board."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from soong_agent import AgentRuntime
from soong_agent.adapters.system import context_source
from soong_agent.adapters.system.context_source import FileContextSource
from soong_agent.application.context.compaction_requests import CompactionRequests
from soong_agent.application.mcp.tools import RunTools
from soong_agent.application.runs.assembler import RunAssembler, RunPolicies, RunPorts, RunSpec
from soong_agent.application.runs.loop import LoopSettings
from soong_agent.application.tools.base import Tool, ToolContext, ToolOutput, ToolRegistry
from soong_agent.domain.prompt import (
    DEFERRED,
    assemble_system_prompt,
    fit_instructions,
    tools_section,
)
from soong_agent.ports.mcp import McpTool
from soong_agent.ports.model import ToolSpec
from soong_agent.ports.prompt import EnvironmentInfo, InstructionDoc
from soong_agent.testing import (
    InMemoryFileSystem,
    InMemorySessionStore,
    ScriptedMcpHub,
    ScriptedMcpServer,
    ScriptedModel,
    ScriptedResponse,
    StaticContextSource,
    write_minimal_config,
)
from tests.support.harness import Harness

HOUR_AGO = time.time() - 3600


class NoArgs(BaseModel):
    pass


async def nothing(args: Any, ctx: ToolContext) -> ToolOutput:
    return ToolOutput("ok")


def tool(name: str, description: str = "Does a thing.", *, deferrable: bool = False) -> Tool:
    return Tool(name, description, NoArgs, nothing, deferrable=deferrable)


def system_text(request: Any) -> str:
    return "\n\n".join(part.text for part in request.system)


def settled(path: Path, text: str) -> None:
    """Write `text` to `path` as if it had been written an hour ago (so it may be cached)."""
    path.write_text(text, encoding="utf-8")
    os.utime(path, (HOUR_AGO, HOUR_AGO))


# --- instruction files ---------------------------------------------------------------------------


async def test_an_edited_agents_md_shows_in_the_next_run_of_one_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(context_source, "_SETTLED_NS", 0)  # files are cached at once
    home, project = tmp_path / "home", tmp_path / "project"
    write_minimal_config(home)
    project.mkdir()
    agents = project / "AGENTS.md"
    settled(agents, "Rule one: use tabs.")
    model = ScriptedModel(default=ScriptedResponse.text("done"))
    async with AgentRuntime(project, home, model=model) as runtime:
        for _ in range(2):
            await (await runtime.run("go")).wait()
        agents.write_text("Rule two: use dots.", encoding="utf-8")  # same size
        await (await runtime.run("go")).wait()
        agents.unlink()
        (home / "CLAUDE.md").write_text("Home rule: be brief.", encoding="utf-8")
        await (await runtime.run("go")).wait()
    first, second, edited, last = (system_text(c) for c in model.calls)
    assert "Rule one: use tabs." in first and "Rule one: use tabs." in second
    assert "Rule two: use dots." in edited and "Rule one" not in edited
    assert "Rule two" not in last and "Home rule: be brief." in last


def test_an_unchanged_file_is_not_read_again_and_a_changed_one_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a file changed in the last two seconds is always read (see the next test); its change
    # time cannot be set back, so here every file counts as settled at once
    monkeypatch.setattr(context_source, "_SETTLED_NS", 0)
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    rules = home / "rules"
    rules.mkdir()
    settled(project / "CLAUDE.md", "Project rule.")
    source = FileContextSource(home=home, project=project)
    first = source.instructions()
    assert [d.text for d in first] == ["Project rule."]
    assert source.instructions()[0] is first[0]  # remembered while its stat is the same
    settled(rules / "style.md", "Style rule.")  # a new rule file joins
    assert [d.text for d in source.instructions()] == ["Style rule.", "Project rule."]
    settled(project / "CLAUDE.md", "Project rule, edited.")
    assert [d.text for d in source.instructions()][-1] == "Project rule, edited."


def test_a_file_written_moments_ago_is_read_every_time(tmp_path: Path) -> None:
    """Two writes of the same size within one tick of the file system's clock have the same
    stat: a file that changed in the last moments is never taken from the cache."""
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    project.mkdir()
    agents = project / "AGENTS.md"
    agents.write_text("version A", encoding="utf-8")
    stamp = os.stat(agents)
    source = FileContextSource(home=home, project=project)
    assert source.instructions()[0].text == "version A"
    agents.write_text("version B", encoding="utf-8")
    os.utime(agents, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # the same stat as before
    assert source.instructions()[0].text == "version B"


def test_folder_files_follow_their_edits(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir()
    (project / "pkg").mkdir(parents=True)
    settled(project / "pkg" / "AGENTS.md", "Package rule.")
    source = FileContextSource(home=home, project=project)
    assert [d.text for d in source.folder_instructions("pkg")] == ["Package rule."]
    settled(project / "pkg" / "AGENTS.md", "Package rule, new.")
    (found,) = source.folder_instructions("pkg")
    assert (found.text, found.folder, found.source) == (
        "Package rule, new.",
        "pkg",
        "<project>/pkg/AGENTS.md",
    )
    (project / "pkg" / "AGENTS.md").unlink()
    assert source.folder_instructions("pkg") == []


def test_a_chain_cut_to_the_budget_follows_the_budget_and_the_documents() -> None:
    docs = [InstructionDoc("a", "alpha " * 200), InstructionDoc("b", "beta " * 200)]

    def count(text: str) -> int:
        return len(text) // 4

    small, large = fit_instructions(docs, 150, count), fit_instructions(docs, 300, count)
    assert fit_instructions(docs, 150, count) == small  # the same cut again
    assert small != large
    assert sum(len(d.text) for d in small) < sum(len(d.text) for d in large)
    other = [InstructionDoc("a", "gamma " * 200), docs[1]]
    assert "gamma" in fit_instructions(other, 300, count)[0].text or "truncated" in (
        fit_instructions(other, 300, count)[0].text
    )
    assert fit_instructions(docs, 10_000, count) == docs


# --- tools ---------------------------------------------------------------------------------------


def assembler(**kw: Any) -> RunAssembler:
    ports = RunPorts(
        provider=ScriptedModel(),
        store=InMemorySessionStore(),
        fs=InMemoryFileSystem(),
        context=StaticContextSource(),
        clock=Harness(ScriptedModel()).clock,
        ids=Harness(ScriptedModel()).ids,
    )
    return RunAssembler(ports, RunPolicies(defer_threshold=3), **kw)


def prompt_of(a: RunAssembler, spec: RunSpec, **kw: Any) -> tuple[str, list[str]]:
    """The system prompt of a run of `spec` and the names its request carries."""
    run_tools = RunTools(
        a.tools_of(spec, CompactionRequests()), None, defer_threshold=a.policies.defer_threshold
    )
    parts = a.system_prompt(run_tools, **kw)
    return "\n\n".join(p.text for p in parts), [s.name for s in run_tools.request_specs()]


def test_a_tool_added_to_the_runtime_shows_in_the_next_run() -> None:
    registry = ToolRegistry([tool("alpha")])
    spec = RunSpec(tools=registry, settings=LoopSettings(model_label="m"))
    a = assembler()
    text, sent = prompt_of(a, spec)
    assert "- alpha:" in text and "- beta:" not in text and sent == ["alpha", "compact"]
    registry.add(tool("beta", "Does another thing."))
    text, sent = prompt_of(a, spec)
    assert "- beta: Does another thing." in text and sent == ["alpha", "beta", "compact"]
    registry.replace_all([tool("gamma")])
    text, sent = prompt_of(a, spec)
    assert "- alpha:" not in text and sent == ["gamma", "compact"]


def test_deferral_and_a_loaded_tool_show_where_they_should() -> None:
    registry = ToolRegistry([tool("alpha"), tool("beta"), tool("late", deferrable=True)])
    spec = RunSpec(tools=registry, settings=LoopSettings(model_label="m"))
    a = assembler()
    tools = a.tools_of(spec, CompactionRequests())
    first = RunTools(tools, None, defer_threshold=3)
    assert first.deferred == {"late"}
    marked = {s.name: s.description for s in first.catalogue()}
    assert marked["late"].startswith(DEFERRED)
    assert "late" not in [s.name for s in first.request_specs()]
    first.loaded.add("late")  # what tool_search does
    assert not {s.name: s.description for s in first.catalogue()}["late"].startswith(DEFERRED)
    assert "late" in [s.name for s in first.request_specs()]
    again = RunTools(a.tools_of(spec, CompactionRequests()), None, defer_threshold=3)
    assert "late" not in [s.name for s in again.request_specs()]  # another run: not loaded
    wide = RunTools(a.tools_of(spec, CompactionRequests()), None, defer_threshold=10)
    assert wide.deferred == set() and "late" in [s.name for s in wide.request_specs()]


def test_the_tools_section_follows_names_and_descriptions() -> None:
    one = [ToolSpec("a", "First.", {}), ToolSpec("b", "Second.", {})]
    assert tools_section(one) == "Available tools:\n- a: First.\n- b: Second."
    assert tools_section(one) is tools_section(list(one))
    two = [ToolSpec("a", "First.", {}), ToolSpec("b", "Second, changed.", {})]
    assert tools_section(two).endswith("- b: Second, changed.")
    assert tools_section([]) == "No tools are available in this run."


def test_registry_copies_are_independent() -> None:
    base = ToolRegistry([tool("alpha")])
    specs = base.specs()
    longer = base.extended([tool("beta")])
    assert [s.name for s in longer.specs()] == ["alpha", "beta"]
    assert base.specs() is specs and base.names() == ["alpha"]
    held = ToolRegistry()
    held.replace_all(longer)
    longer.add(tool("gamma"))
    assert held.names() == ["alpha", "beta"]
    assert [s.name for s in longer.specs()] == ["alpha", "beta", "gamma"]
    try:
        base.extended([tool("alpha")])
    except ValueError as exc:
        assert "'alpha' is registered twice" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("a taken name was accepted")
    try:
        ToolRegistry([tool("x"), tool("y"), tool("x")])
    except ValueError as exc:
        assert "'x' is registered twice" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("a taken name was accepted")


async def test_mcp_tools_arriving_between_runs_show_in_the_next_run() -> None:
    first = McpTool("srv", "first", "The first tool.", {"type": "object"})
    hub = ScriptedMcpHub([ScriptedMcpServer("srv", tools=[first])])
    model = ScriptedModel(default=ScriptedResponse.text("ok"))
    h = Harness(model, mcp=hub)
    hub.start()
    for _ in range(2):
        await (await h.service.start("go")).wait()
    hub.set_tools("srv", [first, McpTool("srv", "second", "The second tool.", {})])
    await (await h.service.start("go")).wait()
    names = [[t.name for t in call.tools] for call in model.calls]
    assert "mcp__srv__first" in names[0] and "mcp__srv__second" not in names[1]
    assert "mcp__srv__second" in names[2]
    assert "- mcp__srv__second: The second tool." in system_text(model.calls[2])
    await hub.aclose()


# --- per-run sections ----------------------------------------------------------------------------


def test_memory_and_the_task_board_are_read_for_every_prompt() -> None:
    board = ["Task one: open."]
    a = assembler(task_board=lambda session: board[0])
    spec = RunSpec(tools=ToolRegistry([tool("alpha")]), settings=LoopSettings(model_label="m"))
    text, _ = prompt_of(a, spec, memory="Remembered: blue.", session_id="ses_1")
    assert "Remembered: blue." in text and "Task one: open." in text
    board[0] = "Task one: done."
    text, _ = prompt_of(a, spec, memory="Remembered: green.", session_id="ses_1")
    assert "Remembered: green." in text and "Task one: done." in text
    assert "blue" not in text and "open" not in text


def test_the_environment_part_follows_the_facts() -> None:
    def environment(date: str) -> str:
        parts = assemble_system_prompt(
            tools=[],
            instructions=[],
            environment=EnvironmentInfo(cwd="/p", platform="x", date=date),
        )
        return parts[-1].text

    assert "- date: 2025-01-01" in environment("2025-01-01")
    assert "- date: 2025-01-02" in environment("2025-01-02")
    assert "- date: 2025-01-01" in environment("2025-01-01")
