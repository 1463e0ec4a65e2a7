"""Anthropic Messages API, streamed: thinking as the model table says, prompt caching, tool use.

Adaptive-thinking models get thinking={"type": "adaptive", "display": "summarized"} (so the transcript
holds the reasoning); models that only know enabled thinking get a budget with 1024 <= budget_tokens <
max_tokens; output_config.effort goes to every model that takes one. No temperature is ever sent.
Thinking blocks go back exactly as they came, signatures included; text blocks of nothing but
whitespace never do (the service refuses them).

Caching: the system prompt (with the tools before it) and train.py, the first block of the first
message, each carry a 1-hour breakpoint: the same for every experiment until the next keep, they outlive
the training run between two proposals (and a fix after a crash). The newest message carries a 5-minute
one for the growing conversation. A breakpoint whose prefix is under the model's minimum cacheable
length would cache nothing; it is not placed, and the request's params say so.
"""

from __future__ import annotations

import copy
import json

import anthropic

from agent.llm.models import ModelInfo
from agent.llm.types import (
    UNPARSED,
    AssistantTurn,
    FailedAfterAnswer,
    ToolCall,
    ToolResult,
    ToolSpec,
    Usage,
    estimated_tokens,
    rate_headers,
    trimmed,
)

# The conversation's own prefix is only re-read within one proposal, seconds apart: the 5-minute lifetime is
# enough and its writes cost less (1.25x vs 2x input).
CACHE_NIGHT = {"type": "ephemeral", "ttl": "1h"}
CACHE_PROPOSAL = {"type": "ephemeral", "ttl": "5m"}


class AnthropicConversation:
    provider = "anthropic"

    def __init__(self, info: ModelInfo, api_key: str, base_url: str | None = None, *, effort: str | None = None,
                 thinking_budget: int = 4000, caching: bool = True, timeout: float = 600.0):
        self.model, self.info = info.name, info
        self.client = anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)
        self.effort, self.caching = effort, caching
        self.thinking_budget = min(max(1024, thinking_budget), info.max_output - 1)
        self.system, self.messages, self.tools = "", [], []

    def start(self, system: str, user: list[str], tools: list[ToolSpec]) -> None:
        self.system = system
        self.messages = [{"role": "user", "content": [{"type": "text", "text": part} for part in user
                                                      if part.strip()]}]
        self.tools = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]

    def options(self) -> dict:
        options: dict = {"max_tokens": self.info.max_output}
        if self.info.thinking in ("adaptive", "adaptive_or_enabled"):
            options["thinking"] = {"type": "adaptive", "display": "summarized"}
        elif self.info.thinking == "enabled":
            options["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        if self.effort:
            options["output_config"] = {"effort": self.effort}
        return options

    def request(self) -> tuple[dict, list[str]]:
        """The request, and where its cache breakpoints are (or why one is not placed)."""
        system: list[dict] = [{"type": "text", "text": self.system}]
        messages, placed = self.messages, []
        if self.caching:
            messages = copy.deepcopy(self.messages)
            minimum, prefix = self.info.cache_min_tokens, estimated_tokens(json.dumps(self.tools))
            stretches = [("system", system[0], CACHE_NIGHT)]
            if len(messages[0]["content"]) > 1:
                stretches.append(("train.py", messages[0]["content"][0], CACHE_NIGHT))
            stretches.append(("last message", messages[-1]["content"][-1], CACHE_PROPOSAL))
            counted = [system[0]] + [block for message in messages for block in message["content"]]
            for name, block, lifetime in stretches:
                upto = next(i for i, b in enumerate(counted) if b is block)
                tokens = prefix + sum(estimated_tokens(json.dumps(b)) for b in counted[: upto + 1])
                if tokens < minimum:
                    placed.append(f"{name}: not placed, ~{tokens} tokens < the model's minimum of {minimum}")
                    continue
                block["cache_control"] = lifetime
                placed.append(f"{name}: {lifetime['ttl']}")
        request = {"model": self.model, "system": system, "messages": messages, "tools": self.tools, **self.options()}
        return request, placed

    def step(self) -> AssistantTurn:
        request, breakpoints = self.request()
        with self.client.messages.stream(**request) as stream:
            try:
                reply = stream.get_final_message()
            except Exception as error:
                error.spent = _spent_so_far(stream)  # a stream cut after message_start was billed its input
                raise
            request_id, limits = stream.request_id, rate_headers(stream.response.headers)
        if reply.stop_reason is None:  # the body ended before message_delta: whatever arrived is incomplete
            raise FailedAfterAnswer("anthropic", "api_error", "the stream ended before the message was complete",
                                    _usage(reply.usage))
        content = [block.model_dump(exclude_none=True) for block in reply.content]
        if (kept := [b for b in content if b["type"] != "text" or b.get("text", "").strip()]):
            self.messages.append({"role": "assistant", "content": kept})
        return AssistantTurn(
            text="\n".join(b.text for b in reply.content if b.type == "text" and b.text),
            thinking=[b.thinking for b in reply.content if b.type == "thinking" and b.thinking],
            tool_calls=[ToolCall(b.id, b.name, b.input if isinstance(b.input, dict) else {UNPARSED: b.input})
                        for b in reply.content if b.type == "tool_use"],
            usage=_usage(reply.usage), stop_reason=reply.stop_reason, service_model=reply.model,
            request_id=request_id, params={**self.options(), "stream": True, "cache_breakpoints": breakpoints},
            rate_headers=limits)

    def add_tool_results(self, results: list[ToolResult], note: str | None = None) -> None:
        """One user message answering every tool call of the last turn, tool results first."""
        content: list[dict] = [{"type": "tool_result", "tool_use_id": r.call_id, "is_error": r.is_error,
                                "content": r.content if r.content.strip() else "(empty)"} for r in results]
        if note:
            content.append({"type": "text", "text": note})
        self.messages.append({"role": "user", "content": content})

    def add_user(self, text: str) -> None:
        last = self.messages[-1]
        if last["role"] == "user":  # roles alternate: extend the pending user turn
            last["content"].append({"type": "text", "text": text})
        else:
            self.messages.append({"role": "user", "content": [{"type": "text", "text": text}]})

    def trim(self) -> bool:
        return trimmed([block for message in self.messages[1:-1] for block in message["content"]
                        if block.get("type") == "tool_result"], "content")


def _usage(usage) -> Usage:
    read, written = usage.cache_read_input_tokens or 0, usage.cache_creation_input_tokens or 0
    details = getattr(usage, "output_tokens_details", None)
    written_1h = getattr(getattr(usage, "cache_creation", None), "ephemeral_1h_input_tokens", 0) or 0
    return Usage(input_tokens=(usage.input_tokens or 0) + read + written, output_tokens=usage.output_tokens or 0,
                 cache_read_tokens=read, cache_write_tokens=written, cache_write_1h_tokens=written_1h,
                 thinking_tokens=getattr(details, "thinking_tokens", 0) or 0, calls=1)


def _spent_so_far(stream) -> Usage | None:
    try:
        snapshot = stream.current_message_snapshot
    except (AssertionError, AttributeError):  # the stream failed before message_start
        return None
    return _usage(snapshot.usage) if snapshot is not None else None
