"""Telemetry through the installed CLI (OBS-1), to an OTLP/HTTP receiver on loopback: `run`
sends its trace and metrics before it exits, with no key or message text in them; a run queued
with `run --detach` in one process and run by a `worker` in another is one trace."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import CANARY, CLI, CliWorld
from tests.support.fake_openai import text_response
from tests.support.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.e2e

WAIT_S = 60.0


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    server = OtlpReceiver()
    yield server
    server.close()


def with_telemetry(world: CliWorld, receiver: OtlpReceiver) -> None:
    config = world.home / "config.toml"
    config.write_text(
        config.read_text(encoding="utf-8")
        + f'[telemetry]\nenabled = true\nendpoint = "{receiver.endpoint}"\n'
        + "[workers]\nheartbeat_ms = 200\nlease_timeout_ms = 1500\n",
        encoding="utf-8",
    )


def test_run_sends_its_trace_and_metrics_before_it_exits(
    world: CliWorld, receiver: OtlpReceiver
) -> None:
    with_telemetry(world, receiver)
    world.server.enqueue(text_response("the-answer-words"))
    done = world.run("run", "say-the-question-words")
    assert done.returncode == 0, done.stderr
    names = [s.name for s in receiver.spans]
    assert "invoke_agent soong-agent" in names and "chat fake-model" in names
    [run] = [s for s in receiver.spans if s.name.startswith("invoke_agent")]
    assert run.attributes["gen_ai.provider.name"] == "openai"
    assert run.resource["service.name"] == "soong-agent"
    assert receiver.metric("gen_ai.client.operation.duration")
    sent = b"".join(receiver.bodies)
    for text in (CANARY, "say-the-question-words", "the-answer-words", world.server.base_url):
        assert text.encode() not in sent, text


def test_a_detached_run_and_its_worker_are_one_trace(
    world: CliWorld, receiver: OtlpReceiver
) -> None:
    with_telemetry(world, receiver)
    done = world.run("run", "--detach", "queued-question-words")
    assert done.returncode == 0, done.stderr
    run_id = dict(line.split(": ", 1) for line in done.stdout.strip().splitlines())["run"]
    [submitted] = [s for s in receiver.spans if s.name == "submit_run"]  # sent at its exit
    world.server.enqueue(text_response("queued-answer-words"))
    worker = subprocess.Popen(
        [str(CLI), "worker", "--project", str(world.project), "--id", "w1"],
        env=world.env,
        cwd=world.project,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        waited = world.run("runs", "wait", run_id, "--timeout", str(WAIT_S))
        assert waited.returncode == 0, waited.stdout + waited.stderr
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=WAIT_S) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.communicate(timeout=WAIT_S)
    [run] = [s for s in receiver.spans if s.name.startswith("invoke_agent")]
    assert run.attributes["soong_agent.run.id"] == run_id
    assert (run.trace_id, run.parent_span_id) == (submitted.trace_id, submitted.span_id)
    [claimed] = receiver.metric("soong_agent.queue.claim_latency")
    assert claimed.attributes["soong_agent.worker"] == "w1"
    [depth] = receiver.metric("soong_agent.queue.depth", **{"soong_agent.worker": "w1"})
    assert depth.value in (0, 1)  # the last count: before or after it claimed the run
