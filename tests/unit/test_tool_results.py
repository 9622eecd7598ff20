"""Large tool results become artifacts with a preview (CTX-5); small ones pass unchanged."""

from __future__ import annotations

from soong_agent.testing import InMemoryArtifactStore, ScriptedModel, ScriptedResponse
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
