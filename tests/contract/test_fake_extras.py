"""What the fakes of `soong_agent.testing` add beyond their port: scripting and recording.

The port behaviour of each fake is in its contract suite, next to the real adapter; these cases
cover the test-facing side only (and the refusals no real adapter has a counterpart for).
"""

from __future__ import annotations

import asyncio

import pytest

from soong_agent.ports.errors import PermissionDenied, ProviderError, ToolInputError
from soong_agent.ports.events import TextDeltaEvent, ToolResultEvent
from soong_agent.ports.messages import ToolResultBlock, user_text
from soong_agent.ports.model import ModelRequest, SystemPart, ToolChoice, ToolSpec
from soong_agent.ports.process import ProcessResult
from soong_agent.testing import (
    ApproxTokenCounter,
    InMemoryArtifactStore,
    ProcessCall,
    RecordingEventSink,
    ScriptedModel,
    ScriptedPage,
    ScriptedProcess,
    ScriptedProcessRunner,
    ScriptedResponse,
    ScriptedWebFetcher,
    UnscriptedCommand,
)

ENV = {"PATH": "/usr/bin"}


async def run(runner: ScriptedProcessRunner, *argv: str, timeout_s: float = 5) -> ProcessResult:
    return await runner.run(
        list(argv), cwd="/project", env=ENV, timeout_s=timeout_s, stdout_limit=100, stderr_limit=100
    )


# --- ScriptedProcessRunner ----------------------------------------------------------------------


async def test_an_unscripted_command_is_refused_loudly_and_recorded() -> None:
    runner = ScriptedProcessRunner()
    with pytest.raises(UnscriptedCommand, match="no scripted result"):
        await run(runner, "git", "status")
    assert isinstance(UnscriptedCommand(), FileNotFoundError)  # like a missing program
    assert [c.argv for c in runner.unscripted] == [("git", "status")]


async def test_results_by_argv_and_by_command_line_in_turn() -> None:
    runner = ScriptedProcessRunner()
    runner.on(["git", "status"], ScriptedProcess("clean"), ScriptedProcess("dirty"))
    runner.on_command("npm test", ScriptedProcess("ok", exit_code=0))
    first = await run(runner, "git", "status")
    second = await run(runner, "git", "status")
    third = await run(runner, "git", "status")  # the last result repeats
    shell = await run(runner, "/bin/bash", "-c", "npm test")
    assert [r.stdout for r in (first, second, third, shell)] == ["clean", "dirty", "dirty", "ok"]
    assert runner.last_call.command == "npm test"
    assert runner.calls[0].env == ENV and runner.calls[0].cwd == "/project"


async def test_a_result_can_be_built_from_the_call() -> None:
    def echo(call: ProcessCall) -> ScriptedProcess:
        return ScriptedProcess((call.stdin or b"").upper())

    runner = ScriptedProcessRunner().on(["tr", "a-z", "A-Z"], echo)
    result = await runner.run(
        ["tr", "a-z", "A-Z"],
        cwd="/p",
        env={},
        timeout_s=1,
        stdout_limit=10,
        stderr_limit=10,
        stdin=b"abc",
    )
    assert result.stdout == "ABC"


async def test_a_cancelled_call_is_marked() -> None:
    runner = ScriptedProcessRunner().on(["sleep", "9"], ScriptedProcess(delay_s=9))
    task = asyncio.create_task(run(runner, "sleep", "9", timeout_s=60))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert runner.last_call.cancelled and runner.last_call.result is None


async def test_a_zero_timeout_times_out() -> None:
    runner = ScriptedProcessRunner().on(["true"])
    result = await run(runner, "true", timeout_s=0)
    assert result.timed_out


# --- RecordingEventSink -------------------------------------------------------------------------


