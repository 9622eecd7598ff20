"""Folder instruction files (PROMPT-2): a folder's CLAUDE.md / AGENTS.md joins the system prompt
once the agent works under that folder, once, with an event; resume rebuilds the same prompt;
the whole chain is cut to the instruction budget, least specific source first, visibly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from soong_agent.application.context.instructions import (
    SKIPPED_KIND,
    FolderInstructions,
    call_path,
    folders_of,
)
from soong_agent.domain.config.schema import ContextConfig
from soong_agent.domain.prompt import fit_instructions, instructions_section, truncation_marker
from soong_agent.ports.events import ErrorEvent, InstructionsLoaded, RunEvent
from soong_agent.ports.messages import Message, ToolCallBlock, ToolResultBlock
from soong_agent.ports.prompt import InstructionDoc, SkippedInstruction
from soong_agent.testing import (
    InMemoryFileSystem,
    ScriptedModel,
    ScriptedResponse,
    StaticContextSource,
)
from tests.support.harness import Harness

PKG = "Package rule: every function in pkg is typed."
SUB = "Sub-package rule: no I/O in pkg/sub."
OTHER = "Other rule: docs only."
HOME = "Home rule: be brief."

FOLDERS: Mapping[str, Mapping[str, str]] = {
    "pkg": {"AGENTS.md": PKG},
    "pkg/sub": {"AGENTS.md": SUB},
    "other": {"CLAUDE.md": OTHER},
}
FILES: dict[str, str | bytes] = {
    "pkg/x.py": "x = 1\n",
    "pkg/sub/y.py": "y = 2\n",
    "other/z.md": "z\n",
    "top.py": "t = 0\n",
}


def harness(responses: list[ScriptedResponse], **kw: Any) -> Harness:
    source = StaticContextSource(
        [InstructionDoc("${SOONG_AGENT_HOME}/AGENTS.md", HOME)], folders=FOLDERS
    )
    return Harness(
        ScriptedModel(responses), fs=InMemoryFileSystem(dict(FILES)), context=source, **kw
    )


def call(name: str, **args: Any) -> ScriptedResponse:
    return ScriptedResponse.tool_calls((name, args))


def system_of(h: Harness, request: int) -> str:
    return "\n\n".join(part.text for part in h.model.calls[request].system)


async def run_all(h: Harness, message: str = "go", **kw: Any) -> tuple[Any, list[RunEvent]]:
    run = await h.service.start(message, **kw)
    events = [e async for e in run.events()]
    return await run.wait(), events


def loaded(events: list[RunEvent]) -> list[tuple[str, str, int]]:
    return [(e.path, e.folder, e.bytes) for e in events if isinstance(e, InstructionsLoaded)]


# --- in runs ---------------------------------------------------------------------------------


async def test_a_folder_file_joins_the_prompt_after_a_read_under_it() -> None:
    h = harness([call("read_file", path="pkg/x.py"), ScriptedResponse.text("done")])
    result, events = await run_all(h)
    assert result.status == "completed"
    assert HOME in system_of(h, 0)
    assert PKG not in system_of(h, 0)
    second = system_of(h, 1)
    assert PKG in second
    assert '<instructions source="<project>/pkg/AGENTS.md" folder="pkg">' in second
    assert second.index(HOME) < second.index(PKG)  # more specific: later
    assert loaded(events) == [("pkg/AGENTS.md", "pkg", len(PKG))]
    at = [type(e).__name__ for e in events]
    assert at.index("InstructionsLoaded") > at.index("ToolResultEvent")


async def test_a_nested_folder_loads_every_level_once_each() -> None:
    h = harness(
        [
            call("read_file", path="pkg/sub/y.py"),
            call("read_file", path="pkg/x.py"),
            call("list_dir", path="pkg/sub"),
            ScriptedResponse.text("done"),
        ]
    )
    _, events = await run_all(h)
    second = system_of(h, 1)
    assert PKG in second and SUB in second
    assert second.index(PKG) < second.index(SUB)
    assert loaded(events) == [
        ("pkg/AGENTS.md", "pkg", len(PKG)),
        ("pkg/sub/AGENTS.md", "pkg/sub", len(SUB)),
    ]
    last = system_of(h, 3)
    assert last.count(PKG) == 1 and last.count(SUB) == 1


async def test_listing_and_searching_count_and_failures_do_not() -> None:
    h = harness(
        [
            call("read_file", path="other/missing.md"),  # an error: nothing was read
            call("grep", pattern="z", path="other"),
            ScriptedResponse.text("done"),
        ]
    )
    _, events = await run_all(h)
    assert OTHER not in system_of(h, 1)
    assert OTHER in system_of(h, 2)
    assert PKG not in system_of(h, 2)
    assert loaded(events) == [("other/CLAUDE.md", "other", len(OTHER))]


async def test_resume_starts_with_the_folder_files_the_session_had_loaded() -> None:
    h = harness(
        [
            call("read_file", path="pkg/sub/y.py"),
            ScriptedResponse.text("done"),
            ScriptedResponse.text("again"),
        ]
    )
    first, _ = await run_all(h)
    before = system_of(h, 1)
    _, events = await run_all(h, "more", session_id=first.session_id)
    assert system_of(h, 2) == before
    assert loaded(events) == []  # recorded when loaded, in the first run


async def test_a_folder_outside_the_project_or_the_root_itself_loads_nothing() -> None:
    h = harness(
        [
            call("read_file", path="/etc/hostname"),
            call("read_file", path="top.py"),
            call("list_dir", path="."),
            ScriptedResponse.text("done"),
        ]
    )
    _, events = await run_all(h)
    source = h.context
    assert isinstance(source, StaticContextSource)
    assert source.reads == ["top.py"]  # the file itself, in case it is a folder
    assert loaded(events) == []


def warnings(events: list[RunEvent]) -> list[str]:
    return [
        e.message
        for e in events
        if isinstance(e, ErrorEvent) and e.kind == SKIPPED_KIND and not e.fatal
    ]


async def test_a_skipped_file_is_warned_of_once_per_run_and_the_rest_is_read() -> None:
    source = StaticContextSource(
        [InstructionDoc("${SOONG_AGENT_HOME}/AGENTS.md", HOME)],
        folders={"pkg": {"AGENTS.md": PKG}, "other": {"CLAUDE.md": OTHER}},
        skipped=[
            SkippedInstruction("<project>/CLAUDE.md", "a link to ~/.ssh/id_rsa"),
            SkippedInstruction("<project>/pkg/CLAUDE.md", "a link to .env", "pkg"),
            SkippedInstruction("<project>/empty/AGENTS.md", "outside the project", "empty"),
        ],
    )
    h = Harness(
        ScriptedModel(
            [
                call("read_file", path="pkg/x.py"),
                call("read_file", path="empty/a.txt"),
                call("read_file", path="empty/a.txt"),  # looked at again: no second warning
                ScriptedResponse.text("done"),
                ScriptedResponse.text("again"),
            ]
        ),
        fs=InMemoryFileSystem({**FILES, "empty/a.txt": "a\n"}),
        context=source,
    )
    result, events = await run_all(h)
    assert result.status == "completed"
    assert warnings(events) == [
        "<project>/CLAUDE.md was left out of the instructions: a link to ~/.ssh/id_rsa",
        "<project>/pkg/CLAUDE.md was left out of the instructions: a link to .env",
        "<project>/empty/AGENTS.md was left out of the instructions: outside the project",
    ]
    first_turn = [e for e in events if isinstance(e, ErrorEvent)]
    assert first_turn[0].seq < next(e.seq for e in events if isinstance(e, InstructionsLoaded))
    assert HOME in system_of(h, 0) and PKG in system_of(h, 1)  # the rest, as usual
    _, again = await run_all(h, "more", session_id=result.session_id)
    assert warnings(again) == warnings(events)  # a resumed run replays the folders: told again


async def test_the_chain_is_cut_to_the_budget_least_specific_first() -> None:
    big_home = "home " * 400  # ~2,000 bytes, ~500 tokens by the 4-characters rule
    source = StaticContextSource(
        [InstructionDoc("${SOONG_AGENT_HOME}/AGENTS.md", big_home)], folders=FOLDERS
    )
    h = Harness(
        ScriptedModel([call("read_file", path="pkg/x.py"), ScriptedResponse.text("done")]),
        fs=InMemoryFileSystem(dict(FILES)),
        context=source,
        context_config=ContextConfig(reserve_output_tokens=1_000, dynamic_system_budget=200),
    )
    await run_all(h)
    second = system_of(h, 1)
    assert PKG in second
    assert truncation_marker("${SOONG_AGENT_HOME}/AGENTS.md") in second
    assert big_home.strip() not in second


# --- the tracker and its rule ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "folders"),
    [
        ("pkg/sub/y.py", ["pkg", "pkg/sub", "pkg/sub/y.py"]),
        ("./pkg//x.py", ["pkg", "pkg/x.py"]),
        ("/project/pkg/x.py", ["pkg", "pkg/x.py"]),
        ("pkg", ["pkg"]),
        (".", []),
        ("/project", []),
        ("../elsewhere/a.py", []),
        ("pkg/../../elsewhere", []),
        ("/projectx/a.py", []),
        ("~/notes.md", []),
        ("", []),
    ],
)
def test_folders_of_a_path(path: str, folders: list[str]) -> None:
    assert folders_of(path, "/project") == folders


def test_the_path_of_a_call() -> None:
    def block(name: str, args: str) -> ToolCallBlock:
        return ToolCallBlock(id="c", name=name, arguments=args)

    assert call_path(block("read_file", '{"file_path": "a/b.py"}')) == "a/b.py"
    assert call_path(block("glob", '{"pattern": "**/*.py", "path": "src"}')) == "src"
    assert call_path(block("glob", '{"pattern": "**/*.py"}')) is None
    assert call_path(block("run_command", '{"command": "ls", "cwd": "src"}')) is None
    assert call_path(block("read_file", "not json")) is None
    assert call_path(block("read_file", "[1]")) is None


def test_replay_pairs_results_with_their_own_turn() -> None:
    """Call ids repeat across runs: a failed `c1` in one turn does not hide a good `c1` in
    another, and the reverse."""
    source = StaticContextSource(folders=FOLDERS)

    def turn(path: str, *, error: bool) -> list[Message]:
        return [
            Message(
                role="assistant",
                content=[
                    ToolCallBlock(id="c1", name="read_file", arguments=f'{{"path": "{path}"}}')
                ],
            ),
            Message(
                role="tool",
                content=[
                    ToolResultBlock(call_id="c1", name="read_file", content="", is_error=error)
                ],
            ),
        ]

    tracker = FolderInstructions(source, root="/project")
    tracker.replay([*turn("other/z.md", error=True), *turn("pkg/x.py", error=False)])
    assert [d.text for d in tracker.docs] == [PKG]
    assert not tracker.changed


def test_the_tracker_says_changed_once_per_new_file() -> None:
    tracker = FolderInstructions(StaticContextSource(folders=FOLDERS), root="/project")
    calls = [ToolCallBlock(id="a", name="read_file", arguments='{"path": "pkg/x.py"}')]
    results = [ToolResultBlock(call_id="a", name="read_file", content="x = 1")]
    assert [d.folder for d in tracker.observe(calls, results)] == ["pkg"]
    assert tracker.changed
    assert tracker.take_changed() and not tracker.changed
    assert tracker.observe(calls, results) == []
    assert not tracker.changed


# --- the budget ------------------------------------------------------------------------------


def _docs() -> list[InstructionDoc]:
    return [
        InstructionDoc("${SOONG_AGENT_HOME}/AGENTS.md", "home " * 100),
        InstructionDoc("<project>/AGENTS.md", "project " * 100),
        InstructionDoc("<project>/pkg/AGENTS.md", "package " * 20, folder="pkg"),
    ]


def _tokens(text: str) -> int:
    return len(text.split())  # one token a word: easy to reason about


def test_a_chain_within_the_budget_is_untouched_and_never_counted() -> None:
    def refuse(_text: str) -> int:
        raise AssertionError("a chain that fits by its size is not counted")

    docs = _docs()
    section = instructions_section(docs)
    assert section is not None
    assert fit_instructions(docs, len(section.encode()), refuse) == docs


def test_the_least_specific_source_is_cut_first_with_a_marker() -> None:
    docs = _docs()
    fitted = fit_instructions(docs, 180, _tokens)
    section = instructions_section(fitted)
    assert section is not None and _tokens(section) <= 180
    assert fitted[2] == docs[2] and fitted[1] == docs[1]  # the specific ones win the space
    assert fitted[0].text.startswith("home home")
    assert fitted[0].text.endswith(truncation_marker("${SOONG_AGENT_HOME}/AGENTS.md"))
    assert fitted[0].source == docs[0].source


def test_a_source_with_no_room_keeps_only_its_marker() -> None:
    docs = _docs()
    fitted = fit_instructions(docs, 100, _tokens)
    section = instructions_section(fitted)
    assert section is not None and _tokens(section) <= 100
    assert fitted[2] == docs[2]
    assert fitted[1].text.startswith("project project")
    assert truncation_marker("<project>/AGENTS.md") in fitted[1].text
    assert fitted[0].text == truncation_marker("${SOONG_AGENT_HOME}/AGENTS.md")


def test_a_budget_of_nothing_still_shows_every_cut() -> None:
    fitted = fit_instructions(_docs(), 0, _tokens)
    assert [d.text for d in fitted] == [truncation_marker(d.source) for d in _docs()]
    assert fitted[2].folder == "pkg"
