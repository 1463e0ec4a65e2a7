"""Choosing a provider from --model PROVIDER:MODEL, with keys and base URLs from the SDKs' own
environment variables (read through pydantic-settings). A provider is an entry of PROVIDERS: a function
that opens its conversations (importing its SDK when called) and how the model table applies to it.

Before the baseline trains: one small request with exactly the night's configuration (model, thinking,
effort, tools, caching), so that a request the service refuses stops `run` at once with the parameter
and the fix, instead of failing every proposal in the small hours. For a model the table does not know,
the preflight finds what the service takes: thinking adaptive, then enabled, then none (Anthropic);
reasoning, then none (OpenAI-compatible servers). The night uses the first it accepts. A service that
does not answer at all is not the configuration's fault: the night starts and pauses on the outage as
it would later.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from functools import partial

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent.llm.models import MODELS, ModelInfo, model_info
from agent.llm.retry import KEY_VARIABLES, call_with_retries
from agent.llm.tools import TOOLS
from agent.llm.types import Conversation, ProviderFatal, ProviderUnavailable, RequestRefused

__all__ = ["KEY_VARIABLES", "PROVIDERS", "conversation_factory", "parse_model", "model_warnings"]
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
PREFLIGHT_SYSTEM = "This request checks that the service accepts the configuration of a research night."
PREFLIGHT_QUESTION = "Answer with the single word: ready. Do not call a tool."
PREFLIGHT_OUTAGE_S = 120.0


class ProviderEnvironment(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None


Opener = Callable[[ModelInfo], Conversation]  # opens a fresh conversation with a model's row


def _anthropic(url: str | None, effort: str | None, budget: int, caching: bool, cache: str | None) -> Opener:
    from agent.llm.anthropic_provider import AnthropicConversation
    env = ProviderEnvironment()
    if env.anthropic_api_key is None:
        raise ProviderFatal("no Anthropic API key: set ANTHROPIC_API_KEY (or use --proposer optuna offline)")
    key, url = env.anthropic_api_key.get_secret_value(), url or env.anthropic_base_url
    return lambda row: AnthropicConversation(row, key, url, effort=effort, thinking_budget=budget, caching=caching)


def _openai(url: str | None, effort: str | None, budget: int, caching: bool, cache: str | None) -> Opener:
    from agent.llm.openai_provider import ResponsesConversation
    env = ProviderEnvironment()
    if env.openai_api_key is None:
        raise ProviderFatal("no OpenAI API key: set OPENAI_API_KEY (or use --proposer optuna offline)")
    key, url = env.openai_api_key.get_secret_value(), url or env.openai_base_url
    return lambda row: ResponsesConversation(row, key, url, effort=effort, cache_key=cache, caching=caching)


def _openai_compatible(url: str | None, effort: str | None, budget: int, caching: bool, cache: str | None) -> Opener:
    from agent.llm.openai_provider import ChatConversation
    env = ProviderEnvironment()
    if not (url := url or env.openai_base_url):
        raise ProviderFatal("openai-compatible needs the server's URL: pass --base-url or set OPENAI_BASE_URL")
    key = env.openai_api_key.get_secret_value() if env.openai_api_key else "not-needed"
    return lambda row: ChatConversation(row, key, url, effort=effort)


@dataclass(frozen=True)
class Provider:
    # (base URL, effort, thinking budget, caching, cache key) -> Opener; ProviderFatal when a key or URL is missing
    opener: Callable[[str | None, str | None, int, bool, str | None], Opener]
    tabled: bool  # the model table governs its models' retirement and efforts; False: the server decides
    unknown_model_probe: str  # what the first request finds out about a model the table does not know


PROVIDERS: dict[str, Provider] = {
    "anthropic": Provider(_anthropic, tabled=True, unknown_model_probe="thinking mode"),
    "openai": Provider(_openai, tabled=True, unknown_model_probe="reasoning settings"),
    "openai-compatible": Provider(_openai_compatible, tabled=False, unknown_model_probe="reasoning settings"),
}


def parse_model(model_spec: str, today: date | None = None) -> tuple[str, ModelInfo]:
    """The provider and the model table's row (or conservative defaults, known=False) of PROVIDER:MODEL;
    ProviderFatal for a model its service no longer serves, naming the replacement."""
    provider, sep, model = model_spec.partition(":")
    if not sep or provider not in PROVIDERS or not model:
        raise ProviderFatal(f"--model must be PROVIDER:MODEL with PROVIDER one of {', '.join(PROVIDERS)} "
                            f"(e.g. anthropic:claude-opus-5-5), got {model_spec!r}")
    info = model_info(provider, model)
    if PROVIDERS[provider].tabled and info.retired and date.fromisoformat(info.retired) <= (today or date.today()):
        raise ProviderFatal(f"{model} was retired by {provider} on {info.retired}: every request to it fails. Use "
                            f"--model {provider}:{info.replacement} ({info.source})")
    return provider, info.model_copy(update={"name": model})


def checked_effort(provider: str, info: ModelInfo, effort: str | None) -> str | None:
    """--effort if the model takes it, else ProviderFatal listing the values it does take."""
    if effort is None:
        return None
    if effort not in EFFORTS:
        raise ProviderFatal(f"--effort must be one of {', '.join(EFFORTS)}, got {effort!r}")
    if not PROVIDERS[provider].tabled:  # the server decides; the preflight asks it
        return effort
    if not info.efforts:
        raise ProviderFatal(f"{info.name} takes no effort setting: leave out --effort")
    if effort not in info.efforts:
        raise ProviderFatal(f"--effort {effort} is refused by {info.name}: it takes {', '.join(info.efforts)}")
    return effort


def model_warnings(model_spec: str, today: date | None = None) -> list[str]:
    """What a user should know about the model before the night: not in the table, or about to be retired."""
    provider, info = parse_model(model_spec, today)
    warnings = []
    if info.retired:
        warnings.append(f"warning: {provider} shuts {info.name} down on {info.retired}; a night running past it "
                        f"stops then. Use --model {provider}:{info.replacement}")
    if not info.known:
        tabled = [m.name for m in MODELS if m.provider == provider and not m.retired]
        close = difflib.get_close_matches(info.name, tabled, n=1, cutoff=0.8)
        warnings.append(f"warning: {model_spec} is not in the model table"
                        + (f" (did you mean {provider}:{close[0]}?)" if close else "")
                        + ": the first request finds which "
                        + PROVIDERS[provider].unknown_model_probe
                        + f" the service takes, at most {info.max_output} output tokens, and no price: its spend "
                          "shows as $0 unless --pricing gives one")
    return warnings


def conversation_opener(model_spec: str, base_url: str | None = None, thinking_budget: int = 4000, *,
                        effort: str | None = None, caching: bool = True,
                        cache_key: str | None = None) -> tuple[ModelInfo, Opener]:
    """The model's row and a function that opens a fresh conversation with a given row (the preflight may
    change the row of a model the table does not know); fails now if a key is missing."""
    provider, info = parse_model(model_spec)
    effort = checked_effort(provider, info, effort)
    return info, PROVIDERS[provider].opener(base_url, effort, thinking_budget, caching, cache_key)


def conversation_factory(model_spec: str, *, effort: str | None = None, caching: bool = True,
                         cache_key: str | None = None) -> Callable[[], Conversation]:
    """A function that opens a fresh conversation per experiment with the table's row; fails now if a key is
    missing."""
    info, open_with = conversation_opener(model_spec, effort=effort, caching=caching, cache_key=cache_key)
    return lambda: open_with(info)


def checked_factory(model_spec: str, base_url: str | None = None, thinking_budget: int = 4000, *,
                    effort: str | None = None, cache_key: str | None = None,
                    retry_base_s: float = 1.0) -> tuple[Callable[[], Conversation], str]:
    """conversation_factory after the preflight, with the line saying what the service accepted; ProviderFatal
    when it refuses every configuration tried."""
    provider = model_spec.partition(":")[0]
    info, open_with = conversation_opener(model_spec, base_url, thinking_budget, effort=effort, cache_key=cache_key)
    refusals: list[str] = []
    for candidate in candidates(provider, info):
        conversation = open_with(candidate)
        conversation.start(PREFLIGHT_SYSTEM, [PREFLIGHT_QUESTION], TOOLS)
        try:
            turn = call_with_retries(conversation.step, conversation.provider, on_retry=lambda _: None,
                                     outage_window_s=PREFLIGHT_OUTAGE_S, base_s=retry_base_s)
        except ProviderUnavailable as err:
            return partial(open_with, candidate), (f"preflight: {provider} did not answer ({err}); the night "
                                                   "starts and waits for it")
        except RequestRefused as err:
            refusals.append(f"{describe(provider, candidate, effort)}: {err}")
            continue
        return partial(open_with, candidate), (
            f"preflight: {provider}:{info.name} accepts {describe(provider, candidate, effort)}"
            + ("" if info.known else " (found by trying; the model is not in the table)")
            + f" [{turn.usage.input_tokens} input, {turn.usage.output_tokens} output tokens]")
    raise ProviderFatal(f"{provider} refused the night's configuration before anything ran: "
                        + "; ".join(refusals) + ". " + fix_for(refusals[-1], info))


def candidates(provider: str, info: ModelInfo) -> list[ModelInfo]:
    """The configurations to try, in order: the table's, or for an unknown model each mode the service may take."""
    if info.known:
        return [info]
    if provider == "anthropic":
        return [info.model_copy(update={"thinking": mode}) for mode in ("adaptive", "enabled", "none")]
    return [info, info.model_copy(update={"reasoning": False, "efforts": ()})]


def describe(provider: str, info: ModelInfo, effort: str | None) -> str:
    if provider == "anthropic":
        mode = f"thinking {info.thinking}"
    else:
        mode = "reasoning" if info.reasoning else "no reasoning"
    chosen = effort or info.default_effort
    return mode + (f", effort {chosen}" if chosen and (info.efforts or provider == "openai-compatible") else "")


def fix_for(refusal: str, info: ModelInfo) -> str:
    text = refusal.lower()
    if "effort" in text:
        allowed = f" ({info.name} takes {', '.join(info.efforts)} by the model table)" if info.efforts else ""
        return f"Fix: change or leave out --effort{allowed}."
    if "thinking" in text or "budget_tokens" in text:
        return "Fix: change --thinking-budget, or name a model whose thinking mode the table knows."
    if "max_tokens" in text or "max_output_tokens" in text or "max_completion_tokens" in text:
        return "Fix: the model's output limit differs from the table's; give the model's row with --pricing or " \
               "report it."
    return "Fix: check --model, --effort and --base-url against the service's documentation."
