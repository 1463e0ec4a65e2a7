"""The one table of models: how each family thinks, how much it may write, what it costs.

Prices are USD per million tokens, list prices as published on platform.claude.com/docs/en/about-claude/pricing
and the models' overview pages (Anthropic, checked 2026-12-03) and developers.openai.com/api/docs/pricing (OpenAI,
checked 2026-12-03; short-context rates, under 272K input tokens). A user's JSON file (--pricing) adds or overrides
prices: {"model-name": {"input": .., "output": .., "cache_read": .., "cache_write_1h": ..}}.

A name matches an entry only at a separator: the entry itself, or the entry followed by a date
(claude-sonnet-4-5-20250929) or "-latest"; claude-opus-4-6 never gets claude-opus-4's row. A vendor
prefix ("openai/gpt-5.6" on OpenRouter) is ignored.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

Thinking = Literal["adaptive", "adaptive_or_enabled", "enabled", "none"]
SUFFIX = re.compile(r"(-\d{4}-?\d{2}-?\d{2}|-latest)?(\[1m\])?$")


class Prices(BaseModel):
    """USD per million tokens; cache writes and reads default to the input price where a service has none."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    input: float
    output: float
    cache_read: float | None = None
    cache_write_5m: float | None = None
    cache_write_1h: float | None = None


