"""Usage arithmetic (PROV-6): what a call or a run cost, from a model's price table."""

from __future__ import annotations

from soong_agent.domain.config.schema import PriceConfig
from soong_agent.ports.streaming import Usage

_PER = 1_000_000


def cost_usd(usage: Usage, price: PriceConfig | None) -> float | None:
    """The cost of `usage` in US dollars, or None when the model has no price table.

    `input_tokens` counts every prompt token the provider charged at the input price; cache reads
    and writes are priced on top with their own rates, as providers report them separately.
    """
    if price is None:
        return None
    total = (
        usage.input_tokens * price.input_per_mtok
        + usage.output_tokens * price.output_per_mtok
        + usage.cache_read_tokens * price.cache_read_per_mtok
        + usage.cache_write_tokens * price.cache_write_per_mtok
    )
    return round(total / _PER, 6)