def test_the_recording_sink_refuses_what_is_not_an_event_and_filters_by_type() -> None:
    sink = RecordingEventSink()
    e = {"run_id": "r", "session_id": "s", "at": 0.0}
    sink.emit(TextDeltaEvent(seq=1, text="a", **e))
    sink.emit(ToolResultEvent(seq=2, call_id="c", name="ls", content="x", **e))
    with pytest.raises(TypeError):
        sink.emit({"type": "text_delta"})  # type: ignore[arg-type]
    assert sink.types == ["text_delta", "tool_result"]
    assert [t.text for t in sink.of_type(TextDeltaEvent)] == ["a"]


# --- ApproxTokenCounter -------------------------------------------------------------------------


def test_the_approx_counter_can_act_as_one_that_loads() -> None:
    counter = ApproxTokenCounter(loaded=False, chars_per_token=2)
    assert not counter.loaded
    counter.warm_up()
    assert counter.loaded and counter.warm_ups == 1
    assert counter.count("abcde") == 3 and counter.counts == 1
    with pytest.raises(ValueError):
        ApproxTokenCounter(chars_per_token=0)


# --- ScriptedWebFetcher -------------------------------------------------------------------------


async def test_domains_and_resolved_addresses() -> None:
    fetcher = ScriptedWebFetcher(
        {
            "https://docs.example.com/a": "docs",
            "https://intranet.example.com/": "inside",
        },
        allowed_domains=["example.com"],
        resolve={"intranet.example.com": ["10.0.0.5"]},
    )
    result = await fetcher.fetch("https://docs.example.com/a", max_bytes=100, timeout_s=1)
    assert (result.text, result.final_url) == ("docs", "https://docs.example.com/a")
    with pytest.raises(PermissionDenied, match=r"10\.0\.0\.5"):
        await fetcher.fetch("https://intranet.example.com/", max_bytes=100, timeout_s=1)
    with pytest.raises(PermissionDenied, match=r"notexample\.com"):
        await fetcher.fetch("https://notexample.com/", max_bytes=100, timeout_s=1)
    with pytest.raises(ToolInputError, match=r"other\.example\.com"):
        await fetcher.fetch("https://other.example.com/", max_bytes=100, timeout_s=1)
    assert fetcher.requests == ["https://docs.example.com/a"]


def test_pages_are_added_later_too() -> None:
    fetcher = ScriptedWebFetcher(allowed_hosts=["example.org"])
    fetcher.add("http://example.org/x#top", ScriptedPage.html("<p>x</p>"))
    assert list(fetcher.pages) == ["http://example.org/x"]


# --- InMemoryArtifactStore, ScriptedModel -------------------------------------------------------


async def test_the_artifact_store_keeps_the_run_of_each_artifact() -> None:
    store = InMemoryArtifactStore()
    info = await store.save(session_id="s", run_id="r9", filename="f", data=b"x", preview_chars=1)
    assert store.run_ids[info.id] == "r9"
    assert store.data[info.id] == b"x"


async def test_the_scripted_model_records_the_whole_request() -> None:
    model = ScriptedModel([ScriptedResponse.text("hi")])
    tools = [ToolSpec("grep", "Search.", {"type": "object"})]
    req = ModelRequest(
        system=[SystemPart("core", "x")],
        messages=[user_text("q")],
        tools=tools,
        tool_choice=ToolChoice.parse("grep"),
        temperature=0.5,
    )
    _ = [e async for e in model.stream(req)]
    assert model.last_call == req
    assert model.last_call.tool_choice == ToolChoice(mode="tool", name="grep")


async def test_the_scripted_model_can_be_lenient() -> None:
    orphan = user_text("q").model_copy(
        update={"content": [ToolResultBlock(call_id="c", name="x", content="")]}
    )
    req = ModelRequest(system=[], messages=[orphan])
    strict = ScriptedModel([ScriptedResponse.text("hi")])
    with pytest.raises(ProviderError, match="answers no call"):
        _ = [e async for e in strict.stream(req)]
    assert strict.script and len(strict.rejections) == 1
    lenient = ScriptedModel([ScriptedResponse.text("hi")], strict=False)
    assert [e async for e in lenient.stream(req)]
