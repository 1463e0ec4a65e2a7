"""Choosing a provider from --model PROVIDER:MODEL, with keys and base URLs from the SDKs' own
environment variables (read through pydantic-settings)."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent.llm.anthropic_provider import AnthropicConversation
from agent.llm.models import ModelInfo, model_info
from agent.llm.openai_provider import ChatConversation, ResponsesConversation
from agent.llm.retry import KEY_VARIABLES
from agent.llm.types import Conversation, ProviderFatal

PROVIDERS = ("anthropic", "openai", "openai-compatible")
__all__ = ["KEY_VARIABLES", "PROVIDERS", "conversation_factory", "parse_model", "unknown_model_warning"]
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


class ProviderEnvironment(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None


def parse_model(model_spec: str) -> tuple[str, ModelInfo]:
    """The provider and the model table's row (or conservative defaults, known=False) of PROVIDER:MODEL."""
    provider, sep, model = model_spec.partition(":")
    if not sep or provider not in PROVIDERS or not model:
        raise ProviderFatal(f"--model must be PROVIDER:MODEL with PROVIDER one of {', '.join(PROVIDERS)} "
                            f"(e.g. anthropic:claude-opus-4-8), got {model_spec!r}")
    info = model_info(provider, model)
    return provider, info.model_copy(update={"name": model})


def unknown_model_warning(model_spec: str) -> str | None:
    provider, info = parse_model(model_spec)
    if info.known:
        return None
    return (f"warning: {model_spec} is not in the model table; using conservative defaults ("
            + (f"thinking {info.thinking}" if provider == "anthropic" else f"reasoning {info.reasoning}")
            + f", at most {info.max_output} output tokens) and no price: its spend shows as $0 unless --pricing "
              "gives one")


def conversation_factory(model_spec: str, base_url: str | None = None, thinking_budget: int = 4000, *,
                         effort: str | None = None, caching: bool = True,
                         cache_key: str | None = None) -> Callable[[], Conversation]:
    """A function that opens a fresh conversation per experiment; fails now if a key is missing."""
    provider, info = parse_model(model_spec)
    allowed = EFFORTS[2:] if provider == "anthropic" else EFFORTS[:-1]
    if effort is not None and effort not in allowed:
        raise ProviderFatal(f"--effort for {provider} must be one of {', '.join(allowed)}, got {effort!r}")
    env = ProviderEnvironment()
    if provider == "anthropic":
        if env.anthropic_api_key is None:
            raise ProviderFatal("no Anthropic API key: set ANTHROPIC_API_KEY (or use --proposer optuna offline)")
        key, url = env.anthropic_api_key.get_secret_value(), base_url or env.anthropic_base_url
        return lambda: AnthropicConversation(info, key, url, effort=effort, thinking_budget=thinking_budget,
                                             caching=caching)
    url = base_url or env.openai_base_url
    if provider == "openai-compatible" and not url:
        raise ProviderFatal("openai-compatible needs the server's URL: pass --base-url or set OPENAI_BASE_URL")
    if env.openai_api_key is None and provider == "openai":
        raise ProviderFatal("no OpenAI API key: set OPENAI_API_KEY (or use --proposer optuna offline)")
    key = env.openai_api_key.get_secret_value() if env.openai_api_key else "not-needed"
    if provider == "openai":
        return lambda: ResponsesConversation(info, key, url, effort=effort, cache_key=cache_key, caching=caching)
    return lambda: ChatConversation(info, key, url, effort=effort)
