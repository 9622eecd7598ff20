"""How fast AnthropicMessagesProvider turns a Messages SSE stream into events.

Builds ~20,000 events in the API's exact order and shapes (a text block of text deltas, plus
one tool_use block whose input arrives in 2,000 input_json_delta fragments), serves them
through httpx.MockTransport in 4-16 KiB byte pieces, and compares the provider with a bare
baseline that only splits lines and runs json.loads on the data lines:

    python benchmarks/bench_stream_parse_anthropic.py [--repeats 7] [--events 20000]

Target: provider throughput >= 0.75 x baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from typing import Any

import httpx
from stream_support import make_client, split_pieces

from soong_agent.adapters.providers.anthropic_messages import AnthropicMessagesProvider
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.ports.messages import user_text
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import StreamFinished, TextDelta, ToolCallReady

BASE_URL = "http://bench.invalid"
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "parsing", "SSE"]


def build_stream(n_events: int, tool_fragments: int, seed: int = 7) -> tuple[bytes, int]:
    """About `n_events` events in the Messages streaming format; returns the bytes and the
    exact number of events."""
    rng = random.Random(seed)
    out: list[str] = []

    def emit(obj: dict[str, Any]) -> None:
        out.append(f"event: {obj['type']}\ndata: {json.dumps(obj, separators=(',', ':'))}\n\n")

    emit(
        {
            "type": "message_start",
            "message": {
                "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-5-20250929",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 472,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 4096,
                    "output_tokens": 2,
                    "service_tier": "standard",
                },
            },
        }
    )
    emit({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    out.append('event: ping\ndata: {"type": "ping"}\n\n')
    # the other events: message_start, ping, 2 x block start and stop, 3 more input_json_delta
    # (empty first, head, tail), message_delta, message_stop
    n_text = n_events - tool_fragments - 11
    for _ in range(n_text):
        emit(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": " " + rng.choice(WORDS)},
            }
        )
    emit({"type": "content_block_stop", "index": 0})
    emit(
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
                "name": "write_file",
                "input": {},
            },
        }
    )
    pieces = ["", '{"path":"a.txt","content":"']
    pieces += [rng.choice(WORDS) + " " for _ in range(tool_fragments)]
    pieces.append('"}')
    for piece in pieces:
        emit(
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
        )
    emit({"type": "content_block_stop", "index": 1})
    emit(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": n_events},
        }
    )
    emit({"type": "message_stop"})
    return "".join(out).encode(), len(out)


async def run_baseline(client: httpx.AsyncClient) -> int:
    count = 0
    async with client.stream("POST", BASE_URL + "/v1/messages", content=b"{}") as response:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                json.loads(line[6:])
                count += 1
    return count


async def run_provider(provider: AnthropicMessagesProvider, request: ModelRequest) -> int:
    texts = calls = 0
    finished = False
    async for event in provider.stream(request):
        if isinstance(event, TextDelta):
            texts += 1
        elif isinstance(event, ToolCallReady):
            calls += 1
        elif isinstance(event, StreamFinished):
            finished = True
    assert finished and calls == 1, (finished, calls)
    return texts


async def main(n_events: int, tool_fragments: int, repeats: int) -> None:
    data, n = build_stream(n_events, tool_fragments)
    pieces = split_pieces(data)
    print(
        f"stream: {n:,} events, {len(data) / 1024:,.0f} KiB in {len(pieces)} pieces "
        f"(4-16 KiB), tool input in {tool_fragments + 3:,} input_json_delta fragments"
    )
    request = ModelRequest(system=[], messages=[user_text("bench")])
    async with make_client(pieces, "text/event-stream") as client:
        provider = AnthropicMessagesProvider(
            client=client,
            base_url=BASE_URL,
            model="claude-sonnet-4-5",
            api_key=lambda: "sk-ant-bench",
            retry=RetryPolicy(max_attempts=1),
            timeout_s=60,
        )
        assert await run_baseline(client) == n
        await run_provider(provider, request)  # warm up both paths

        base_times: list[float] = []
        prov_times: list[float] = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            await run_baseline(client)
            base_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await run_provider(provider, request)
            prov_times.append(time.perf_counter() - t0)

    def rate(seconds: float) -> float:
        return n / seconds

    b_best, b_med = rate(min(base_times)), rate(statistics.median(base_times))
    p_best, p_med = rate(min(prov_times)), rate(statistics.median(prov_times))
    for name, best, med in (
        ("baseline (aiter_lines + json.loads)", b_best, b_med),
        ("AnthropicMessagesProvider.stream", p_best, p_med),
    ):
        print(f"{name:<36}: best {best:>10,.0f} events/s  median {med:>10,.0f} events/s")
    print(
        f"ratio provider/baseline: best {p_best / b_best:.2f}  median {p_med / b_med:.2f} "
        "(target >= 0.75)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--tool-fragments", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.tool_fragments, args.repeats))
