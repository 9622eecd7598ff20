"""Usage and cost arithmetic (PROV-6)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from soong_agent.domain.config.schema import PriceConfig
from soong_agent.domain.usage import cost_usd
from soong_agent.ports.events import RunFinished, UsageEvent
from soong_agent.ports.streaming import Usage
from soong_agent.testing import ScriptedModel, ScriptedResponse
from tests.support.harness import Harness

PRICE = PriceConfig(
    input_per_mtok=3.0, output_per_mtok=15.0, cache_read_per_mtok=0.3, cache_write_per_mtok=3.75
)


def test_cost_prices_each_kind_of_token() -> None:
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=100_000,
        cache_read_tokens=2_000_000,
        cache_write_tokens=0,
    )
    assert cost_usd(usage, PRICE) == pytest.approx(3.0 + 1.5 + 0.6)
    assert cost_usd(usage, None) is None


def test_usage_adds_up() -> None:
    total = Usage(input_tokens=1, output_tokens=2) + Usage(input_tokens=3, cache_read_tokens=4)
    assert total == Usage(input_tokens=4, output_tokens=2, cache_read_tokens=4)
    # the sum is what `Usage(...)` with every field given makes: same fields set, same JSON,
    # and as frozen and as copyable as any other
    given = Usage(
        input_tokens=4, output_tokens=2, cache_read_tokens=4, cache_write_tokens=0, estimated=False
    )
    assert total.model_fields_set == given.model_fields_set
    assert total.model_dump_json() == given.model_dump_json()
    assert (total + Usage(estimated=True)).estimated
    with pytest.raises(ValidationError):
        total.input_tokens = 9  # type: ignore[misc]
    copy = total.model_copy(update={"output_tokens": 7})
    assert copy.output_tokens == 7 and total.output_tokens == 2
    assert Usage(input_tokens=1).model_fields_set == {"input_tokens"}  # (not the sum's set)


async def test_each_call_and_the_run_total_carry_usage_and_cost() -> None:
    usage = Usage(input_tokens=1000, output_tokens=100)
    model = ScriptedModel(
        [
            ScriptedResponse.tool_calls(("list_dir", {}), usage=usage),
            ScriptedResponse.text("done", usage=usage),
        ]
    )
    h = Harness(model)
    h.settings_price = PRICE
    run = await h.service.start("go")
    result = await run.wait()
    events = await h.store.run_events(run.run_id)
    per_call = [e for e in events if isinstance(e, UsageEvent)]
    assert [e.usage for e in per_call] == [usage, usage]
    finished = events[-1]
    assert isinstance(finished, RunFinished)
    assert finished.usage == result.usage == usage + usage
    assert result.cost_usd == pytest.approx(2 * (1000 * 3.0 + 100 * 15.0) / 1e6)


def test_a_cache_price_left_unset_is_the_input_price() -> None:
    # PROV-7: reads are never free because the table does not name their price
    usage = Usage(input_tokens=1_000_000, cache_read_tokens=2_000_000, cache_write_tokens=1_000_000)
    only_input = PriceConfig(input_per_mtok=3.0, output_per_mtok=15.0)
    assert cost_usd(usage, only_input) == pytest.approx(3.0 + 6.0 + 3.0)
    free_reads = PriceConfig(input_per_mtok=3.0, cache_read_per_mtok=0.0)  # said so: free
    assert cost_usd(usage, free_reads) == pytest.approx(3.0 + 0.0 + 3.0)
    assert cost_usd(usage, PRICE) == pytest.approx(3.0 + 0.6 + 3.75)
