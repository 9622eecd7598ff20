"""The metrics of runs (OBS-1): one set of instruments per meter, named after the OpenTelemetry
GenAI semantic conventions where they name one (`gen_ai.client.*`), `soong_agent.*` otherwise."""

from __future__ import annotations

from opentelemetry.metrics import Meter

# the conventions' advice for token counts and seconds
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
SECOND_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96)


class Instruments:
    """What a run's events are counted into."""

    def __init__(self, meter: Meter) -> None:
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens of one model call, by gen_ai.token.type and model",
            explicit_bucket_boundaries_advisory=TOKEN_BUCKETS,
        )
        self.duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="How long a model call took, to its last token",
            explicit_bucket_boundaries_advisory=SECOND_BUCKETS,
        )
        self.first_token = meter.create_histogram(
            "soong_agent.model.time_to_first_token",
            unit="s",
            description="From a model request to the first piece of its answer",
            explicit_bucket_boundaries_advisory=SECOND_BUCKETS,
        )
        self.cost = meter.create_counter(
            "soong_agent.cost", unit="USD", description="What model calls cost, by model"
        )
        self.tool_calls = meter.create_counter(
            "soong_agent.tool.calls",
            unit="{call}",
            description="Tool calls, by tool and permission decision",
        )
        self.runs = meter.create_counter(
            "soong_agent.runs", unit="{run}", description="Runs ended, by final status"
        )
        self.compactions = meter.create_counter(
            "soong_agent.compactions",
            unit="{compaction}",
            description="Context compactions, by strategy and trigger",
        )
        self.sandbox_denials = meter.create_counter(
            "soong_agent.sandbox.denials",
            unit="{denial}",
            description="What the OS sandbox or the network proxy refused commands, by kind",
        )
        self.queue_depth = meter.create_gauge(
            "soong_agent.queue.depth",
            unit="{run}",
            description="Runs waiting in the queue, as a worker last saw it",
        )
        self.claim_latency = meter.create_histogram(
            "soong_agent.queue.claim_latency",
            unit="s",
            description="From a run's submission to a worker claiming it",
            explicit_bucket_boundaries_advisory=SECOND_BUCKETS,
        )
