"""What recall (MEM-4) and prompt assembly cost before a run, with 2,000 memories and 200 skills.

Recall reads the catalogue, ranks it with BM25 (the lexical path: here the recall model fails
at once, so nothing but our own work is timed; the model path is timed with an instant scripted
answer), reads the chosen memories and renders the memory part; the prompt assembly then builds
the whole system prompt (tools, the 200-skill catalogue, the memory part, environment) the way
`RunAssembler.system_prompt` does for every run. Printed: the median milliseconds over ROUNDS
rounds, each with another message, of

- recall, lexical, cold: a new `MemoryRecall` each round (a CLI call: one run per process, so
  the BM25 index is built every time), over the in-memory fake store and over a real memory
  folder of 2,000 files (`FileMemoryStore`: the catalogue is a scan of the folder);
- recall, lexical, warm: one `MemoryRecall` kept (an SDK runtime serving many runs);
- recall, model path: an instant scripted answer naming five memories;
- prompt assembly with the recalled memory part, and without memory;
- the one-time first use in a process (importing rank-bm25 and numpy).

    python benchmarks/bench_memory.py [--memories 2000] [--skills 200] [--rounds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from soong_agent.adapters.memory import FileMemoryStore
from soong_agent.application.memory.recall import MemoryRecall, RecallSettings
from soong_agent.application.runs.assembler import RunAssembler, RunPolicies, RunPorts
from soong_agent.application.tools.base import ToolRegistry
from soong_agent.application.tools.files import file_tools
from soong_agent.application.tools.skills import skills_tool
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.memory import Memory, MemoryStore
from soong_agent.ports.skills import Skill
from soong_agent.testing import (
    FixedClock,
    InMemoryFileSystem,
    InMemoryMemoryStore,
    InMemorySessionStore,
    InMemorySkillSource,
    ScriptedModel,
    ScriptedResponse,
    SequentialIds,
    StaticContextSource,
)

TOPICS = [
    "tabs",
    "wiki",
    "deploy",
    "tests",
    "review",
    "python",
    "docker",
    "ci",
    "api",
    "logging",
    "release",
    "database",
]
MESSAGES = [
    f"please fix the {a} setup and check the {b} before the {c}"
    for a in TOPICS
    for b in TOPICS[::-1]
    for c in ("release", "review", "demo")
]


def memories(count: int) -> list[Memory]:
    return [
        Memory(
            name=f"memory_{i:04d}",
            description=(
                f"Note {i}: how the team handles {TOPICS[i % len(TOPICS)]} and "
                f"{TOPICS[(i * 7) % len(TOPICS)]}"
            ),
            category=("user", "feedback", "reference")[i % 3],
            body=f"Memory {i}. " + "Some lasting detail worth keeping. " * 8,
        )
        for i in range(count)
    ]


def fake_store(items: list[Memory]) -> InMemoryMemoryStore:
    store = InMemoryMemoryStore()
    for memory in items:
        store.put_file(memory)
    store.repair_index()
    return store


def file_store(folder: Path, items: list[Memory]) -> FileMemoryStore:
    """A real memory folder: the files written directly, then the index rebuilt once."""
    from soong_agent.adapters.memory.codec import dump, utc

    now = utc(1_767_225_600.0)
    for memory in items:
        target = folder / memory.category / f"{memory.name}.md"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(dump(memory, created=now, updated=now), encoding="utf-8")
    store = FileMemoryStore(folder)
    store.repair_index()
    return store


def skills(count: int) -> InMemorySkillSource:
    return InMemorySkillSource(
        Skill(
            name=f"skill-{i:03d}",
            description=f"Use when the task is about {TOPICS[i % len(TOPICS)]} number {i}",
            body=f"Steps for skill {i}.",
            source=f"/home/user/.soong-agent/skills/skill-{i:03d}.md",
        )
        for i in range(count)
    )


def failing_model() -> ScriptedModel:
    def fail(_request: object) -> ScriptedResponse:
        raise ProviderError("down", kind="server", provider="bench", base_url="memory://bench")

    return ScriptedModel(default=fail, strict=False)


def assembler(source: InMemorySkillSource) -> tuple[RunAssembler, ToolRegistry]:
    ports = RunPorts(
        provider=ScriptedModel(),
        store=InMemorySessionStore(),
        fs=InMemoryFileSystem(),
        context=StaticContextSource(),
        clock=FixedClock(),
        ids=SequentialIds(),
        skills=source,
    )
    tools = ToolRegistry([*file_tools(), skills_tool(source)])
    return RunAssembler(ports, RunPolicies()), tools


async def median_ms(rounds: int, work: Callable[[str], Awaitable[object]]) -> float:
    times = []
    for index in range(rounds):
        message = MESSAGES[index % len(MESSAGES)]
        started = time.perf_counter()
        await work(message)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--skills", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    items = memories(args.memories)
    settings = RecallSettings(top_k=5, catalog_max_tokens=2000, context_tokens=2000)
    fake = fake_store(items)

    started = time.perf_counter()
    first = await MemoryRecall(fake, failing_model(), settings).recall(MESSAGES[0])
    first_ms = (time.perf_counter() - started) * 1000
    assert first is not None and first.method == "lexical" and first.names, first

    def cold(store: MemoryStore) -> Callable[[str], Awaitable[object]]:
        return lambda message: MemoryRecall(store, failing_model(), settings).recall(message)

    warm_recall = MemoryRecall(fake, failing_model(), settings)
    names = '["memory_0001", "memory_0002", "memory_0003", "memory_0004", "memory_0005"]'
    model_recall = MemoryRecall(
        fake, ScriptedModel(default=ScriptedResponse.text(names), strict=False), settings
    )
    source = skills(args.skills)
    built, tools = assembler(source)
    memory_text = first.text

    async def assemble(_message: str) -> object:
        return built.system_prompt(tools, None, memory_text)

    async def assemble_bare(_message: str) -> object:
        return built.system_prompt(tools)

    async def recall_and_assemble(message: str) -> object:
        chosen = await MemoryRecall(fake, failing_model(), settings).recall(message)
        assert chosen is not None
        return built.system_prompt(tools, None, chosen.text)

    rounds = args.rounds
    with tempfile.TemporaryDirectory() as tmp:
        files = file_store(Path(tmp) / "memory", items)
        rows = [
            ("recall, lexical, cold (fake store)", await median_ms(rounds, cold(fake))),
            ("recall, lexical, cold (memory folder)", await median_ms(rounds, cold(files))),
            ("recall, lexical, warm (fake store)", await median_ms(rounds, warm_recall.recall)),
            ("recall, model path, instant answer", await median_ms(rounds, model_recall.recall)),
            ("prompt assembly with the memory part", await median_ms(rounds, assemble)),
            ("prompt assembly without memory", await median_ms(rounds, assemble_bare)),
            (
                "recall (lexical, cold) + prompt assembly",
                await median_ms(rounds, recall_and_assemble),
            ),
        ]
    print(
        f"{args.memories} memories, {args.skills} skills, median of {rounds} rounds "
        f"(first use in the process, imports included: {first_ms:.1f} ms)"
    )
    for label, ms in rows:
        print(f"  {label:<42} {ms:8.2f} ms")
    part = next(p for p in built.system_prompt(tools, None, memory_text) if p.label == "memory")
    print(
        f"  memory part: {len(first.names)} memories, {len(part.text)} characters "
        f"(budget {settings.context_tokens} tokens ≈ {settings.context_tokens * 4} characters)"
    )


if __name__ == "__main__":
    asyncio.run(main())
