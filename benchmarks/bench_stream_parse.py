"""How fast OpenAIChatProvider turns a Chat Completions SSE stream into events.

Builds 20,000 realistic chunks in memory (text deltas, plus one tool call whose arguments arrive
in 2,000 fragments), serves them through httpx.MockTransport in 4-16 KiB byte pieces, and
compares the provider with a bare baseline that only splits lines and runs json.loads:

    python benchmarks/bench_stream_parse.py [--repeats 7] [--chunks 20000]

Target: provider throughput >= 0.75 x baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time

import httpx
from stream_support import make_client, split_pieces

from soong_agent.adapters.providers.openai_chat import OpenAIChatProvider
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.ports.messages import user_text
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import StreamFinished, TextDelta, ToolCallReady

BASE_URL = "http://bench.invalid/v1"
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "parsing", "SSE"]


def build_stream(n_chunks: int, tool_fragments: int, seed: int = 7) -> bytes:
    """`n_chunks` chunk events in OpenAI's exact streaming format, plus usage and [DONE]."""
    rng = random.Random(seed)
    head = {
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion.chunk",
        "created": 1_741_569_952,
        "model": "gpt-4o-2024-08-06",
        "system_fingerprint": "fp_f9f4fb6dbf",
    }
    out: list[str] = []

    def emit(delta: dict[str, object], finish: str | None = None) -> None:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        obj = {**head, "choices": [choice], "usage": None}
        out.append("data: " + json.dumps(obj, separators=(",", ":")) + "\n\n")

    emit({"role": "assistant", "content": "", "refusal": None})
    n_text = n_chunks - tool_fragments - 3  # role, tool head, finish
    for _ in range(n_text):
        emit({"content": " " + rng.choice(WORDS)})
    emit(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_Bench123",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": ""},
                }
            ]
        }
    )
    for i in range(tool_fragments - 1):
        piece = '{"path":"a.txt","content":"' if i == 0 else rng.choice(WORDS) + " "
        emit({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    emit({"tool_calls": [{"index": 0, "function": {"arguments": '"}'}}]})
    emit({}, "tool_calls")
    usage = {
        "prompt_tokens": 5000,
        "completion_tokens": n_chunks,
        "total_tokens": 5000 + n_chunks,
        "prompt_tokens_details": {"cached_tokens": 4096, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }
    out.append("data: " + json.dumps({**head, "choices": [], "usage": usage}) + "\n\n")
    out.append("data: [DONE]\n\n")
    return "".join(out).encode()


async def run_baseline(client: httpx.AsyncClient) -> int:
    count = 0
    async with client.stream("POST", BASE_URL + "/chat/completions", content=b"{}") as response:
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                json.loads(line[6:])
                count += 1
    return count


async def run_provider(provider: OpenAIChatProvider, request: ModelRequest) -> int:
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


async def main(n_chunks: int, tool_fragments: int, repeats: int) -> None:
    data = build_stream(n_chunks, tool_fragments)
    pieces = split_pieces(data)
    print(
        f"stream: {n_chunks:,} chunks, {len(data) / 1024:,.0f} KiB in {len(pieces)} pieces "
        f"(4-16 KiB), tool call in {tool_fragments:,} fragments"
    )
    request = ModelRequest(system=[], messages=[user_text("bench")])
    async with make_client(pieces, "text/event-stream") as client:
        provider = OpenAIChatProvider(
            client=client,
            base_url=BASE_URL,
            model="gpt-4o",
            api_key=lambda: "sk-bench",
            retry=RetryPolicy(max_attempts=1),
            timeout_s=60,
        )
        assert await run_baseline(client) == n_chunks + 1  # + the usage chunk
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
        return n_chunks / seconds

    b_best, b_med = rate(min(base_times)), rate(statistics.median(base_times))
    p_best, p_med = rate(min(prov_times)), rate(statistics.median(prov_times))
    for name, best, med in (
        ("baseline (aiter_lines + json.loads)", b_best, b_med),
        ("OpenAIChatProvider.stream", p_best, p_med),
    ):
        print(f"{name:<36}: best {best:>10,.0f} chunks/s  median {med:>10,.0f} chunks/s")
    print(
        f"ratio provider/baseline: best {p_best / b_best:.2f}  median {p_med / b_med:.2f} "
        "(target >= 0.75)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--tool-fragments", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.chunks, args.tool_fragments, args.repeats))
