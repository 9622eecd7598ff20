"""The context budget split (CTX-4)."""

from __future__ import annotations

import pytest

from soong_agent.domain.budget import ContextBudget, compute_budget
from soong_agent.domain.config.schema import CompactConfig, ContextConfig


def budget(
    window: int,
    reserve: int,
    system: int,
    non_system: int | None,
    compact_reserve: int,
) -> ContextBudget:
    return compute_budget(
        context_window=window,
        context=ContextConfig(
            reserve_output_tokens=reserve,
            dynamic_system_budget=system,
            non_system_budget=non_system,
        ),
        compact=CompactConfig(reserve_tokens=compact_reserve),
    )


@pytest.mark.parametrize(
    ("window", "reserve", "system", "explicit", "compact_reserve", "non_system", "trigger"),
    [
        # derived: window - reserve - system
        (128_000, 8_192, 12_000, None, 16_384, 107_808, 91_424),
        (200_000, 0, 0, None, 0, 200_000, 200_000),
        # explicit and smaller than what is left: used as is
        (200_000, 8_192, 12_000, 50_000, 16_384, 50_000, 33_616),
        # explicit but larger than what is left: capped
        (32_000, 4_000, 8_000, 100_000, 1_000, 20_000, 19_000),
        # explicit zero stays zero
        (32_000, 4_000, 8_000, 0, 1_000, 0, 0),
        # compaction reserve larger than the non-system part: trigger floors at 0
        (32_000, 4_000, 8_000, None, 30_000, 20_000, 0),
        # room of one token
        (20_193, 8_192, 12_000, None, 0, 1, 1),
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
    assert b == ContextBudget(
        window=window,
        reserve_output=reserve,
        system=system,
        non_system=non_system,
        compact_trigger=trigger,
    )
    assert b.input_limit == window - reserve
    assert b.system + b.non_system <= b.input_limit


def test_defaults_of_the_config() -> None:
    b = compute_budget(context_window=128_000, context=ContextConfig(), compact=CompactConfig())
    assert (b.reserve_output, b.system) == (8_192, 12_000)
    assert b.non_system == 128_000 - 8_192 - 12_000
    assert b.compact_trigger == b.non_system - 16_384


@pytest.mark.parametrize("window", [20_192, 20_000, 1])
def test_window_too_small_names_the_numbers(window: int) -> None:
    with pytest.raises(ValueError) as info:
        budget(window, 8_192, 12_000, None, 0)
    message = str(info.value)
    assert str(window) in message
    assert "8192" in message
    assert "12000" in message
    assert "20192" in message


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


def test_budget_is_frozen() -> None:
    b = budget(100_000, 10_000, 10_000, None, 0)
    with pytest.raises(AttributeError):
        b.non_system = 1  # type: ignore[misc]
