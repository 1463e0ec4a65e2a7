"""The one table of models: how each family thinks, how much it may write, what it costs.

Each row says where its facts come from and when they were checked (`source`). Prices are USD per million
tokens, Standard list prices; a long-context tier multiplies the whole request's rates above its threshold.
Efforts are the values the service accepts for the model (an effort outside them is refused before the
night starts). Retired rows keep the date the service stopped serving the model and its replacement: such
a model is refused at start with the replacement named (or warned about while it still answers). A
user's JSON file (--pricing) adds or overrides prices:
{"model-name": {"input": .., "output": .., "cache_read": .., "cache_write_1h": ..}}.

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
    """USD per million tokens; cache writes and reads default to the input price where a service has none.
    cache_write_5m is the short-lived write (Anthropic's 5 minutes, OpenAI's default retention). A request
    with more than long_context_above input tokens is billed whole at long_input_factor x every input rate
    (cache reads and writes included) and long_output_factor x the output rate."""
    model_config = ConfigDict(extra="forbid", frozen=True)
    input: float
    output: float
    cache_read: float | None = None
    cache_write_5m: float | None = None
    cache_write_1h: float | None = None
    long_context_above: int | None = None
    long_input_factor: float = 2.0
    long_output_factor: float = 1.5


class ModelInfo(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    provider: Literal["anthropic", "openai"]
    thinking: Thinking = "none"          # anthropic: which thinking configurations the model accepts
    reasoning: bool = False              # openai: a reasoning model (effort, no temperature, max_completion_tokens)
    efforts: tuple[str, ...] = ()        # the effort values the service accepts for it
    default_effort: str | None = None    # sent when --effort is not given (None: the service's own default)
    context_window: int = 200_000
    max_output: int = 32_000
    cache_min_tokens: int = 1024         # the shortest prefix the service caches
    cache_breakpoints: bool = False      # openai: caches only at explicit prompt_cache_breakpoint marks
    prices: Prices | None = None
    retired: str | None = None           # the date the service stopped (or stops) serving it
    replacement: str | None = None       # what the service names in its place
    source: str = ""                     # where the row's facts come from, and when they were checked
    known: bool = True


ANTHROPIC_DOCS = "platform.claude.com/docs (models overview, pricing, effort, prompt caching), checked 2026-12-04"
OPENAI_DOCS = "developers.openai.com/api/docs (model pages, pricing, deprecations), checked 2026-12-04"
ALL_EFFORTS = ("low", "medium", "high", "xhigh", "max")
NO_XHIGH = ("low", "medium", "high", "max")
GPT_EFFORTS = ("none", "low", "medium", "high", "xhigh", "max")   # gpt-5.6 and 6.x but the newest Sol/Astra
NEWEST_GPT_EFFORTS = ("low", "medium", "high", "xhigh", "max")    # gpt-6.1/6.2 Sol and 6.2 Astra: no none
GPT_5_X_EFFORTS = ("none", "low", "medium", "high", "xhigh")      # gpt-5.2 to 5.5
GPT_5_EFFORTS = ("minimal", "low", "medium", "high")               # gpt-5 and its mini and nano
LONG_GPT = 272_000  # gpt-5.4 and later: a request over 272K input tokens is billed 2x input, 1.5x output


def _claude(name: str, thinking: Thinking, price: tuple[float, float, float, float, float], *,
            efforts: tuple[str, ...] = ALL_EFFORTS, cache_min: int = 512, context: int = 1_000_000,
            max_output: int = 128_000, long_context: tuple[int, float] | None = None,
            source: str = ANTHROPIC_DOCS) -> ModelInfo:
    inp, out, write_5m, write_1h, read = price
    long = dict(long_context_above=long_context[0], long_input_factor=long_context[1],
                long_output_factor=long_context[1]) if long_context else {}
    return ModelInfo(name=name, provider="anthropic", thinking=thinking, efforts=efforts, context_window=context,
                     max_output=max_output, cache_min_tokens=cache_min, source=source,
                     prices=Prices(input=inp, output=out, cache_write_5m=write_5m, cache_write_1h=write_1h,
                                   cache_read=read, **long))


def _gpt(name: str, price: tuple[float, float, float, float | None], *, efforts: tuple[str, ...] = GPT_EFFORTS,
         default_effort: str | None = None, breakpoints: bool = True, long_context: bool = True,
         context: int = 1_050_000, max_output: int = 128_000, retired: str | None = None,
         replacement: str | None = None, source: str = OPENAI_DOCS) -> ModelInfo:
    inp, cached, out, write = price
    return ModelInfo(name=name, provider="openai", reasoning=bool(efforts), efforts=efforts,
                     default_effort=default_effort, context_window=context, max_output=max_output,
                     cache_breakpoints=breakpoints, retired=retired, replacement=replacement, source=source,
                     prices=Prices(input=inp, output=out, cache_read=cached, cache_write_5m=write,
                                   long_context_above=LONG_GPT if long_context else None))


def SHUT_DOWN_2026_12_11(replacement: str) -> dict:  # noqa: N802 - reads as the table's note
    return dict(breakpoints=False, long_context=False, context=400_000, retired="2026-12-11",
                replacement=replacement, source="deprecations page, announced 2026-06-11; " + OPENAI_DOCS)


# gpt-5.1 to 5.5 reason only when asked (their default effort is none): ask for medium.
GPT_5_X = dict(efforts=GPT_5_X_EFFORTS, default_effort="medium", breakpoints=False)
GPT_4 = dict(efforts=(), breakpoints=False, long_context=False,
             source="shuts down 2027-01-14 (use gpt-6-luna); " + OPENAI_DOCS)


def _retired(name: str, provider: Literal["anthropic", "openai"], on: str, replacement: str,
             source: str) -> ModelInfo:
    return ModelInfo(name=name, provider=provider, retired=on, replacement=replacement,
                     source=f"{source}, checked 2026-12-04")


FABLE_5_2 = (8.0, 40.0, 10.0, 16.0, 0.2)
FABLE_5_1 = (10.0, 50.0, 12.5, 20.0, 0.25)
FABLE_5 = (10.0, 50.0, 12.5, 20.0, 1.0)
OPUS = (5.0, 25.0, 6.25, 10.0, 0.5)
SONNET_5 = (2.0, 10.0, 2.5, 4.0, 0.2)
SONNET_4 = (3.0, 15.0, 3.75, 6.0, 0.3)
# The service's default effort is what it uses when none is sent (high; medium on Opus 5.5 and Haiku 5.5), so
# Anthropic rows need no default_effort. Thinking text is omitted unless display="summarized" is asked for from
# Opus 4.7 on; every adaptive request here asks for it.
MODELS: list[ModelInfo] = [
    _claude("claude-fable-5-2", "adaptive", FABLE_5_2,
            source="release notes 2026-11-09 ($8/$40); cache rates 1.25x/2x/0.025x input, " + ANTHROPIC_DOCS),
    _claude("claude-mythos-5-2", "adaptive", FABLE_5_2, source="release notes 2026-11-09, " + ANTHROPIC_DOCS),
    _claude("claude-fable-5-1", "adaptive", FABLE_5_1),
    _claude("claude-mythos-5-1", "adaptive", FABLE_5_1),
    _claude("claude-fable-5", "adaptive", FABLE_5),
    _claude("claude-mythos-5", "adaptive", FABLE_5),
    _claude("claude-opus-5-5", "adaptive", (4.0, 20.0, 5.0, 8.0, 0.2)),
    _claude("claude-opus-5", "adaptive", OPUS),
    _claude("claude-sonnet-5-5", "adaptive", (2.0, 10.0, 2.5, 4.0, 0.1),
            source="release notes 2026-10-07 (cache reads $0.10), " + ANTHROPIC_DOCS),
    _claude("claude-sonnet-5", "adaptive", SONNET_5, cache_min=1024),
    _claude("claude-haiku-5-5", "adaptive", (0.1, 0.5, 0.125, 0.2, 0.01), long_context=(100_000, 5.0),
            source="models/haiku-5-5 (prompts over 100K tokens: 5x every rate), " + ANTHROPIC_DOCS),
    _claude("claude-opus-4-8", "adaptive", OPUS, cache_min=1024),
    _claude("claude-opus-4-7", "adaptive", OPUS, cache_min=2048),
    # Adaptive preferred, enabled (budget_tokens) still accepted; no xhigh.
    _claude("claude-opus-4-6", "adaptive_or_enabled", OPUS, efforts=NO_XHIGH, cache_min=4096),
    _claude("claude-sonnet-4-6", "adaptive_or_enabled", SONNET_4, efforts=NO_XHIGH, cache_min=1024, max_output=64_000),
    # Enabled thinking only: 1024 <= budget_tokens < max_tokens.
    _claude("claude-opus-4-5", "enabled", OPUS, efforts=("low", "medium", "high"), cache_min=4096,
            context=200_000, max_output=64_000,
            source="deprecated 2026-11-23, retires 2027-01-22 (use claude-opus-5-5); " + ANTHROPIC_DOCS),
    _claude("claude-haiku-4-5", "enabled", (1.0, 5.0, 1.25, 2.0, 0.1), efforts=(), cache_min=4096, context=200_000,
            max_output=64_000),
    _retired("claude-sonnet-4-5", "anthropic", "2026-11-30", "claude-sonnet-5-5", "model deprecations, 2026-09-30"),
    _retired("claude-opus-4-1", "anthropic", "2026-08-05", "claude-opus-5-5", "model deprecations"),
    _retired("claude-opus-4", "anthropic", "2026-06-15", "claude-opus-5-5", "release notes 2026-06-15"),
    _retired("claude-sonnet-4", "anthropic", "2026-06-15", "claude-sonnet-5-5", "release notes 2026-06-15"),
    _retired("claude-3-7-sonnet", "anthropic", "2026-02-19", "claude-sonnet-5-5", "release notes 2025-10-28"),
    _retired("claude-3-5-haiku", "anthropic", "2026-02-19", "claude-haiku-5-5", "model deprecations"),
    _retired("claude-mythos-preview", "anthropic", "2026-06-30", "claude-mythos-5-2", "model deprecations"),
    _gpt("gpt-6.2-astra", (8.0, 0.4, 40.0, 10.0), efforts=NEWEST_GPT_EFFORTS,
         source="release 2026-11-17; cached input from third parties; " + OPENAI_DOCS),
    _gpt("gpt-6.2-sol", (2.0, 0.1, 10.0, 2.5), efforts=NEWEST_GPT_EFFORTS),
    _gpt("gpt-6.1-sol", (2.0, 0.1, 10.0, 2.5), efforts=NEWEST_GPT_EFFORTS),
    _gpt("gpt-6.1-terra", (1.0, 0.1, 5.0, 1.25), source="prices from third parties only; " + OPENAI_DOCS),
    _gpt("gpt-6-astra", (10.0, 1.0, 50.0, 12.5), efforts=NEWEST_GPT_EFFORTS),
    _gpt("gpt-6-sol", (2.0, 0.2, 10.0, 2.5)),
    _gpt("gpt-6-luna", (0.1, 0.01, 0.5, 0.125)),
    # List prices (the gpt-5.6-sol page showed a promotion until at least 2026-11-21).
    _gpt("gpt-5.6-sol", (5.0, 0.5, 30.0, 6.25)),
    _gpt("gpt-5.6-terra", (2.0, 0.2, 12.0, 2.5)),
    _gpt("gpt-5.6-luna", (0.2, 0.02, 1.2, 0.25)),
    _gpt("gpt-5.6", (5.0, 0.5, 30.0, 6.25)),
    _gpt("gpt-5.5", (5.0, 0.5, 30.0, None), **GPT_5_X),
    _gpt("gpt-5.4", (2.5, 0.25, 15.0, None), **GPT_5_X),
    _gpt("gpt-5.4-mini", (0.75, 0.075, 4.5, None), **GPT_5_X, context=400_000),
    _gpt("gpt-5.4-nano", (0.2, 0.02, 1.25, None), **GPT_5_X, context=400_000),
    _gpt("gpt-5.2", (1.75, 0.175, 14.0, None), **GPT_5_X, long_context=False, context=400_000),
    _gpt("gpt-5.1", (1.25, 0.125, 10.0, None), **{**GPT_5_X, "efforts": ("none", "low", "medium", "high")},
         long_context=False, context=400_000,
         source="deprecated, shuts down 2027-04-01 (third parties); " + OPENAI_DOCS),
    _gpt("gpt-4.1", (2.0, 0.5, 8.0, None), **GPT_4, context=1_047_576, max_output=32_768),
    _gpt("gpt-4.1-mini", (0.4, 0.1, 1.6, None), **GPT_4, context=1_047_576, max_output=32_768),
    _gpt("gpt-4o", (2.5, 1.25, 10.0, None), **GPT_4, context=128_000, max_output=16_384),
    _gpt("gpt-5-mini", (0.25, 0.025, 2.0, None), efforts=GPT_5_EFFORTS, **SHUT_DOWN_2026_12_11("gpt-6.1-terra")),
    _gpt("gpt-5-nano", (0.05, 0.005, 0.4, None), efforts=GPT_5_EFFORTS, **SHUT_DOWN_2026_12_11("gpt-6-luna")),
    _gpt("gpt-5", (1.25, 0.125, 10.0, None), efforts=GPT_5_EFFORTS, **SHUT_DOWN_2026_12_11("gpt-6.1-sol")),
    _gpt("o3", (2.0, 0.5, 8.0, None), efforts=("low", "medium", "high"),
         **{**SHUT_DOWN_2026_12_11("gpt-6.1-sol"), "context": 200_000, "max_output": 100_000}),
    _retired("o4-mini", "openai", "2026-10-23", "gpt-5.6-terra", "deprecations, announced 2026-04-22"),
]

REASONING_NAME = re.compile(r"(^|[/-])(o\d|gpt-5|gpt-6|deepseek-r1|qwq|r1)", re.IGNORECASE)


def bare_name(model: str) -> str:
    return model.rsplit("/", 1)[-1].lower()


def find_model(model: str) -> ModelInfo | None:
    name = bare_name(model)
    matches = [m for m in MODELS if name.startswith(m.name) and SUFFIX.fullmatch(name[len(m.name):])]
    return max(matches, key=lambda m: len(m.name)) if matches else None


def model_info(provider: str, model: str) -> ModelInfo:
    """The table's row for `model`, or for a name it does not know conservative defaults (known=False): limits that
    every current model accepts, no price."""
    if (found := find_model(model)) is not None:
        return found
    if provider == "anthropic":
        return ModelInfo(name=model, known=False, provider="anthropic", thinking="adaptive", max_output=32_000,
                         efforts=ALL_EFFORTS)
    # openai-compatible servers run anything; a name that looks like a reasoning model is treated as one.
    # Every OpenAI reasoning model takes medium; sent, it keeps a model whose default is none reasoning.
    return ModelInfo(name=model, known=False, provider="openai", max_output=32_000, efforts=GPT_EFFORTS,
                     reasoning=provider == "openai" or bool(REASONING_NAME.search(model)),
                     default_effort="medium" if provider == "openai" else None)


class PricingError(ValueError):
    """A --pricing file that cannot be read."""


def read_price_overrides(path: Path) -> dict[str, Prices]:
    try:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict):
            raise PricingError(f"{path} must hold a JSON object of model name -> prices")
        return {name.lower(): Prices.model_validate(prices) for name, prices in raw.items()}
    except (OSError, json.JSONDecodeError, ValidationError) as err:
        problems = ("; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
                    if isinstance(err, ValidationError) else err)
        raise PricingError(f"cannot use --pricing {path}: {problems}. Expected e.g. "
                           '{"my-model": {"input": 3.0, "output": 15.0, "cache_read": 0.3}} '
                           "(USD per million tokens)") from err
