"""Choosing a provider from --model PROVIDER:MODEL, with keys and base URLs from the SDKs' own
environment variables (read through pydantic-settings)."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent.llm.anthropic_provider import AnthropicConversation
from agent.llm.openai_provider import OpenAIConversation
from agent.llm.types import Conversation, ProviderFatal

PROVIDERS = ("anthropic", "openai", "openai-compatible")


class ProviderEnvironment(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore")
    anthropic_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    openai_base_url: str | None = None


def conversation_factory(model_spec: str, base_url: str | None = None,
                         thinking_budget: int = 4000) -> Callable[[], Conversation]:
    """A function that opens a fresh conversation per experiment; fails now if a key is missing."""
    provider, sep, model = model_spec.partition(":")
    if not sep or provider not in PROVIDERS or not model:
        raise ProviderFatal(f"--model must be PROVIDER:MODEL with PROVIDER one of {', '.join(PROVIDERS)} "
                            f"(e.g. anthropic:claude-sonnet-4-5), got {model_spec!r}")
    env = ProviderEnvironment()
    if provider == "anthropic":
        if env.anthropic_api_key is None:
            raise ProviderFatal("no Anthropic API key: set ANTHROPIC_API_KEY (or use --proposer optuna offline)")
        key, url = env.anthropic_api_key.get_secret_value(), base_url or env.anthropic_base_url
        return lambda: AnthropicConversation(model, key, url, thinking_budget=thinking_budget)
    url = base_url or env.openai_base_url
    if provider == "openai-compatible" and not url:
        raise ProviderFatal("openai-compatible needs the server's URL: pass --base-url or set OPENAI_BASE_URL")
    if env.openai_api_key is None and provider == "openai":
        raise ProviderFatal("no OpenAI API key: set OPENAI_API_KEY (or use --proposer optuna offline)")
    key = env.openai_api_key.get_secret_value() if env.openai_api_key else "not-needed"
    return lambda: OpenAIConversation(model, key, url, provider=provider)
