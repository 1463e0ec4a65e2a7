"""Provider-neutral pieces of a tool-calling conversation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, ConfigDict, field_serializer


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict  # JSON schema of the arguments


UNPARSED = "__unparsed__"  # the key holding arguments that were not a JSON object
TRIMMED = "[cut to fit the context window]"


def estimated_tokens(text: str) -> int:
    """A low estimate of a text's tokens (about 4 characters each), to decide what is long enough to cache."""
    return len(text) // 4


def trimmed(items: list[dict], key: str) -> bool:
    cut = [item for item in items if item[key] != TRIMMED]
    for item in cut:
        item[key] = TRIMMED
    return bool(cut)


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    content: str
    is_error: bool = False


class Usage(BaseModel):
    """LLM tokens and cost: of one call, of a proposal, of an experiment's proposal and fixes (its record's `llm`)."""
    model_config = ConfigDict(extra="allow")

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0   # part of input_tokens
    cache_write_tokens: int = 0  # part of input_tokens
    cache_write_1h_tokens: int = 0  # the part of the cache writes with the 1-hour lifetime
    thinking_tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0

    def add(self, other: Usage) -> None:
        for name in Usage.model_fields:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @classmethod
    def total(cls, *usages: Usage) -> Usage:
        summed = cls.model_validate({name: 0 for name in cls.model_fields})  # every key set, so every key is written
        for usage in usages:
            summed.add(usage)
        return summed

    @field_serializer("cost_usd")
    def _rounded(self, cost: float) -> float:
        return round(cost, 6)


@dataclass
class AssistantTurn:
    text: str
    thinking: list[str]           # thinking text or reasoning summaries, as the service returned them
    tool_calls: list[ToolCall]
    usage: Usage
    stop_reason: str | None = None
    service_model: str | None = None  # the model as the service named it in its reply
    request_id: str | None = None
    params: dict = field(default_factory=dict)  # the request's parameters other than its content (never keys)
    rate_headers: dict = field(default_factory=dict)  # what the reply's headers say of the key's rate limits


def rate_headers(headers) -> dict:
    """The rate-limit headers of a reply (Anthropic's, OpenAI's, Retry-After), lower-cased."""
    return {k.lower(): v for k, v in headers.items()
            if k.lower().startswith(("anthropic-ratelimit-", "x-ratelimit-", "retry-after"))}


class ProviderFatal(Exception):
    """The night cannot go on: a bad key, no permission, an unknown model or an exhausted account."""
    usage: Usage | None = None  # what the proposal it ended had spent


class RequestRefused(Exception):
    """The service refused this one request (any other 4xx); it fails the proposal, not the night."""


class ContextTooLong(RequestRefused):
    """The conversation outgrew the model's context window."""


class FailedAfterAnswer(Exception):
    """The service answered 200 and then failed: an error event in the stream, a failed response, an error
    body. kind is the service's error type (overloaded_error, server_error, ...), which says whether to retry;
    spent, what the failed answer reports it cost."""

    def __init__(self, provider: str, kind: str, message: str, spent: Usage | None = None):
        super().__init__(f"{provider} failed after answering 200 ({kind}: {message})")
        self.kind, self.spent = kind, spent


class ProviderUnavailable(Exception):
    """The provider did not answer for the whole outage window; nothing was charged."""
    usage: Usage | None = None  # what the proposal's calls before the outage had spent


class Conversation(Protocol):
    """One experiment's conversation with a model; each provider keeps its own native history."""

    provider: str
    model: str

    def start(self, system: str, user: list[str], tools: list[ToolSpec]) -> None:
        """user: the first message in parts, the part that stays the same longest (train.py) first."""

    def step(self) -> AssistantTurn:
        """One request; the reply is appended to the history only once it has arrived."""

    def add_tool_results(self, results: list[ToolResult]) -> None: ...

    def add_user(self, text: str) -> None: ...

    def trim(self) -> bool:
        """Shortens old tool results so the conversation fits again; False if there was nothing to cut."""
