"""Checkpoints and rewind (RWD-1) over fakes of every port: what each turn's tool calls change
is kept before they change it, and a rewind puts it back exactly, refuses a file changed
outside the agent unless forced, lists what it cannot restore and branches the conversation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from soong_agent.adapters.inmemory.redactor import DictSecretRedactor
from soong_agent.adapters.inmemory.snapshots import InMemorySnapshots
from soong_agent.application.checkpoints.rewind import RewindReport, RewindService
from soong_agent.application.runs.assembler import RunAssembler, RunPolicies, RunPorts, RunSpec
from soong_agent.application.runs.loop import LoopSettings
from soong_agent.application.runs.service import RunService
from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput, ToolRegistry
from soong_agent.application.tools.files import file_tools
from soong_agent.domain.config.schema import (
    CompactConfig,
    ContextConfig,
    PermissionsConfig,
    ToolsConfig,
)
from soong_agent.domain.stuck import StuckSettings
from soong_agent.ports.errors import UsageError
from soong_agent.ports.events import (
    FileChanged,
    FileCheckpoint,
    RunEvent,
    SessionRewound,
    WorkTreeSnapshot,
)
from soong_agent.ports.model import ModelRequest
from soong_agent.testing import (
    FixedClock,
    InMemoryArtifactStore,
    InMemoryFileSystem,
    InMemorySessionStore,
    ScriptedModel,
    ScriptedResponse,
    SequentialIds,
    StaticContextSource,
)


class CommandArgs(ToolArgs):
    command: str


@dataclass
class World:
    """A project in memory, a session store, artifacts and snapshots, and a `shell` tool whose
    "commands" are `rm PATH`, `put PATH TEXT` (stand-ins for what a real command does)."""

    fs: InMemoryFileSystem = field(
        default_factory=lambda: InMemoryFileSystem(
            {"keep.txt": "kept\n", "app.py": "print('v1')\n", "bin.dat": b"\x00\xff\xfe\x80"},
            sensitive=[".env"],
        )
    )
    store: InMemorySessionStore = field(default_factory=InMemorySessionStore)
    artifacts: InMemoryArtifactStore | None = field(default_factory=InMemoryArtifactStore)
    work_tree: bool = True
    ids: SequentialIds = field(default_factory=SequentialIds)
    clock: FixedClock = field(default_factory=FixedClock)
    redactor: DictSecretRedactor | None = None
    checkpoints: Literal["on", "files", "off"] = "on"

    def __post_init__(self) -> None:
        self.snapshots = InMemorySnapshots(self.fs, work_tree=self.work_tree)

    def shell(self) -> Tool:
        files = self.fs.files

        async def run(args: BaseModel, ctx: ToolContext) -> ToolOutput:
            assert isinstance(args, CommandArgs)
            verb, path, *rest = args.command.split(" ", 2)
            if verb == "rm":
                files.pop(path, None)
            else:
                files[path] = " ".join(rest).encode()
            return ToolOutput("ok")

        return Tool(
            "shell",
            "Run a command.",
            CommandArgs,
            run,
            permission_class="exec",
            describe=lambda a, c: ("*", f"run {a.command}"),
        )

    def service(self, script: list[ScriptedResponse]) -> RunService:
        registry = ToolRegistry([*file_tools(), self.shell()])
        ports = RunPorts(
            provider=ScriptedModel(script),
            store=self.store,
            fs=self.fs,
            context=StaticContextSource(),
            clock=self.clock,
            ids=self.ids,
            artifacts=self.artifacts,
            snapshots=self.snapshots,
            redactor=self.redactor,
        )
        policies = RunPolicies(
            permissions=PermissionsConfig(mode="bypass"),
            tools=ToolsConfig(checkpoints=self.checkpoints),
        )
        settings = LoopSettings(model_label="scripted", max_turns=10)
        return RunService(RunAssembler(ports, policies), RunSpec(registry, settings))

    def rewinder(self) -> RewindService:
        return RewindService(
            store=self.store,
            fs=self.fs,
            artifacts=self.artifacts,
            snapshots=self.snapshots,
            clock=self.clock,
            ids=self.ids,
        )

    async def turn(
        self, message: str, *calls: tuple[str, dict[str, Any]], session: str | None = None
    ) -> str:
        """One run of `calls` then an answer; the session id."""
        script = [ScriptedResponse.tool_calls(*calls)] if calls else []
        run = await self.service([*script, ScriptedResponse.text("done")]).start(
            message, session_id=session
        )
        result = await run.wait()
        assert result.status == "completed", result.reason
        return run.session_id

    async def user_messages(self, session: str) -> list[str]:
        messages = await self.store.all_messages(session)
        return [m.id for m in messages if m.role == "user" and m.kind == "normal"]

    async def events(self, session: str) -> list[RunEvent]:
        out: list[RunEvent] = []
        for run in await self.store.list_runs(session):
            out += await self.store.run_events(run.id)
        return out


def write(path: str, content: str) -> tuple[str, dict[str, Any]]:
    return ("write_file", {"path": path, "content": content})


def edit(path: str, old: str, new: str) -> tuple[str, dict[str, Any]]:
    return ("edit_file", {"path": path, "old_string": old, "new_string": new})


def shell(command: str) -> tuple[str, dict[str, Any]]:
    return ("shell", {"command": command})


async def test_a_file_tool_change_is_kept_once_per_file_and_turn_before_it_is_made() -> None:
    w = World()
    sid = await w.turn(
        "edit twice", edit("app.py", "v1", "v2"), edit("app.py", "v2", "v3"), write("new.txt", "n")
    )
    (turn,) = await w.user_messages(sid)
    events = await w.events(sid)
    kept = [e for e in events if isinstance(e, FileCheckpoint)]
    assert [(k.path, k.message_id) for k in kept] == [("app.py", turn), ("new.txt", turn)]
    assert kept[1].sha256 is None and kept[1].artifact_id is None  # there was no file
    assert kept[0].artifact_id is not None and w.artifacts is not None
    assert w.artifacts.data[kept[0].artifact_id] == b"print('v1')\n"
    changed = [(e.path, e.sha256 is not None) for e in events if isinstance(e, FileChanged)]
    assert changed == [("app.py", True), ("app.py", True), ("new.txt", True)]
    assert w.fs.files["app.py"] == b"print('v3')\n"


async def test_rewind_restores_bytes_exactly_removes_created_files_and_branches() -> None:
    w = World()
    sid = await w.turn("first", edit("app.py", "v1", "v2"))
    sid = await w.turn(
        "second", write("bin.dat", "text now"), write("made/new.txt", "x"), session=sid
    )
    _, second = await w.user_messages(sid)
    report = await w.rewinder().rewind(sid, to=second)
    assert report.applied and not report.changed_outside
    assert report.restored == ("bin.dat",) and report.removed == ("made/new.txt",)
    assert w.fs.files["bin.dat"] == b"\x00\xff\xfe\x80"  # non-UTF-8 bytes, exactly
    assert "made/new.txt" not in w.fs.files
    assert w.fs.files["app.py"] == b"print('v2')\n"  # the first turn's change stays
    path = await w.store.active_path(sid)
    assert path[-1].id != second and second not in [m.id for m in path]
    assert path[-1].role == "assistant"  # the first turn's answer: the next message follows it
    assert report.continues_after == path[-1].id and report.message == "second"
    # the next run continues from there; the rewound turn stays stored on another branch
    await w.turn("second, again", session=sid)
    texts = [m.text for m in await w.store.active_path(sid) if m.role == "user"]
    assert texts == ["first", "second, again"]
    assert second in [m.id for m in await w.store.all_messages(sid)]
    rewound = [e for e in await w.events(sid) if isinstance(e, SessionRewound)]
    assert rewound[0].to_message_id == second and rewound[0].removed == ["made/new.txt"]


async def test_rewind_to_the_first_message_undoes_every_turn_and_starts_the_conversation_anew() -> (
    None
):
    w = World()
    sid = await w.turn("one", edit("app.py", "v1", "v2"))
    sid = await w.turn("two", edit("app.py", "v2", "v3"), write("keep.txt", "changed"), session=sid)
    first, _ = await w.user_messages(sid)
    report = await w.rewinder().rewind(sid, to=first)
    assert set(report.restored) == {"app.py", "keep.txt"}
    assert w.fs.files["app.py"] == b"print('v1')\n" and w.fs.files["keep.txt"] == b"kept\n"
    assert report.continues_after is None
    assert await w.store.active_path(sid) == []


async def test_a_file_changed_outside_is_not_overwritten_without_force() -> None:
    w = World()
    sid = await w.turn("one", edit("app.py", "v1", "v2"), write("keep.txt", "agent"))
    (turn,) = await w.user_messages(sid)
    w.fs.files["app.py"] = b"the user's own edit\n"
    refused = await w.rewinder().rewind(sid, to=turn)
    assert refused.refused and not refused.applied
    assert refused.changed_outside == ("app.py",)
    assert w.fs.files["app.py"] == b"the user's own edit\n"
    assert w.fs.files["keep.txt"] == b"agent"  # nothing at all was changed
    assert len(await w.store.list_runs(sid)) == 1  # and nothing recorded
    forced = await w.rewinder().rewind(sid, to=turn, force=True)
    assert forced.applied and forced.changed_outside == ("app.py",)
    assert w.fs.files["app.py"] == b"print('v1')\n" and w.fs.files["keep.txt"] == b"kept\n"


async def test_a_command_change_is_restored_from_the_work_tree_snapshot() -> None:
    w = World()
    sid = await w.turn(
        "build",
        shell("rm keep.txt"),
        shell("put out/gen.txt generated"),
        edit("app.py", "v1", "v2"),
    )
    (turn,) = await w.user_messages(sid)
    stages = [
        (e.stage, e.tree is not None)
        for e in await w.events(sid)
        if isinstance(e, WorkTreeSnapshot)
    ]
    assert stages == [("before", True), ("after", True), ("after", True)]
    report = await w.rewinder().rewind(sid, to=turn, conversation=False)
    assert report.applied
    assert set(report.restored) == {"keep.txt", "app.py"} and report.removed == ("out/gen.txt",)
    assert w.fs.files["keep.txt"] == b"kept\n" and "out/gen.txt" not in w.fs.files
    assert w.fs.files["app.py"] == b"print('v1')\n"
    assert [m.text for m in await w.store.active_path(sid) if m.role == "user"] == ["build"]


async def test_a_command_change_outside_git_is_listed_not_skipped() -> None:
    w = World(work_tree=False)
    sid = await w.turn("clean", shell("rm keep.txt"), write("note.txt", "n"))
    (turn,) = await w.user_messages(sid)
    report = await w.rewinder().rewind(sid, to=turn)
    assert report.applied and report.removed == ("note.txt",)
    assert "keep.txt" not in w.fs.files  # a command's change outside git: not restorable...
    assert report.not_restored == (
        ("the changes of shell (run rm keep.txt)", "the project is not in a git work tree"),
    )


async def test_a_command_change_outside_the_agent_is_refused_too() -> None:
    w = World()
    sid = await w.turn("gen", shell("put gen.txt one"))
    (turn,) = await w.user_messages(sid)
    w.fs.files["gen.txt"] = b"edited by hand"
    report = await w.rewinder().rewind(sid, to=turn)
    assert report.refused and report.changed_outside == ("gen.txt",)
    assert w.fs.files["gen.txt"] == b"edited by hand"


async def test_a_pre_image_holding_a_secret_is_not_stored_and_is_listed() -> None:
    w = World(redactor=DictSecretRedactor({"API_KEY": "sk-secret-123"}))
    w.fs.files["conf.txt"] = b"key = sk-secret-123\n"
    sid = await w.turn("rotate", edit("conf.txt", "sk-secret-123", "sk-other"))
    (turn,) = await w.user_messages(sid)
    (kept,) = [e for e in await w.events(sid) if isinstance(e, FileCheckpoint)]
    assert kept.artifact_id is None and "secret" in kept.problem
    assert w.artifacts is not None
    assert all(b"sk-secret-123" not in data for data in w.artifacts.data.values())
    report = await w.rewinder().rewind(sid, to=turn)
    assert dict(report.not_restored)["conf.txt"].startswith("its earlier content was not kept")
    assert w.fs.files["conf.txt"] == b"key = sk-other\n"


async def test_a_file_outside_the_project_is_listed_and_never_written() -> None:
    fs = InMemoryFileSystem({"a.txt": "a"}, write_roots=[".", "/elsewhere"])
    w = World(fs=fs)
    sid = await w.turn("out", write("/elsewhere/x.txt", "x"), write("a.txt", "b"))
    (turn,) = await w.user_messages(sid)
    report = await w.rewinder().rewind(sid, to=turn)
    assert report.restored == ("a.txt",) and w.fs.files["a.txt"] == b"a"
    assert w.fs.files["/elsewhere/x.txt"] == b"x"
    assert "outside the project" in dict(report.not_restored)["/elsewhere/x.txt"]


async def test_rewind_refuses_what_is_not_a_user_turn() -> None:
    w = World()
    sid = await w.turn("one", edit("app.py", "v1", "v2"))
    answer = (await w.store.active_path(sid))[-1]
    with pytest.raises(UsageError, match="not one the user wrote"):
        await w.rewinder().rewind(sid, to=answer.id)
    with pytest.raises(UsageError, match="has no message"):
        await w.rewinder().rewind(sid, to="msg_nope")
    with pytest.raises(UsageError, match="files, the conversation or both"):
        await w.rewinder().rewind(sid, to=answer.id, files=False, conversation=False)


async def test_conversation_only_leaves_the_files() -> None:
    w = World()
    sid = await w.turn("one", edit("app.py", "v1", "v2"))
    (turn,) = await w.user_messages(sid)
    report: RewindReport = await w.rewinder().rewind(sid, to=turn, files=False)
    assert report.applied and report.restored == () and w.fs.files["app.py"] == b"print('v2')\n"
    assert await w.store.active_path(sid) == []


async def test_turns_lists_the_active_path_with_what_each_changed() -> None:
    w = World()
    sid = await w.turn("one", edit("app.py", "v1", "v2"), shell("put x.txt 1"))
    sid = await w.turn("two", session=sid)
    turns = await w.rewinder().turns(sid)
    assert [(t.text, t.files, t.commands) for t in turns] == [("one", 1, 1), ("two", 0, 0)]


async def test_a_rewind_to_a_compactions_copy_means_the_turn_it_copies() -> None:
    w = World()
    w.fs.files["big.txt"] = ("some file content line\n" * 80).encode()
    reads = {"left": 0}

    def respond(request: ModelRequest) -> ScriptedResponse:
        if request.system and request.system[0].label == "compact":
            return ScriptedResponse.text("SUMMARY of earlier work")
        if reads["left"] > 0:
            reads["left"] -= 1
            return ScriptedResponse.tool_calls(("read_file", {"path": "big.txt"}))
        return ScriptedResponse.text("done")

    def run_on_a_small_window(message: str, first: ScriptedResponse, session: str | None) -> Any:
        ports = RunPorts(
            provider=ScriptedModel([first], default=respond),
            store=w.store,
            fs=w.fs,
            context=StaticContextSource(),
            clock=w.clock,
            ids=w.ids,
            artifacts=w.artifacts,
            snapshots=w.snapshots,
        )
        policies = RunPolicies(
            permissions=PermissionsConfig(mode="bypass"),
            context_window=12_000,
            context=ContextConfig(reserve_output_tokens=1_000, dynamic_system_budget=2_000),
            compact=CompactConfig(
                reserve_tokens=1_000, keep_recent_tokens=2_000, max_summary_tokens=500
            ),
        )
        settings = LoopSettings(model_label="s", max_turns=60, stuck=StuckSettings.off())
        registry = ToolRegistry(file_tools())
        service = RunService(RunAssembler(ports, policies), RunSpec(registry, settings))
        return service.start(message, session_id=session)

    reads["left"] = 20
    run = await run_on_a_small_window(
        "one", ScriptedResponse.tool_calls(edit("app.py", "v1", "v2")), None
    )
    assert (await run.wait()).status == "completed"
    sid = run.session_id
    reads["left"] = 20
    run = await run_on_a_small_window(
        "two", ScriptedResponse.tool_calls(write("keep.txt", "two")), sid
    )
    assert (await run.wait()).status == "completed"
    shown = [m for m in await w.store.active_path(sid) if m.role == "user" and m.kind == "normal"]
    written = await w.user_messages(sid)
    assert [m.text for m in shown] == ["one", "two"]
    assert shown[0].id not in written[:1]  # a copy a compaction made, not the message itself
    turns = await w.rewinder().turns(sid)
    assert [(t.text, t.files) for t in turns] == [("one", 1), ("two", 1)]
    report = await w.rewinder().rewind(sid, to=shown[0].id)
    assert set(report.restored) == {"app.py", "keep.txt"}
    assert w.fs.files["app.py"] == b"print('v1')\n" and w.fs.files["keep.txt"] == b"kept\n"


async def test_a_file_whose_name_held_a_secret_is_listed_and_no_record_holds_it() -> None:
    w = World(redactor=DictSecretRedactor({"API_KEY": "sk-secret-123"}))
    sid = await w.turn("one", write("key-sk-secret-123.txt", "x"), write("plain.txt", "y"))
    (turn,) = await w.user_messages(sid)
    rewinder = RewindService(
        store=w.store,
        fs=w.fs,
        artifacts=w.artifacts,
        snapshots=w.snapshots,
        clock=w.clock,
        ids=w.ids,
        redactor=w.redactor,
    )
    report = await rewinder.rewind(sid, to=turn)
    assert report.removed == ("plain.txt",)
    reasons = dict(report.not_restored)
    assert reasons["key-[redacted:API_KEY].txt"] == "its name held a secret, which is never stored"
    (stored,) = [e for e in await w.events(sid) if isinstance(e, SessionRewound)]
    assert "sk-secret-123" not in stored.model_dump_json()
    assert all("sk-secret-123" not in (r.reason or "") for r in await w.store.list_runs(sid))


async def test_a_write_the_sandbox_refused_is_not_listed_as_something_to_restore() -> None:
    w = World()
    sid = await w.turn("one", write(".env", "TOKEN=x"), write("a.txt", "a"))
    (turn,) = await w.user_messages(sid)
    assert ".env" not in w.fs.files
    report = await w.rewinder().rewind(sid, to=turn)
    assert report.removed == ("a.txt",) and report.not_restored == ()


async def test_checkpoints_files_keeps_no_snapshot_and_off_keeps_nothing() -> None:
    files_only = World(checkpoints="files")
    sid = await files_only.turn("one", shell("rm keep.txt"), edit("app.py", "v1", "v2"))
    (turn,) = await files_only.user_messages(sid)
    assert files_only.snapshots.trees == {}
    report = await files_only.rewinder().rewind(sid, to=turn)
    assert report.restored == ("app.py",) and "keep.txt" not in files_only.fs.files
    assert dict(report.not_restored) == {
        "the changes of shell (run rm keep.txt)": (
            'tools.checkpoints is "files": what commands change is not kept'
        )
    }
    off = World(checkpoints="off")
    sid = await off.turn("one", edit("app.py", "v1", "v2"))
    assert not [e for e in await off.events(sid) if isinstance(e, FileCheckpoint | FileChanged)]
    assert off.artifacts is not None and off.artifacts.data == {}
