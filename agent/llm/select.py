"""Choosing a provider from --model PROVIDER:MODEL, with keys and base URLs from the SDKs' own
environment variables (read through pydantic-settings). A provider is an entry of PROVIDERS: a function
that opens its conversations (importing its SDK when called) and how the model table applies to it."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent.llm.models import MODELS, ModelInfo, model_info
from agent.llm.retry import KEY_VARIABLES
from agent.llm.types import Conversation, ProviderFatal

__all__ = ["KEY_VARIABLES", "PROVIDERS", "conversation_factory", "parse_model", "model_warnings"]
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


class ProviderEnvironment(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None


Opener = Callable[[ModelInfo], Conversation]  # opens a fresh conversation with a model's row


@dataclass(frozen=True)
class ConversationSettings:
    """How a night's conversations are opened, as the command line says (keys come from the environment)."""
    base_url: str | None
    thinking_budget: int
    effort: str | None
    caching: bool
    cache_key: str | None


def _anthropic(how: ConversationSettings) -> Opener:
    from agent.llm.anthropic_provider import AnthropicConversation
    env = ProviderEnvironment()
    if env.anthropic_api_key is None:
        raise ProviderFatal("no Anthropic API key: set ANTHROPIC_API_KEY (or use --proposer optuna offline)")
    key, url = env.anthropic_api_key.get_secret_value(), how.base_url or env.anthropic_base_url
    return lambda row: AnthropicConversation(row, key, url, effort=how.effort, thinking_budget=how.thinking_budget,
                                             caching=how.caching)


def _openai(how: ConversationSettings) -> Opener:
    from agent.llm.openai_provider import ResponsesConversation
    env = ProviderEnvironment()
    if env.openai_api_key is None:
        raise ProviderFatal("no OpenAI API key: set OPENAI_API_KEY (or use --proposer optuna offline)")
    key, url = env.openai_api_key.get_secret_value(), how.base_url or env.openai_base_url
    return lambda row: ResponsesConversation(row, key, url, effort=how.effort, cache_key=how.cache_key,
                                             caching=how.caching)


def _openai_compatible(how: ConversationSettings) -> Opener:
    from agent.llm.openai_provider import ChatConversation
    env = ProviderEnvironment()
    url = how.base_url or env.openai_base_url
    if not url:
        raise ProviderFatal("openai-compatible needs the server's URL: pass --base-url or set OPENAI_BASE_URL")
    key = env.openai_api_key.get_secret_value() if env.openai_api_key else "not-needed"
    return lambda row: ChatConversation(row, key, url, effort=how.effort)


@dataclass(frozen=True)
class Provider:
    opener: Callable[[ConversationSettings], Opener]  # ProviderFatal when a key or URL is missing
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
    how = ConversationSettings(base_url, thinking_budget, checked_effort(provider, info, effort), caching, cache_key)
    return info, PROVIDERS[provider].opener(how)


def conversation_factory(model_spec: str, *, effort: str | None = None, caching: bool = True,
                         cache_key: str | None = None) -> Callable[[], Conversation]:
    """A function that opens a fresh conversation per experiment with the table's row; fails now if a key is
    missing."""
    info, open_with = conversation_opener(model_spec, effort=effort, caching=caching, cache_key=cache_key)
    return lambda: open_with(info)


def checked_factory(model_spec: str, base_url: str | None = None, thinking_budget: int = 4000, *,
                    effort: str | None = None, cache_key: str | None = None,
                    retry_base_s: float = 1.0) -> tuple[Callable[[], Conversation], str]:
    """conversation_factory after the preflight (agent.llm.preflight), with the line saying what it found."""
    from agent.llm.preflight import preflight
    provider = model_spec.partition(":")[0]
    info, open_with = conversation_opener(model_spec, base_url, thinking_budget, effort=effort, cache_key=cache_key)
    row, found = preflight(open_with, provider, info, effort, retry_base_s)
    return (lambda: open_with(row)), found
