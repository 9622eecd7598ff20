"""OpenTelemetry traces and metrics of runs (OBS-1), received by a real OTLP/HTTP receiver on
loopback that decodes the protobuf payloads: a scripted run with a denied call and a sub-agent
is one trace with the GenAI attributes and parent links; its metrics arrive; nothing is sent
with telemetry off; no message text or secret is sent unless `record_content`, and then
scrubbed."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from soong_agent import AgentRuntime
from soong_agent.application.workers.queued import start_queued
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import Usage
from soong_agent.testing import ScriptedModel, ScriptedResponse, write_minimal_config
from tests.support.otlp_receiver import GrpcOtlpReceiver, OtlpReceiver, ReceivedSpan

SECRET = "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
USER_WORDS = "please-tidy-the-garden-notes"
ANSWER_WORDS = "the-garden-is-tidy-now"
WRITTEN_WORDS = "compost-heap-inventory"
SUB_TASK = "count-the-tulip-beds"
SUB_ANSWER = "seven-tulip-beds"
USAGE = Usage(input_tokens=120, output_tokens=30)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.close()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text(f"garden-secret-note {SECRET}\n", encoding="utf-8")
    return project


def home_with(tmp_path: Path, telemetry: str) -> Path:
    home = tmp_path / "home"
    write_minimal_config(home, telemetry)
    return home


def telemetry_on(receiver: OtlpReceiver, *, record_content: bool = False) -> str:
    return (
        f'[telemetry]\nenabled = true\nendpoint = "{receiver.endpoint}"\n'
        f'service_name = "garden-agents"\nrecord_content = {str(record_content).lower()}\n'
        '[telemetry.resource_attributes]\n"deployment.environment" = "test"\n'
    )


def scripted() -> ScriptedModel:
    """The root: a write (denied: no approval callback) and a read in one turn, then a
    sub-agent, then its answer; the sub-agent answers at once."""
    root = [
        ScriptedResponse.tool_calls(
            ("write_file", {"path": "out.txt", "content": WRITTEN_WORDS}),
            ("read_file", {"path": "notes.txt"}),
            usage=USAGE,
        ),
        ScriptedResponse.tool_calls(("create_sub_agent", {"task": SUB_TASK}), usage=USAGE),
        ScriptedResponse.text(ANSWER_WORDS, pieces=2, usage=USAGE),
    ]
    turns = iter(root)

    def answer(request: ModelRequest) -> ScriptedResponse:
        users = [m.text for m in request.messages if m.role == "user"]
        if users and SUB_TASK in users[0]:
            return ScriptedResponse.text(SUB_ANSWER, usage=USAGE)
        return next(turns)

    return ScriptedModel(default=answer, name="test-model")


async def run_once(home: Path, project: Path, **more: object) -> None:
    async with AgentRuntime(project_dir=project, home=home, model=scripted(), **more) as runtime:  # type: ignore[arg-type]
        result = await (await runtime.run(USER_WORDS)).wait()
        assert result.status == "completed", result.reason


def by_name(spans: list[ReceivedSpan], name: str) -> list[ReceivedSpan]:
    return [s for s in spans if s.name == name]


async def test_a_run_is_one_trace_with_genai_spans_and_parent_links(
    tmp_path: Path, project: Path, receiver: OtlpReceiver
) -> None:
    await run_once(home_with(tmp_path, telemetry_on(receiver)), project)
    spans = receiver.spans
    agents = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    assert len(agents) == 2
    root = next(s for s in agents if s.parent_span_id == "")
    child = next(s for s in agents if s is not root)
    assert {s.trace_id for s in spans} == {root.trace_id}  # one trace
    assert root.resource["service.name"] == "garden-agents"
    assert root.resource["deployment.environment"] == "test"
    assert root.attributes["soong_agent.run.status"] == "completed"
    assert root.attributes["gen_ai.request.model"] == "test-model"
    assert root.attributes["gen_ai.provider.name"] == "scripted"
    assert root.attributes["gen_ai.usage.input_tokens"] >= 3 * 120

    chats = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    root_chats = [s for s in chats if s.parent_span_id == root.span_id]
    assert len(root_chats) == 3 and len(chats) == 4
    assert all(s.name.startswith("chat ") for s in chats)
    first = min(root_chats, key=lambda s: s.start_ns)
    assert first.attributes["gen_ai.usage.input_tokens"] == 120
    assert first.attributes["gen_ai.usage.output_tokens"] == 30
    assert first.attributes["gen_ai.response.finish_reasons"] == ["tool_call"]
    last = max(root_chats, key=lambda s: s.start_ns)
    assert last.attributes["gen_ai.response.finish_reasons"] == ["stop"]

    [write] = by_name(spans, "execute_tool write_file")
    assert write.parent_span_id == root.span_id
    assert write.attributes["gen_ai.operation.name"] == "execute_tool"
    assert write.attributes["soong_agent.permission.decision"] == "deny"
    assert write.attributes["soong_agent.permission.source"] == "no_approver"
    assert "write_without_callback" in write.attributes["soong_agent.permission.reason"]
    assert write.status_code == 2  # ERROR: the call was refused
    [read] = by_name(spans, "execute_tool read_file")
    assert read.attributes["soong_agent.permission.decision"] == "allow_once"
    [spawn] = by_name(spans, "execute_tool create_sub_agent")
    assert child.parent_span_id == spawn.span_id  # the child run under the call that made it
    assert child.attributes["soong_agent.child.kind"] == "sub_agent"
    assert spawn.attributes["soong_agent.child.run.id"] == child.attributes["soong_agent.run.id"]
    assert all(root.start_ns <= s.start_ns and s.end_ns <= root.end_ns for s in spans)


async def test_the_metrics_arrive(tmp_path: Path, project: Path, receiver: OtlpReceiver) -> None:
    await run_once(home_with(tmp_path, telemetry_on(receiver)), project)
    [inputs] = receiver.metric("gen_ai.client.token.usage", **{"gen_ai.token.type": "input"})
    assert (inputs.count, inputs.value) == (4, 4 * 120)
    [outputs] = receiver.metric("gen_ai.client.token.usage", **{"gen_ai.token.type": "output"})
    assert outputs.value == 4 * 30 and outputs.attributes["gen_ai.request.model"] == "test-model"
    [denied] = receiver.metric(
        "soong_agent.tool.calls",
        **{"gen_ai.tool.name": "write_file", "soong_agent.permission.decision": "deny"},
    )
    assert denied.value == 1
    runs = receiver.metric("soong_agent.runs", **{"soong_agent.run.status": "completed"})
    assert sum(p.value for p in runs) == 2  # the root and its sub-agent
    [latency] = receiver.metric("gen_ai.client.operation.duration")
    assert latency.count == 4
    [first_token] = receiver.metric("soong_agent.model.time_to_first_token")
    assert first_token.count == 2  # the two answers with text (tool calls stream none)


async def test_nothing_is_sent_with_telemetry_off(
    tmp_path: Path, project: Path, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    home = home_with(tmp_path, "")
    async with AgentRuntime(project_dir=project, home=home, model=scripted()) as runtime:
        assert runtime._container.adapters.telemetry() is None
        await (await runtime.run(USER_WORDS)).wait()
    assert receiver.bodies == []


async def test_no_message_text_or_secret_is_sent_without_record_content(
    tmp_path: Path, project: Path, receiver: OtlpReceiver
) -> None:
    await run_once(home_with(tmp_path, telemetry_on(receiver)), project)
    sent = b"".join(receiver.bodies)
    assert sent and b"invoke_agent" in sent
    for words in (
        USER_WORDS,
        ANSWER_WORDS,
        WRITTEN_WORDS,
        SUB_TASK,
        SUB_ANSWER,
        SECRET,
        "garden-secret-note",
    ):
        assert words.encode() not in sent, words


async def test_record_content_sends_the_texts_scrubbed(
    tmp_path: Path, project: Path, receiver: OtlpReceiver
) -> None:
    await run_once(home_with(tmp_path, telemetry_on(receiver, record_content=True)), project)
    sent = b"".join(receiver.bodies)
    assert SECRET.encode() not in sent
    spans = receiver.spans
    [read] = by_name(spans, "execute_tool read_file")
    assert "[redacted:github_token]" in read.attributes["gen_ai.tool.call.result"]
    [write] = by_name(spans, "execute_tool write_file")
    assert WRITTEN_WORDS in write.attributes["gen_ai.tool.call.arguments"]
    root = next(s for s in spans if s.name.startswith("invoke_agent") and not s.parent_span_id)
    assert USER_WORDS in root.attributes["gen_ai.input.messages"]
    answers = [s.attributes.get("gen_ai.output.messages", "") for s in spans]
    assert any(ANSWER_WORDS in a for a in answers)


async def test_an_applications_providers_put_the_runs_inside_its_trace(
    tmp_path: Path, project: Path
) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exported = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exported))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    home = home_with(tmp_path, "")  # telemetry off in the config: the application's own
    with tracer_provider.get_tracer("app").start_as_current_span("handle-request") as outer:
        await run_once(
            home, project, tracer_provider=tracer_provider, meter_provider=meter_provider
        )
    spans = exported.get_finished_spans()
    root = next(
        s
        for s in spans
        if s.name.startswith("invoke_agent")
        and s.parent is not None
        and s.parent.span_id == outer.get_span_context().span_id
    )
    assert {s.context.trace_id for s in spans} == {outer.get_span_context().trace_id}
    assert (
        root.attributes is not None and root.attributes["gen_ai.operation.name"] == "invoke_agent"
    )
    data = reader.get_metrics_data()
    assert data is not None
    names = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"gen_ai.client.token.usage", "soong_agent.runs", "soong_agent.tool.calls"} <= names


async def test_a_run_taken_over_by_a_second_worker_is_one_trace(
    tmp_path: Path, project: Path, receiver: OtlpReceiver
) -> None:
    """Three runtimes share one store: one submits, a first worker starts the run and dies
    in its second model call, a second worker takes it over and ends it. The trace context
    stored with the queued run makes both attempts children of the submission's span."""
    home = home_with(tmp_path, telemetry_on(receiver))
    folder = str(project.resolve())
    async with AgentRuntime(project, home, model=ScriptedModel([])) as submitter:
        run_id = await submitter.submit(USER_WORDS)
        stored = await submitter.queued_run(run_id)
        assert stored.options.trace_parent is not None
    first_model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("read_file", {"path": "notes.txt"}), usage=USAGE),
            ScriptedResponse.text("never seen", delay_s=30),
        ]
    )
    async with AgentRuntime(project, home, model=first_model) as dying:
        adapters = dying._container.adapters
        queue = adapters.run_queue()
        lease = await queue.claim("dead", [folder], lease_s=5, max_attempts=3, now=1e9)
        assert lease is not None
        service = dying._container.services.run_service()
        cut = await start_queued(service, adapters.session_store(), lease)
        for _ in range(600):  # until the second model call is under way
            if len(first_model.calls) == 2:
                break
            await asyncio.sleep(0.05)
        assert (await cut.cancel()) is not None  # the worker is gone
    second_model = ScriptedModel([ScriptedResponse.text(ANSWER_WORDS, usage=USAGE)])
    async with AgentRuntime(project, home, model=second_model) as taking_over:
        adapters = taking_over._container.adapters
        lease = await adapters.run_queue().claim(
            "alive", [folder], lease_s=5, max_attempts=3, now=2e9
        )
        assert lease is not None and lease.run.id == run_id
        service = taking_over._container.services.run_service()
        result = await (await start_queued(service, adapters.session_store(), lease)).wait()
        assert result.status == "completed", result.reason
    spans = receiver.spans
    [submitted] = by_name(spans, "submit_run")
    attempts = sorted(
        (s for s in spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent"),
        key=lambda s: s.start_ns,
    )
    assert [s.attributes["soong_agent.run.id"] for s in attempts] == [run_id, f"{run_id}-2"]
    assert [s.attributes["soong_agent.run.status"] for s in attempts] == ["cancelled", "completed"]
    assert {s.trace_id for s in spans} == {submitted.trace_id}  # one trace
    assert [s.parent_span_id for s in attempts] == [submitted.span_id] * 2
    cut = max(
        (s for s in spans if s.parent_span_id == attempts[0].span_id and s.name.startswith("chat")),
        key=lambda s: s.start_ns,
    )
    assert "gen_ai.response.finish_reasons" not in cut.attributes  # cut off, not finished
    [waited] = receiver.metric("soong_agent.queue.claim_latency")
    assert waited.count == 1 and waited.attributes["soong_agent.worker"] == "dead"


def test_bad_telemetry_settings_are_refused_naming_them(
    tmp_path: Path, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from soong_agent import ConfigError

    home = home_with(tmp_path, '[telemetry]\nenabled = true\nendpoint = "collector:4318"\n')
    with pytest.raises(ConfigError, match=r"telemetry\.endpoint.*http:// or https://"):
        AgentRuntime(project_dir=project, home=home, model=scripted())
    home = home_with(tmp_path, "[telemetry]\nenabled = true\n")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    runtime = AgentRuntime(project_dir=project, home=home, model=scripted())
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL: expected"):
        runtime._container.adapters.telemetry()
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_PROTOCOL")
    # without the otel extra: said, with how to install it
    monkeypatch.setitem(sys.modules, "soong_agent.adapters.telemetry.exporters", None)
    runtime = AgentRuntime(project_dir=project, home=home, model=scripted())
    with pytest.raises(ConfigError, match=r"pip install 'soong-agent\[otel\]'"):
        runtime._container.adapters.telemetry()


async def test_the_otel_variables_say_where_to_send(
    tmp_path: Path, project: Path, receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-the-environment")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "team=garden,region=eu")
    await run_once(home_with(tmp_path, "[telemetry]\nenabled = true\n"), project)
    [root] = [s for s in receiver.spans if s.name == "invoke_agent soong-agent"]
    assert root.resource["service.name"] == "from-the-environment"
    assert (root.resource["team"], root.resource["region"]) == ("garden", "eu")


async def test_otlp_over_grpc(tmp_path: Path, project: Path) -> None:
    receiver = GrpcOtlpReceiver()
    try:
        config = telemetry_on(receiver).replace("[telemetry]\n", '[telemetry]\nprotocol = "grpc"\n')
        await run_once(home_with(tmp_path, config), project)
        names = {s.name for s in receiver.spans}
        assert {"invoke_agent soong-agent", "execute_tool write_file", "chat test-model"} <= names
        assert receiver.metric("soong_agent.runs")
    finally:
        receiver.close()
