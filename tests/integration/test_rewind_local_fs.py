"""A rewind on the local disk (RWD-1): it writes through `LocalFileSystem`, so a folder swapped
for a symlink to somewhere outside the project since is refused and listed, never followed, and
a file's bytes and permission mode come back as they were."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from soong_agent.adapters.sandbox import LocalFileSystem
from soong_agent.application.checkpoints.rewind import RewindService
from soong_agent.application.runs.assembler import RunAssembler, RunPolicies, RunPorts, RunSpec
from soong_agent.application.runs.loop import LoopSettings
from soong_agent.application.runs.service import RunService
from soong_agent.application.tools.base import ToolRegistry
from soong_agent.application.tools.files import file_tools
from soong_agent.domain.config.schema import PermissionsConfig
from soong_agent.testing import (
    FixedClock,
    InMemoryArtifactStore,
    InMemorySessionStore,
    ScriptedModel,
    ScriptedResponse,
    SequentialIds,
    StaticContextSource,
)


class Project:
    def __init__(self, root: Path) -> None:
        self.fs = LocalFileSystem(project=root, sensitive=[".env"])
        self.store = InMemorySessionStore()
        self.artifacts = InMemoryArtifactStore()
        self.clock, self.ids = FixedClock(), SequentialIds()

    async def turn(self, *calls: tuple[str, dict[str, str]]) -> tuple[str, str]:
        ports = RunPorts(
            provider=ScriptedModel(
                [ScriptedResponse.tool_calls(*calls), ScriptedResponse.text("done")]
            ),
            store=self.store,
            fs=self.fs,
            context=StaticContextSource(),
            clock=self.clock,
            ids=self.ids,
            artifacts=self.artifacts,
        )
        policies = RunPolicies(permissions=PermissionsConfig(mode="bypass"))
        spec = RunSpec(ToolRegistry(file_tools()), LoopSettings(model_label="s", max_turns=5))
        run = await RunService(RunAssembler(ports, policies), spec).start("change")
        assert (await run.wait()).status == "completed"
        first = (await self.store.active_path(run.session_id))[0]
        return run.session_id, first.id

    def rewinder(self) -> RewindService:
        return RewindService(
            store=self.store,
            fs=self.fs,
            artifacts=self.artifacts,
            snapshots=None,
            clock=self.clock,
            ids=self.ids,
        )


async def test_a_folder_swapped_for_a_symlink_outside_is_not_followed(tmp_path: Path) -> None:
    root, outside = tmp_path / "project", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "sub" / "a.txt").write_text("before\n")
    project = Project(root)
    sid, turn = await project.turn(
        ("write_file", {"path": "sub/a.txt", "content": "after\n"}),
        ("write_file", {"path": "top.txt", "content": "new\n"}),
    )
    (root / "sub" / "a.txt").unlink()
    (root / "sub").rmdir()
    (root / "sub").symlink_to(outside)  # the folder now leads out of the project
    report = await project.rewinder().rewind(sid, to=turn, force=True)
    assert report.applied and report.removed == ("top.txt",)
    assert "sub/a.txt" not in report.restored
    assert any(what == "sub/a.txt" for what, _ in report.not_restored)
    assert list(outside.iterdir()) == []  # nothing was written outside


async def test_bytes_and_the_permission_mode_come_back(tmp_path: Path) -> None:
    root = tmp_path / "project"
    root.mkdir()
    script = root / "run.sh"
    original = b"#!/bin/sh\necho \xff\xfe\n" * 5000
    script.write_bytes(original)
    os.chmod(script, 0o750)
    project = Project(root)
    sid, turn = await project.turn(("write_file", {"path": "run.sh", "content": "echo new\n"}))
    report = await project.rewinder().rewind(sid, to=turn)
    assert report.restored == ("run.sh",)
    assert script.read_bytes() == original
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
