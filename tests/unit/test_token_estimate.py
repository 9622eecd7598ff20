"""Token estimates (CTX-4): provider factors, recalibration and the incremental tally."""

from __future__ import annotations

import dataclasses

import pytest

from soong_agent.domain.token_estimate import (
    MessageTokens,
    ProviderCalibration,
    estimate,
    initial_factor,
    recalibrate,
)


@pytest.mark.parametrize(
    ("provider", "factor"),
    [
        ("openai", 1.0),
        ("anthropic", 1.15),
        ("ollama", 1.1),
        ("Anthropic", 1.15),
        ("mistral", 1.2),
        ("", 1.2),
    ],
)
def test_initial_factor_per_provider(provider: str, factor: float) -> None:
    assert initial_factor(provider) == factor


def test_estimate_rounds_up_and_keeps_zero() -> None:
    assert estimate(0, 1.2) == 0
    assert estimate(1, 1.0) == 1
    assert estimate(1, 1.01) == 2
    assert estimate(1000, 1.15) == 1150
    assert estimate(100, 1.15) == 115  # no float noise: 100 * 1.15 == 114.99999999999999
    assert estimate(7, 1.1) == 8
    with pytest.raises(ValueError):
        estimate(-1, 1.0)


def test_recalibrate_moves_toward_the_reported_ratio() -> None:
    # reported / estimated = 1.5; EMA with weight 0.3 from 1.0 -> 1.15
    assert recalibrate(1.0, estimated_o200k=1000, reported=1500) == pytest.approx(1.15)
    assert recalibrate(1.0, estimated_o200k=1000, reported=1500, weight=1.0) == pytest.approx(1.5)
    # repeated observations converge on the observed ratio
    factor = 1.2
    for _ in range(60):
        factor = recalibrate(factor, estimated_o200k=2000, reported=2260)
    assert factor == pytest.approx(1.13, abs=1e-6)


def test_recalibrate_ignores_small_or_empty_observations() -> None:
    assert recalibrate(1.15, estimated_o200k=199, reported=1000) == 1.15
    assert recalibrate(1.15, estimated_o200k=0, reported=1000) == 1.15
    assert recalibrate(1.15, estimated_o200k=5000, reported=0) == 1.15
    assert recalibrate(1.15, estimated_o200k=50, reported=100, min_tokens=10) == pytest.approx(
        0.7 * 1.15 + 0.3 * 2.0
    )


def test_recalibrate_is_clamped() -> None:
    assert recalibrate(1.9, estimated_o200k=1000, reported=10_000) == 2.0
    assert recalibrate(0.85, estimated_o200k=1000, reported=100) == 0.8
    assert recalibrate(1.0, estimated_o200k=1000, reported=5000, cap=1.3) == 1.3
    assert recalibrate(1.0, estimated_o200k=1000, reported=10, floor=0.95) == 0.95


def test_recalibrate_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError):
        recalibrate(1.0, estimated_o200k=1000, reported=1000, weight=0.0)
    with pytest.raises(ValueError):
        recalibrate(1.0, estimated_o200k=1000, reported=1000, weight=1.5)
    with pytest.raises(ValueError):
        recalibrate(1.0, estimated_o200k=1000, reported=1000, floor=2.0, cap=1.0)


def test_provider_calibration_is_immutable_and_recalibrates_into_a_copy() -> None:
    calibration = ProviderCalibration.initial("anthropic")
    assert calibration == ProviderCalibration(provider="anthropic", factor=1.15)
    assert calibration.estimate(1000) == 1150
    with pytest.raises(dataclasses.FrozenInstanceError):
        calibration.factor = 2.0  # type: ignore[misc]

    updated = calibration.recalibrated(estimated_o200k=1000, reported=1300)
    assert updated.provider == "anthropic"
    assert updated.factor == pytest.approx(0.7 * 1.15 + 0.3 * 1.3)
    assert calibration.factor == 1.15
    assert calibration.recalibrated(estimated_o200k=10, reported=1300) is calibration


def test_message_tokens_tally_is_incremental() -> None:
    tally = MessageTokens()
    assert tally.total == 0
    assert len(tally) == 0
    tally.add("m1", 10)
    tally.add("m2", 25)
    tally.add("m3", 0)
    assert tally.total == 35
    assert tally.get("m2") == 25
    assert tally.get("nope") is None
    assert "m3" in tally
    assert len(tally) == 3

    tally.add("m2", 5)  # a recount replaces the earlier one
    assert tally.total == 15

    assert tally.remove(["m1", "unknown"]) == 10
    assert tally.total == 5
    assert "m1" not in tally
    assert tally.remove("m2") == 5  # a bare string is one id
    assert tally.total == 0
    assert len(tally) == 1

    tally.clear()
    assert len(tally) == 0
    assert tally.total == 0
    with pytest.raises(ValueError):
        tally.add("bad", -1)


def test_message_tokens_total_matches_the_sum_after_many_operations() -> None:
    tally = MessageTokens()
    expected: dict[str, int] = {}
    for i in range(500):
        message_id = f"m{i % 37}"
        tokens = (i * 7919) % 101
        tally.add(message_id, tokens)
        expected[message_id] = tokens
        if i % 11 == 0:
            gone = [f"m{(i + 3) % 37}", f"m{(i + 5) % 37}"]
            tally.remove(gone)
            for key in gone:
                expected.pop(key, None)
        assert tally.total == sum(expected.values())
