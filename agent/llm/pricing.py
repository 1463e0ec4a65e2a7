"""USD cost of LLM calls from a per-model price table (USD per million tokens).

The longest matching model-name prefix wins. A user's table (JSON: {"prefix": {"input": ..,
"output": .., "cached": ..}}) extends and overrides this one; an unknown model costs 0 and
the transcript says so.
"""

from __future__ import annotations

import json
from pathlib import Path

from agent.llm.types import Usage

PRICES_PER_MTOK: dict[str, dict[str, float]] = {
    "claude-opus-4-5": {"input": 5.0, "output": 25.0, "cached": 0.5},
    "claude-opus-4": {"input": 15.0, "output": 75.0, "cached": 1.5},
    "claude-sonnet-4": {"input": 3.0, "output": 15.0, "cached": 0.3},
    "claude-3-7-sonnet": {"input": 3.0, "output": 15.0, "cached": 0.3},
    "claude-haiku-4-5": {"input": 1.0, "output": 5.0, "cached": 0.1},
    "claude-3-5-haiku": {"input": 0.8, "output": 4.0, "cached": 0.08},
    "gpt-5-mini": {"input": 0.25, "output": 2.0, "cached": 0.025},
    "gpt-5": {"input": 1.25, "output": 10.0, "cached": 0.125},
    "gpt-4.1-mini": {"input": 0.4, "output": 1.6, "cached": 0.1},
    "gpt-4.1": {"input": 2.0, "output": 8.0, "cached": 0.5},
    "gpt-4o-mini": {"input": 0.15, "output": 0.6, "cached": 0.075},
    "gpt-4o": {"input": 2.5, "output": 10.0, "cached": 1.25},
    "o3": {"input": 2.0, "output": 8.0, "cached": 0.5},
    "o4-mini": {"input": 1.1, "output": 4.4, "cached": 0.275},
}


class PriceTable:
    def __init__(self, overrides: Path | None = None):
        self.prices = dict(PRICES_PER_MTOK)
        if overrides is not None:
            self.prices.update(json.loads(overrides.read_text()))

    def price(self, model: str) -> dict[str, float] | None:
        matches = [prefix for prefix in self.prices if model.startswith(prefix)]
        return self.prices[max(matches, key=len)] if matches else None

    def cost(self, model: str, usage: Usage) -> float:
        """input_tokens include the cached ones, which are billed at the cached rate."""
        price = self.price(model)
        if price is None:
            return 0.0
        fresh = max(0, usage.input_tokens - usage.cached_tokens)
        return (fresh * price["input"] + usage.cached_tokens * price.get("cached", price["input"])
                + usage.output_tokens * price["output"]) / 1e6