class ModelInfo(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    provider: Literal["anthropic", "openai"]
    thinking: Thinking = "none"          # anthropic: which thinking configurations the model accepts
    shows_thinking: bool = True          # anthropic: thinking text returned without display="summarized"
    reasoning: bool = False              # openai: a reasoning model (effort, no temperature, max_completion_tokens)
    context_window: int = 200_000
    max_output: int = 32_000
    prices: Prices | None = None
    known: bool = True


def _claude(name: str, thinking: Thinking, price: tuple[float, float, float, float, float], *,
            shows_thinking: bool = True, context: int = 200_000, max_output: int = 64_000) -> ModelInfo:
    inp, out, write_5m, write_1h, read = price
    return ModelInfo(name=name, provider="anthropic", thinking=thinking, shows_thinking=shows_thinking,
                     context_window=context, max_output=max_output,
                     prices=Prices(input=inp, output=out, cache_write_5m=write_5m, cache_write_1h=write_1h,
                                   cache_read=read))


def _gpt(name: str, price: tuple[float, float, float], *, reasoning: bool = True, context: int = 400_000,
         max_output: int = 128_000) -> ModelInfo:
    inp, cached, out = price
    return ModelInfo(name=name, provider="openai", reasoning=reasoning, context_window=context,
                     max_output=max_output, prices=Prices(input=inp, output=out, cache_read=cached))


OPUS_4_5_ON = (5.0, 25.0, 6.25, 10.0, 0.5)
FABLE_5 = (10.0, 50.0, 12.5, 20.0, 1.0)
FABLE_5_1 = (10.0, 50.0, 12.5, 20.0, 0.25)
SONNET_4 = (3.0, 15.0, 3.75, 6.0, 0.3)
SONNET_5 = (2.0, 10.0, 2.5, 4.0, 0.2)

MODELS: list[ModelInfo] = [
    # Adaptive thinking only; thinking text is omitted unless display="summarized" is asked for.
    _claude("claude-fable-5-1", "adaptive", FABLE_5_1, shows_thinking=False, context=1_000_000, max_output=128_000),
    _claude("claude-mythos-5-1", "adaptive", FABLE_5_1, shows_thinking=False, context=1_000_000, max_output=128_000),
    _claude("claude-fable-5", "adaptive", FABLE_5, shows_thinking=False, context=1_000_000, max_output=128_000),
    _claude("claude-mythos-5", "adaptive", FABLE_5, shows_thinking=False, context=1_000_000, max_output=128_000),
    _claude("claude-mythos-preview", "adaptive", FABLE_5, shows_thinking=False, context=1_000_000,
            max_output=128_000),
    _claude("claude-opus-5-5", "adaptive", (4.0, 20.0, 5.0, 8.0, 0.2), shows_thinking=False, context=1_000_000,
            max_output=128_000),
    _claude("claude-opus-5", "adaptive", OPUS_4_5_ON, shows_thinking=False, context=1_000_000, max_output=128_000),
    _claude("claude-sonnet-5-5", "adaptive", SONNET_5, shows_thinking=False, context=1_000_000, max_output=128_000),
    _claude("claude-sonnet-5", "adaptive", SONNET_5, shows_thinking=False, context=1_000_000, max_output=128_000),
    _claude("claude-opus-4-8", "adaptive", OPUS_4_5_ON, shows_thinking=False, context=1_000_000,
            max_output=128_000),
    _claude("claude-opus-4-7", "adaptive", OPUS_4_5_ON, shows_thinking=False, context=1_000_000,
            max_output=128_000),
    # Adaptive preferred, enabled (budget_tokens) still accepted.
    _claude("claude-opus-4-6", "adaptive_or_enabled", OPUS_4_5_ON, context=1_000_000, max_output=128_000),
    _claude("claude-sonnet-4-6", "adaptive_or_enabled", SONNET_4, context=1_000_000),
    # Enabled thinking only: 1024 <= budget_tokens < max_tokens.
    _claude("claude-opus-4-5", "enabled", OPUS_4_5_ON),
    _claude("claude-sonnet-4-5", "enabled", SONNET_4),
    _claude("claude-haiku-4-5", "enabled", (1.0, 5.0, 1.25, 2.0, 0.1)),
    _claude("claude-opus-4-1", "enabled", (15.0, 75.0, 18.75, 30.0, 1.5), max_output=32_000),
    _claude("claude-opus-4", "enabled", (15.0, 75.0, 18.75, 30.0, 1.5), max_output=32_000),
    _claude("claude-sonnet-4", "enabled", SONNET_4),
    _claude("claude-3-7-sonnet", "enabled", SONNET_4),
    _gpt("gpt-5.6", (5.0, 0.5, 30.0)),
    _gpt("gpt-5.6-sol", (5.0, 0.5, 30.0)),
    _gpt("gpt-5.6-terra", (2.0, 0.2, 12.0)),
    _gpt("gpt-5.6-luna", (0.2, 0.02, 1.2)),
    _gpt("gpt-5.5", (5.0, 0.5, 30.0)),
    _gpt("gpt-5.4", (2.5, 0.25, 15.0)),
    _gpt("gpt-5.4-mini", (0.75, 0.075, 4.5)),
    _gpt("gpt-5.4-nano", (0.2, 0.02, 1.25)),
    _gpt("gpt-5.2", (1.75, 0.175, 14.0)),
    _gpt("gpt-5.1", (1.25, 0.125, 10.0)),
    _gpt("gpt-5", (1.25, 0.125, 10.0)),
    _gpt("gpt-5-mini", (0.25, 0.025, 2.0)),
    _gpt("o3", (2.0, 0.5, 8.0), context=200_000, max_output=100_000),
    _gpt("o4-mini", (1.1, 0.275, 4.4), context=200_000, max_output=100_000),
    _gpt("gpt-4.1", (2.0, 0.5, 8.0), reasoning=False, context=1_000_000, max_output=32_000),
    _gpt("gpt-4.1-mini", (0.4, 0.1, 1.6), reasoning=False, context=1_000_000, max_output=32_000),
    _gpt("gpt-4o", (2.5, 1.25, 10.0), reasoning=False, context=128_000, max_output=16_000),
]

# A model the table does not know: conservative limits that every current model accepts, no price.
UNKNOWN_ANTHROPIC = dict(provider="anthropic", thinking="adaptive", shows_thinking=False, max_output=32_000)
UNKNOWN_OPENAI = dict(provider="openai", reasoning=True, max_output=32_000)
REASONING_NAME = re.compile(r"(^|[/-])(o\d|gpt-5|gpt-6|deepseek-r1|qwq|r1)", re.IGNORECASE)


def bare_name(model: str) -> str:
    return model.rsplit("/", 1)[-1].lower()


def find_model(model: str, table: list[ModelInfo] = MODELS) -> ModelInfo | None:
    name = bare_name(model)
    matches = [m for m in table if name.startswith(m.name) and SUFFIX.fullmatch(name[len(m.name):])]
    return max(matches, key=lambda m: len(m.name)) if matches else None


def model_info(provider: str, model: str) -> ModelInfo:
    """The table's row for `model`, or conservative defaults (known=False) for a name it does not know."""
    found = find_model(model)
    if found is not None:
        return found
    if provider == "anthropic":
        return ModelInfo(name=model, known=False, **UNKNOWN_ANTHROPIC)
    # openai-compatible servers run anything; a name that looks like a reasoning model is treated as one.
    reasoning = provider == "openai" or bool(REASONING_NAME.search(model))
    return ModelInfo(name=model, known=False, **{**UNKNOWN_OPENAI, "reasoning": reasoning})


class PricingError(ValueError):
    """A --pricing file that cannot be read."""


def read_price_overrides(path: Path) -> dict[str, Prices]:
    try:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict):
            raise PricingError(f"{path} must hold a JSON object of model name -> prices")
        return {name.lower(): Prices.model_validate(prices) for name, prices in raw.items()}
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
        raise PricingError(f"cannot use --pricing {path}: {problems}. Expected e.g. "
                           '{"my-model": {"input": 3.0, "output": 15.0, "cache_read": 0.3}} '
                           "(USD per million tokens)") from err
    except (OSError, json.JSONDecodeError) as err:
        raise PricingError(f"cannot use --pricing {path}: {err}. Expected e.g. "
                           '{"my-model": {"input": 3.0, "output": 15.0, "cache_read": 0.3}} '
                           "(USD per million tokens)") from err
