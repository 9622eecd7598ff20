"""The loop keeps the context inside the window: compaction, recovery, manual, branches."""

from __future__ import annotations

from soong_agent.domain.config.schema import CompactConfig, ContextConfig
from soong_agent.domain.stuck import StuckSettings
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.events import CompactionEvent, ContextMeasured
from soong_agent.ports.model import ModelRequest
from soong_agent.testing import ScriptedModel, ScriptedResponse
from tests.support.harness import Harness

SMALL_WINDOW = dict(
    stuck=StuckSettings.off(),  # these tests read one file over and over on purpose
    context_window_tokens=12_000,
    context_config=ContextConfig(reserve_output_tokens=1_000, dynamic_system_budget=2_000),
    compact_config=CompactConfig(
        reserve_tokens=1_000, keep_recent_tokens=2_000, max_summary_tokens=500
    ),
)


def reading_model(
    turns: int, *, summary: str = "SUMMARY of earlier work", delay_s: float = 0.0
) -> ScriptedModel:
    """Reads big.txt `turns` times, then answers; answers summary requests with `summary`."""

    calls = [0]

    def respond(request: ModelRequest) -> ScriptedResponse:
        if request.system and request.system[0].label == "compact":
            return ScriptedResponse.text(summary)
        calls[0] += 1
        if calls[0] <= turns:
            return ScriptedResponse.tool_calls(("read_file", {"path": "big.txt"}), delay_s=delay_s)
        return ScriptedResponse.text("all done")

    return ScriptedModel(default=respond)


def non_compact_calls(model: ScriptedModel) -> list[ModelRequest]:
    return [c for c in model.calls if not (c.system and c.system[0].label == "compact")]


async def test_context_is_compacted_before_it_outgrows_the_window() -> None:
    model = reading_model(20)
    h = Harness(model, max_turns=60, **SMALL_WINDOW)
    h.fs.files["big.txt"] = ("some file content line\n" * 80).encode()
    run = await h.service.start("read big.txt twenty times")
    result = await run.wait()
    assert result.status == "completed", result.reason
    events = await h.store.run_events(run.run_id)
    assert any(isinstance(e, CompactionEvent) for e in events)
    measured = [e for e in events if isinstance(e, ContextMeasured)]
    assert measured and all(e.window == 12_000 for e in measured)
    for request in non_compact_calls(model):
        text = sum(len(str(m.content)) for m in request.messages)
        assert text < 12_000 * 4  # generous: the estimate keeps requests within the window
    last = non_compact_calls(model)[-1]
    joined = "\n".join(m.text for m in last.messages)
    assert "read big.txt twenty times" in joined  # the carry-over keeps the latest request


async def test_prompt_too_long_compacts_once_and_retries() -> None:
    too_long = ProviderError(
        "prompt is too long", kind="context_too_long", provider="scripted", base_url="memory://"
    )
    state = {"calls": 0, "failed": False}

    def respond(request: ModelRequest) -> ScriptedResponse:
        if request.system and request.system[0].label == "compact":
            return ScriptedResponse.text("SUMMARY")
        state["calls"] += 1
        if state["calls"] <= 3:
            return ScriptedResponse.tool_calls(("read_file", {"path": "big.txt"}))
        if not state["failed"]:
            state["failed"] = True
            raise too_long
        return ScriptedResponse.text("recovered")

    model = ScriptedModel(default=respond)
    h = Harness(model, **SMALL_WINDOW)
    h.fs.files["big.txt"] = (("x" * 60 + "\n") * 40).encode()
    run = await h.service.start("go")
    result = await run.wait()
    assert result.status == "completed" and result.final_text == "recovered"
    events = await h.store.run_events(run.run_id)
    compactions = [e for e in events if isinstance(e, CompactionEvent)]
    assert [c.trigger for c in compactions] == ["recovery"]
    assert compactions[0].tokens_after < compactions[0].tokens_before


async def test_manual_compaction_through_the_sdk_handle() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("read_file", {"path": "big.txt"}), delay_s=0.01),
            ScriptedResponse.tool_calls(("read_file", {"path": "big.txt"}), delay_s=0.01),
            ScriptedResponse.tool_calls(("read_file", {"path": "big.txt"}), delay_s=0.01),
        ],
        default=lambda request: ScriptedResponse.text(
            "SUMMARY" if request.system[0].label == "compact" else "done"
        ),
    )
    h = Harness(model, compact_config=CompactConfig(keep_recent_tokens=100))
    h.fs.files["big.txt"] = ("line of the big file\n" * 200).encode()
    run = await h.service.start("read a lot")
    report = None
    seen = 0
    async for event in run.events():
        if event.type == "tool_result":
            seen += 1
            if seen == 2:
                report = await run.compact()
                break
    result = await run.wait()
    assert result.status == "completed"
    events = await h.store.run_events(run.run_id)
    compactions = [e for e in events if isinstance(e, CompactionEvent)]
    assert [c.trigger for c in compactions] == ["manual"]
    assert report is not None and report.tokens_after < report.tokens_before
    summaries = [c for c in model.calls if c.system[0].label == "compact"]
    assert len(summaries) == 1


