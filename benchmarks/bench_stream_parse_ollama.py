"""How fast OllamaChatProvider turns an /api/chat NDJSON stream into events.

Builds 20,000 realistic lines in memory (content deltas, then one whole tool call and the final
line with the eval counts), serves them through httpx.MockTransport in 4-16 KiB byte pieces,
and compares the provider with a bare baseline that only splits lines (aiter_lines) and runs
json.loads:

    python benchmarks/bench_stream_parse_ollama.py [--repeats 7] [--lines 20000]

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

from soong_agent.adapters.providers.ollama_chat import OllamaChatProvider
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.ports.messages import user_text
from soong_agent.ports.model import ModelRequest
from soong_agent.ports.streaming import StreamFinished, TextDelta, ToolCallReady, UsageReported

BASE_URL = "http://bench.invalid"
MODEL = "qwen3:8b"
WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "parsing", "NDJSON"]


def build_stream(n_lines: int, seed: int = 7) -> bytes:
    """`n_lines` lines in Ollama's exact streaming format: content deltas, a tool call, the end."""
    rng = random.Random(seed)
    out: list[str] = []
    base_ns = 1_741_569_952_000_000_000

    def created(i: int) -> str:
        ns = base_ns + i * 21_734_512
        seconds, frac = divmod(ns, 1_000_000_000)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        return f"{stamp}.{frac:09d}Z"

    def emit(obj: dict[str, object]) -> None:
        out.append(json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n")

    n_text = n_lines - 2  # the tool call line and the final line
    for i in range(n_text):
        emit(
            {
                "model": MODEL,
                "created_at": created(i),
                "message": {"role": "assistant", "content": " " + rng.choice(WORDS)},
                "done": False,
            }
        )
    content = " ".join(rng.choice(WORDS) for _ in range(2_000))
    emit(
        {
            "model": MODEL,
            "created_at": created(n_text),
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_bench123",
                        "function": {
                            "index": 0,
                            "name": "write_file",
                            "arguments": {"path": "a.txt", "content": content},
                        },
                    }
                ],
            },
            "done": False,
        }
    )
    emit(
        {
            "model": MODEL,
            "created_at": created(n_text + 1),
            "message": {"role": "assistant", "content": ""},
            "done_reason": "stop",
            "done": True,
            "total_duration": 9_885_095_291,
            "load_duration": 3_753_500,
            "prompt_eval_count": 5000,
            "prompt_eval_duration": 328_493_000,
            "eval_count": n_lines,
            "eval_duration": 9_552_222_000,
        }
    )
    return "".join(out).encode()


async def run_baseline(client: httpx.AsyncClient) -> int:
    count = 0
    async with client.stream("POST", BASE_URL + "/api/chat", content=b"{}") as response:
        async for line in response.aiter_lines():
            if line:
                json.loads(line)
                count += 1
    return count


async def run_provider(provider: OllamaChatProvider, request: ModelRequest) -> int:
    texts = calls = 0
    finished = usage = False
    async for event in provider.stream(request):
        if isinstance(event, TextDelta):
            texts += 1
        elif isinstance(event, ToolCallReady):
            calls += 1
        elif isinstance(event, UsageReported):
            usage = True
        elif isinstance(event, StreamFinished):
            finished = event.stop_reason == "tool_use"
    assert finished and usage and calls == 1, (finished, usage, calls)
    return texts


async def main(n_lines: int, repeats: int) -> None:
    data = build_stream(n_lines)
    pieces = split_pieces(data)
    print(
        f"stream: {n_lines:,} NDJSON lines, {len(data) / 1024:,.0f} KiB in {len(pieces)} pieces "
        "(4-16 KiB), one whole tool call with ~12 KiB of arguments"
    )
    request = ModelRequest(system=[], messages=[user_text("bench")])
    async with make_client(pieces, "application/x-ndjson") as client:
        provider = OllamaChatProvider(
            client=client,
            base_url=BASE_URL,
            model=MODEL,
            api_key=lambda: None,
            retry=RetryPolicy(max_attempts=1),
            timeout_s=60,
        )
        assert await run_baseline(client) == n_lines
        assert await run_provider(provider, request) == n_lines - 2  # warm up both paths

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
        return n_lines / seconds

    b_best, b_med = rate(min(base_times)), rate(statistics.median(base_times))
    p_best, p_med = rate(min(prov_times)), rate(statistics.median(prov_times))
    for name, best, med in (
        ("baseline (aiter_lines + json.loads)", b_best, b_med),
        ("OllamaChatProvider.stream", p_best, p_med),
    ):
        print(f"{name:<36}: best {best:>10,.0f} lines/s  median {med:>10,.0f} lines/s")
    print(
        f"ratio provider/baseline: best {p_best / b_best:.2f}  median {p_med / b_med:.2f} "
        "(target >= 0.75)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.lines, args.repeats))
