"""Caching that pays (PROV-7): how much of a long Anthropic session's input is read from the
prompt cache, and what that saves.

A scripted 30-turn session (3 user messages, each followed by a tool loop of 9 read_file
calls and an answer: 30 model calls) runs through the SDK (the real loop, system prompt, tools
and Anthropic adapter) against the strict loopback Anthropic fake, which computes every
answer's `input_tokens`, `cache_creation_input_tokens` and `cache_read_input_tokens` from the
request as the API documents its prompt cache (writes at breakpoints, reads of the longest
written prefix at or up to ~20 blocks before a breakpoint; tests/support/anthropic_cache.py).

The same session runs twice, each against a fresh cache:

- with the breakpoints the adapter sets (system prompt, tools, the two newest user turns);
- with the conversation's breakpoints removed on the way out (system prompt and tools only,
  as before issue 35), by an HTTP transport that rewrites the request body.

Printed: the share of input tokens billed as cache reads from turn 3 on (target >= 80 %), and
the session's cost at Claude Sonnet prices ($3 input, $15 output, $0.30 cache read, $3.75
cache write per million tokens) with and without the conversation's breakpoints.

    python benchmarks/bench_caching.py [--files 12] [--file-bytes 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from soong_agent import AgentRuntime
from soong_agent.adapters.providers.anthropic_messages import AnthropicMessagesProvider
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.ports.events import UsageEvent
from soong_agent.ports.streaming import Usage
from tests.support import fake_anthropic
from tests.support.fake_anthropic import FakeAnthropicServer

MODEL = "claude-sonnet-4-5"
PRICE = (3.0, 15.0, 0.30, 3.75)  # input, output, cache read, cache write ($ per Mtok)
RUNS = 3
CALLS_PER_RUN = 9
QUESTIONS = [
    "Read the notes one by one and tell me what they have in common.",
    "Now read them again and list the words they repeat.",
    "One last pass: which note is the longest?",
]


class WithoutConversationBreakpoints(httpx.AsyncBaseTransport):
    """Forwards each request with the `cache_control` of its messages removed (the system
    prompt's and the last tool's stay): the breakpoints before issue 35."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(await request.aread())
        for message in body.get("messages", []):
            for block in message["content"]:
                block.pop("cache_control", None)
        content = json.dumps(body, ensure_ascii=False).encode()
        headers = {k: v for k, v in request.headers.items() if k.lower() != "content-length"}
        rewritten = httpx.Request(request.method, request.url, headers=headers, content=content)
        return await self._inner.handle_async_request(rewritten)

    async def aclose(self) -> None:
        await self._inner.aclose()


def write_world(folder: Path, base_url: str, files: int, file_bytes: int) -> tuple[Path, Path]:
    home, project = folder / "home", folder / "project"
    home.mkdir(parents=True)
    project.mkdir(parents=True)
    (home / "config.toml").write_text(
        "[model]\n"
        'provider = "anthropic"\n'
        f'base_url = "{base_url}"\n'
        'api_key_env = ""\n'
        f'name = "{MODEL}"\n'
        "[model.price]\n"
        f"input_per_mtok = {PRICE[0]}\n"
        f"output_per_mtok = {PRICE[1]}\n"
        f"cache_read_per_mtok = {PRICE[2]}\n"
        f"cache_write_per_mtok = {PRICE[3]}\n",
        encoding="utf-8",
    )
    line = "the quick brown fox jumps over the lazy dog, and the dog sleeps on\n"
    for i in range(files):
        text = f"note {i}\n" + (line * (file_bytes // len(line) + 1))[:file_bytes]
        (project / f"note{i:02}.txt").write_text(text, encoding="utf-8")
    return home, project


def script(server: FakeAnthropicServer, files: int) -> None:
    for run in range(RUNS):
        for call in range(CALLS_PER_RUN):
            n = run * CALLS_PER_RUN + call
            path = f"note{n % files:02}.txt"
            server.enqueue(
                fake_anthropic.tool_call_response(
                    [(f"toolu_{n:03}", "read_file", json.dumps({"path": path}))],
                    text=f"Reading {path}.",
                    output_tokens=40,
                )
            )
        server.enqueue(
            fake_anthropic.text_response(
                f"Answer {run + 1}: they are all notes about a fox.", output_tokens=60
            )
        )


async def session(
    folder: Path, *, strip: bool, files: int, file_bytes: int
) -> list[tuple[Usage, float]]:
    """(usage, cost) of each model call of the 30-turn session."""
    with FakeAnthropicServer(prompt_cache=True) as server:
        script(server, files)
        home, project = write_world(folder, server.base_url, files, file_bytes)
        transport = WithoutConversationBreakpoints() if strip else httpx.AsyncHTTPTransport()
        async with httpx.AsyncClient(transport=transport) as client:
            provider = AnthropicMessagesProvider(
                client=client,
                base_url=server.base_url,
                model=MODEL,
                api_key=lambda: None,
                retry=RetryPolicy(max_attempts=1),
                timeout_s=30,
            )
            turns: list[tuple[Usage, float]] = []
            async with AgentRuntime(project_dir=project, home=home, model=provider) as runtime:
                session_id = None
                for question in QUESTIONS:
                    run = await runtime.run(question, session_id=session_id)
                    result = await run.wait()
                    if result.status != "completed":
                        raise SystemExit(f"the run ended {result.status}: {result.reason}")
                    session_id = run.session_id
                    turns += [
                        (e.usage, e.cost_usd or 0.0)
                        async for e in run.events()
                        if isinstance(e, UsageEvent)
                    ]
        if server.rejections:
            raise SystemExit(f"the strict server refused a request: {server.rejections[0]}")
    return turns


def share_read(turns: list[tuple[Usage, float]], first: int) -> float:
    usages = [u for u, _ in turns[first - 1 :]]
    read = sum(u.cache_read_tokens for u in usages)
    total = sum(u.input_tokens + u.cache_read_tokens + u.cache_write_tokens for u in usages)
    return read / total if total else 0.0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--file-bytes", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        rolling = asyncio.run(
            session(base / "rolling", strip=False, files=args.files, file_bytes=args.file_bytes)
        )
        before = asyncio.run(
            session(base / "before", strip=True, files=args.files, file_bytes=args.file_bytes)
        )
    print(f"{len(rolling)} turns ({RUNS} user messages, {CALLS_PER_RUN} tool calls each)")
    print(f"{'turn':>4} {'input':>8} {'written':>8} {'read':>8}   (with the rolling breakpoints)")
    for i, (u, _) in enumerate(rolling, start=1):
        print(f"{i:>4} {u.input_tokens:>8} {u.cache_write_tokens:>8} {u.cache_read_tokens:>8}")
    prompt = sum(u.input_tokens + u.cache_read_tokens + u.cache_write_tokens for u, _ in rolling)
    print(f"input tokens over the session: {prompt}")
    for label, turns in (("rolling breakpoints", rolling), ("system + tools only", before)):
        share = share_read(turns, first=3)
        cost = sum(c for _, c in turns)
        print(f"{label:>20}: {share:6.1%} of input read from the cache from turn 3 on; ", end="")
        print(f"cost ${cost:.4f}")
    saved = 1 - sum(c for _, c in rolling) / sum(c for _, c in before)
    target = share_read(rolling, first=3) >= 0.8
    verdict = "met" if target else "MISSED"
    print(f"the rolling breakpoints cost {saved:.1%} less; target >= 80 % read: {verdict}")
    return 0 if target else 1


if __name__ == "__main__":
    raise SystemExit(main())