async def test_resume_after_compaction_sends_the_compacted_context() -> None:
    model = reading_model(20)
    h = Harness(model, max_turns=60, **SMALL_WINDOW)
    h.fs.files["big.txt"] = ("some file content line\n" * 80).encode()
    first = await (await h.service.start("read big.txt twenty times")).wait()
    last_seen = non_compact_calls(model)[-1].messages
    assert len(last_seen) < 42  # compacted: 20 reads would be 42 messages
    model.script.append(ScriptedResponse.text("resumed answer"))
    before = len(model.calls)
    await (await h.service.start("and now?", session_id=first.session_id)).wait()
    resumed = model.calls[before].messages
    shape = [(m.role, m.kind, m.text, [r.content for r in m.tool_results]) for m in resumed]
    seen = [(m.role, m.kind, m.text, [r.content for r in m.tool_results]) for m in last_seen]
    assert shape[: len(seen)] == seen  # the same context the model saw last …
    assert [m.text for m in resumed[len(seen) :]] == ["all done", "and now?"]  # … then the rest


async def test_branch_from_an_earlier_user_message() -> None:
    model = ScriptedModel(
        [ScriptedResponse.text("one"), ScriptedResponse.text("two"), ScriptedResponse.text("alt")]
    )
    h = Harness(model)
    first = await (await h.service.start("first question")).wait()
    await (await h.service.start("second question", session_id=first.session_id)).wait()
    path = await h.store.active_path(first.session_id)
    second_user = path[2]
    assert second_user.text == "second question"
    await (
        await h.service.start(
            "other question", session_id=first.session_id, from_message=second_user.id
        )
    ).wait()
    sent = [m.text for m in model.calls[-1].messages]
    assert sent == ["first question", "one", "other question"]
    everything = await h.store.all_messages(first.session_id)
    assert {"second question", "two"} <= {m.text for m in everything}


async def test_a_failing_compact_profile_is_reported_and_the_ladder_goes_on() -> None:
    from soong_agent.ports.errors import MissingSecretError
    from soong_agent.ports.events import ErrorEvent

    def respond(request: ModelRequest) -> ScriptedResponse:
        if request.system and request.system[0].label == "compact":
            raise MissingSecretError(
                var="COMPACT_KEY", user='model profile "compact"', source="config.toml: [x]"
            )
        calls[0] += 1
        if calls[0] <= 20:  # long answers, tiny tool results: micro-compaction cannot help
            return ScriptedResponse.tool_calls(("list_dir", {}), text="thinking aloud " * 150)
        return ScriptedResponse.text("all done")

    calls = [0]
    model = ScriptedModel(default=respond)
    h = Harness(model, max_turns=60, **SMALL_WINDOW)
    run = await h.service.start("keep talking")
    result = await run.wait()
    assert result.status == "completed", result.reason
    events = await h.store.run_events(run.run_id)
    errors = [e for e in events if isinstance(e, ErrorEvent) and e.kind == "compaction"]
    assert errors and "COMPACT_KEY" in errors[0].message and not errors[0].fatal
    strategies = {e.strategy for e in events if isinstance(e, CompactionEvent)}
    assert "hard_reset" in strategies  # the last rung still kept the run going
    last = non_compact_calls(model)[-1]
    assert "keep talking" in "\n".join(m.text for m in last.messages)


async def test_background_summary_is_swapped_in_at_a_turn_boundary() -> None:
    model = reading_model(20, delay_s=0.002)  # a model that takes time lets the summary run
    h = Harness(model, max_turns=60, **SMALL_WINDOW)
    h.fs.files["big.txt"] = ("some file content line\n" * 80).encode()
    run = await h.service.start("read big.txt twenty times")
    assert (await run.wait()).status == "completed"
    events = await h.store.run_events(run.run_id)
    triggers = [e.trigger for e in events if isinstance(e, CompactionEvent)]
    assert "background" in triggers


async def test_without_auto_background_compaction_waits_for_the_trigger() -> None:
    model = reading_model(20)
    config = dict(SMALL_WINDOW)
    config["compact_config"] = CompactConfig(
        reserve_tokens=1_000,
        keep_recent_tokens=2_000,
        max_summary_tokens=500,
        auto_background=False,
    )
    h = Harness(model, max_turns=60, **config)  # type: ignore[arg-type]
    h.fs.files["big.txt"] = ("some file content line\n" * 80).encode()
    run = await h.service.start("read big.txt twenty times")
    assert (await run.wait()).status == "completed"
    events = await h.store.run_events(run.run_id)
    triggers = {e.trigger for e in events if isinstance(e, CompactionEvent)}
    assert triggers == {"budget"}
