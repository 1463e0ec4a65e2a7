"""USD cost of LLM calls from the model table's prices, extended or overridden by a --pricing file."""

from __future__ import annotations

from pathlib import Path

from agent.llm.models import Prices, bare_name, find_model, read_price_overrides
from agent.llm.types import Usage


class PriceTable:
    def __init__(self, overrides: Path | None = None):
        self.overrides = read_price_overrides(overrides) if overrides is not None else {}

    def price(self, model: str) -> Prices | None:
        name, found = bare_name(model), find_model(model)
        return self.overrides.get(name) or (found and (self.overrides.get(found.name) or found.prices))

    def cost(self, model: str, usage: Usage) -> float:
        """input_tokens include the cache reads and writes, which are billed at their own rates."""
        if (price := self.price(model)) is None:
            return 0.0
        read, written_1h = usage.cache_read_tokens, usage.cache_write_1h_tokens
        written_5m = max(0, usage.cache_write_tokens - written_1h)
        fresh = max(0, usage.input_tokens - read - usage.cache_write_tokens)
        read_rate, rate_1h, rate_5m = (price.input if rate is None else rate
                                       for rate in (price.cache_read, price.cache_write_1h, price.cache_write_5m))
        inputs = fresh * price.input + read * read_rate + written_5m * rate_5m + written_1h * rate_1h
        output = usage.output_tokens * price.output
        if price.long_context_above is not None and usage.input_tokens > price.long_context_above:
            inputs, output = inputs * price.long_input_factor, output * price.long_output_factor
        return (inputs + output) / 1e6
