"""The TokenCounter contract: ApproxTokenCounter (both ways it loads) and the real o200k counter."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from soong_agent.adapters.tokens.o200k import O200kTokenCounter
from soong_agent.ports.system import TokenCounter
from soong_agent.testing import ApproxTokenCounter

FACTORIES: dict[str, Callable[[], TokenCounter]] = {
    "approx": ApproxTokenCounter,
    "approx_loading": lambda: ApproxTokenCounter(loaded=False),
    "o200k": O200kTokenCounter,
}

ODD_TEXTS = [
    "<|endoftext|>",
    "<|im_start|>system",
    "\udcff lone surrogate \ud800",
    "\x00\x01\x02",
    "é" * 1000,
    "😀👍🏽" * 50,
    " \n\t " * 100,
    "a" * 200_000,
]


@pytest.fixture(params=sorted(FACTORIES))
def counter(request: pytest.FixtureRequest) -> TokenCounter:
    return FACTORIES[request.param]()


def test_implements_the_port(counter: TokenCounter) -> None:
    assert isinstance(counter, TokenCounter)
    assert isinstance(counter.loaded, bool)


def test_empty_text_costs_nothing_and_any_text_costs_something(counter: TokenCounter) -> None:
    assert counter.count("") == 0
    for text in ("a", " ", "\n", "é", "hello world"):
        assert counter.count(text) >= 1, text


@pytest.mark.parametrize("text", ODD_TEXTS, ids=range(len(ODD_TEXTS)))
def test_any_str_is_counted_without_raising(counter: TokenCounter, text: str) -> None:
    n = counter.count(text)
    assert 1 <= n <= len(text.encode("utf-8", "surrogatepass"))
    assert counter.count(text) == n  # deterministic


def test_counts_grow_with_the_text(counter: TokenCounter) -> None:
    words = "the quick brown fox jumps over the lazy dog. "
    small, large = counter.count(words), counter.count(words * 100)
    assert small < large
    assert 50 * small <= large <= 150 * small
    # an English text costs about one token per 3 to 6 characters
    assert len(words * 100) / 8 <= large <= len(words * 100) / 2


def test_a_count_leaves_the_counter_loaded(counter: TokenCounter) -> None:
    counter.count("hello")
    assert counter.loaded


def test_warm_up_returns_at_once_and_then_the_counter_is_loaded(counter: TokenCounter) -> None:
    started = time.monotonic()
    result: object = counter.warm_up()  # type: ignore[func-returns-value]
    assert result is None
    assert time.monotonic() - started < 0.5
    deadline = time.monotonic() + 60
    while not counter.loaded:
        assert time.monotonic() < deadline, "warm_up never finished loading"
        time.sleep(0.01)
    counter.warm_up()  # again: nothing to do
    assert counter.loaded
    assert counter.count("hello") >= 1


def test_remembered_is_the_count_once_loaded_and_never_loads(counter: TokenCounter) -> None:
    text = "a prompt that stays the same run after run. " * 100
    if not counter.loaded:
        assert counter.remembered(text) is None  # nothing kept, nothing loaded for it
        assert not counter.loaded
    counted = counter.count(text)
    assert counter.remembered(text) == counted
