"""Usage arithmetic (PROV-6): what a call or a run cost, from a model's price table."""

from __future__ import annotations

from soong_agent.domain.config.schema import PriceConfig
from soong_agent.ports.streaming import Usage

_PER = 1_000_000


def cost_usd(usage: Usage, price: PriceConfig | None) -> float | None:
    """The cost of `usage` in US dollars, or None when the model has no price table.

    `input_tokens` counts the prompt tokens the provider charged at the input price (neither
    read from nor written to its cache); cache reads and writes are priced with their own
    rates, as providers report them separately (PROV-7). A cache rate the table leaves unset
    is the input price: a budget never counts cached tokens as free because a price is missing.
    """
    if price is None:
        return None
    given = price.model_fields_set
    read = price.cache_read_per_mtok if "cache_read_per_mtok" in given else price.input_per_mtok
    write = price.cache_write_per_mtok if "cache_write_per_mtok" in given else price.input_per_mtok
    total = (
        usage.input_tokens * price.input_per_mtok
        + usage.output_tokens * price.output_per_mtok
        + usage.cache_read_tokens * read
        + usage.cache_write_tokens * write
    )
    return round(total / _PER, 6)
