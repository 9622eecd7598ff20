"""The context budget split (CTX-4), fitted to the model's window."""

from __future__ import annotations

import pytest

from soong_agent.domain.budget import (
    MIN_MESSAGE_ROOM,
    OUTPUT_FLOOR,
    ContextBudget,
    compute_budget,
)
from soong_agent.domain.config.schema import CompactConfig, ContextConfig


def budget(
    window: int,
    reserve: int,
    system: int,
    non_system: int | None,
    compact_reserve: int,
    *,
    system_tokens: int = 0,
) -> ContextBudget:
    return compute_budget(
        context_window=window,
        context=ContextConfig(
            reserve_output_tokens=reserve,
            dynamic_system_budget=system,
            non_system_budget=non_system,
        ),
        compact=CompactConfig(reserve_tokens=compact_reserve),
        system_tokens=system_tokens,
    )


@pytest.mark.parametrize(
    ("window", "reserve", "system", "explicit", "compact_reserve", "non_system", "trigger"),
    [
        # the reserves fit in half the window: used as configured
        (128_000, 8_192, 12_000, None, 16_384, 107_808, 91_424),
        (200_000, 0, 0, None, 0, 200_000, 200_000),
        # explicit and smaller than what is left: used as is
        (200_000, 8_192, 12_000, 50_000, 16_384, 50_000, 33_616),
        # explicit but larger than what is left: capped
        (32_000, 4_000, 8_000, 100_000, 1_000, 20_000, 19_000),
        # compaction reserve larger than half an explicit message budget: capped at half
        (200_000, 4_000, 8_000, 50_000, 40_000, 50_000, 25_000),
    ],
)
def test_budget_split_table(
    window: int,
    reserve: int,
    system: int,
    explicit: int | None,
    compact_reserve: int,
    non_system: int,
    trigger: int,
) -> None:
    b = budget(window, reserve, system, explicit, compact_reserve)
    assert (b.window, b.reserve_output, b.system) == (window, reserve, system)
    assert (b.non_system, b.compact_trigger) == (non_system, trigger)
    assert not b.scaled
    assert b.input_limit == window - reserve
    assert b.system + b.non_system <= b.input_limit


def test_defaults_of_the_config_on_a_large_window_are_used_as_configured() -> None:
    b = compute_budget(context_window=128_000, context=ContextConfig(), compact=CompactConfig())
    assert (b.reserve_output, b.system) == (8_192, 12_000)
    assert b.non_system == 128_000 - 8_192 - 12_000
    assert b.compact_trigger == b.non_system - 16_384
    assert (b.keep_recent, b.max_summary) == (20_000, 4_000)


@pytest.mark.parametrize("window", [4_096, 8_192, 16_384, 32_768, 36_576, 65_536])
def test_default_reserves_are_scaled_to_small_windows(window: int) -> None:
    """The seed's defaults (36,576 tokens of reserves) would leave a zero trigger below ~36.5k."""
    b = compute_budget(context_window=window, context=ContextConfig(), compact=CompactConfig())
    assert b.scaled
    reserves = b.reserve_output + b.system + b.compact_reserve
    assert reserves <= window // 2 + OUTPUT_FLOOR
    assert b.compact_trigger >= b.non_system // 2 > 0
    assert b.non_system >= MIN_MESSAGE_ROOM
    assert b.keep_recent <= b.compact_trigger // 2
    assert b.max_summary <= max(128, b.compact_trigger // 4)
    assert b.reserve_output >= OUTPUT_FLOOR


def test_scaling_is_proportional_with_an_output_floor() -> None:
    b = compute_budget(context_window=8_192, context=ContextConfig(), compact=CompactConfig())
    factor = 4_096 / (8_192 + 12_000 + 16_384)
    assert b.scale == pytest.approx(factor)
    assert b.reserve_output == int(8_192 * factor)
    assert b.system == int(12_000 * factor)
    small = compute_budget(context_window=4_096, context=ContextConfig(), compact=CompactConfig())
    assert small.reserve_output == OUTPUT_FLOOR  # 8,192 x 0.056 would be 458


def test_a_configured_output_reserve_below_the_floor_is_kept() -> None:
    b = budget(4_096, 100, 12_000, None, 16_384)
    assert b.reserve_output < OUTPUT_FLOOR


def test_a_measured_system_prompt_larger_than_its_budget_counts_as_measured() -> None:
    b = compute_budget(context_window=8_192, context=ContextConfig(), compact=CompactConfig())
    bigger = b.with_system(2_400)
    assert bigger.system == 2_400
    assert bigger.non_system == 8_192 - b.reserve_output - 2_400
    assert bigger.compact_trigger < b.compact_trigger
    assert b.with_system(b.system - 1) is b


@pytest.mark.parametrize("window", [1, 1_000, 2_048])
def test_window_too_small_names_the_numbers(window: int) -> None:
    with pytest.raises(ValueError) as info:
        compute_budget(
            context_window=window,
            context=ContextConfig(),
            compact=CompactConfig(),
            system_tokens=2_300,
        )
    message = str(info.value)
    assert f"context window of {window} tokens cannot work" in message
    assert "2300" in message
    assert "context_window" in message


def test_a_tiny_explicit_non_system_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="non_system_budget = 0"):
        budget(32_000, 4_000, 8_000, 0, 1_000)


def test_non_positive_window_is_rejected() -> None:
    with pytest.raises(ValueError, match="positive"):
        budget(0, 0, 0, None, 0)


def test_status_reports_the_turn_numbers() -> None:
    b = budget(100_000, 10_000, 10_000, None, 20_000)
    assert b.compact_trigger == 60_000
    assert not b.needs_compaction(60_000)
    assert b.needs_compaction(60_001)
    status = b.status(system_tokens=9_000, non_system_tokens=70_000)
    assert status.over_trigger
    assert not status.over_window
    assert status.as_dict() == {
        "window": 100_000,
        "reserve_output": 10_000,
        "system_budget": 10_000,
        "system_tokens": 9_000,
        "non_system_budget": 80_000,
        "non_system_tokens": 70_000,
        "compact_trigger": 60_000,
        "over_trigger": True,
        "over_window": False,
    }
    assert b.status(system_tokens=20_000, non_system_tokens=70_001).over_window


def test_describe_names_the_effective_numbers_and_the_scaling() -> None:
    b = compute_budget(context_window=8_192, context=ContextConfig(), compact=CompactConfig())
    line = b.describe()
    assert "window 8192" in line
    assert f"compaction at {b.compact_trigger}" in line
    assert "scaled by 0.11" in line


def test_budget_is_frozen() -> None:
    b = budget(100_000, 10_000, 10_000, None, 0)
    with pytest.raises(AttributeError):
        b.non_system = 1  # type: ignore[misc]
