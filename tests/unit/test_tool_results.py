"""Large tool results become artifacts with a preview (CTX-5); small ones pass unchanged."""

from __future__ import annotations

from pathlib import Path

from soong_agent.adapters.process.runner import SubprocessRunner
from soong_agent.application.tools.shell import run_command_tool
from soong_agent.domain.config.schema import ToolsConfig
from soong_agent.ports.events import SandboxDenied, ToolResultEvent
from soong_agent.ports.ossandbox import SandboxDenial, SandboxPolicy
from soong_agent.testing import (
    InMemoryArtifactStore,
    RecordingApprover,
    RecordingCommandSandbox,
    ScriptedModel,
    ScriptedResponse,
)
from tests.support.harness import Harness


def big_file_harness(size: int, *, artifacts: InMemoryArtifactStore | None) -> Harness:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("read_file", {"path": "big.txt"})),
            ScriptedResponse.text("ok"),
        ]
    )
    h = Harness(model, artifacts=artifacts, max_result_chars=5_000)
    line = "line of text, padded to be forty chars\n"
    h.fs.files["big.txt"] = (line * (size // len(line))).encode()
    return h


async def test_result_over_the_limit_is_stored_whole_and_previewed() -> None:
    store = InMemoryArtifactStore()
    h = big_file_harness(60_000, artifacts=store)
    run = await h.service.start("read it")
    await run.wait()
    seen = h.model.calls[1].messages[-1].tool_results[0].content
    (artifact_id,) = store.infos
    assert artifact_id in seen and "read_artifact" in seen
    assert len(seen) < 5_000
    whole = store.data[artifact_id].decode()
    assert whole.count("line of text") == 60_000 // 39
    assert store.infos[artifact_id].session_id == run.session_id


async def test_without_an_artifact_store_the_result_is_cut_and_marked() -> None:
    h = big_file_harness(60_000, artifacts=None)
    await (await h.service.start("read it")).wait()
    seen = h.model.calls[1].messages[-1].tool_results[0].content
    assert "more characters cut" in seen and len(seen) < 5_200


async def test_small_results_are_unchanged() -> None:
    store = InMemoryArtifactStore()
    h = big_file_harness(1_000, artifacts=store)
    await (await h.service.start("read it")).wait()
    assert store.infos == {}


async def test_what_the_os_sandbox_refused_is_an_event_and_a_note_in_the_result(
    tmp_path: Path,
) -> None:
    denial = SandboxDenial("write", "bubblewrap", "EROFS", "/etc/x", "writes only in the project")
    sandbox = RecordingCommandSandbox(denials=[denial])
    policy = SandboxPolicy(project=str(tmp_path), write_roots=(str(tmp_path),))
    tool = run_command_tool(
        runner=SubprocessRunner(sandbox=sandbox, policy=policy),
        project=str(tmp_path),
        tools=ToolsConfig(),
        base_env={"PATH": "/usr/bin:/bin"},
    )
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("run_command", {"command": "echo /etc/x: EROFS >&2"})),
            ScriptedResponse.text("ok"),
        ]
    )
    h = Harness(model, extra_tools=[tool], approver=RecordingApprover(default="allow_once"))
    run = await h.service.start("write it")
    events = [e async for e in run.events()]
    await run.wait()
    (seen,) = [e for e in events if isinstance(e, SandboxDenied)]
    assert (seen.kind, seen.path, seen.rule) == ("write", "/etc/x", "writes only in the project")
    result = next(e for e in events if isinstance(e, ToolResultEvent))
    assert events.index(seen) < events.index(result)
    assert "[sandbox (bubblewrap) refused writing /etc/x (EROFS)" in result.content
    assert sandbox.calls and sandbox.calls[0].policy == policy
