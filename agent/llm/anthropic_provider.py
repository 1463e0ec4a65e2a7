"""Anthropic Messages API: tool use, and extended thinking where the model has it."""

from __future__ import annotations

import re

import anthropic

from agent.llm.types import AssistantTurn, ToolCall, ToolResult, ToolSpec, Usage

THINKING_MODELS = re.compile(r"claude-(3-7-sonnet|sonnet-4|opus-4|haiku-4)")
MAX_OUTPUT_TOKENS = 8000


class AnthropicConversation:
    provider = "anthropic"

    def __init__(self, model: str, api_key: str, base_url: str | None = None, thinking_budget: int = 4000,
                 timeout: float = 600.0):
        self.model = model
        self.client = anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)
        self.thinking_budget = thinking_budget if THINKING_MODELS.search(model) else 0
        self.system, self.messages, self.tools = "", [], []

    def start(self, system: str, user: str, tools: list[ToolSpec]) -> None:
        self.system = system
        self.messages = [{"role": "user", "content": user}]
        self.tools = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]

    def step(self) -> AssistantTurn:
        options = {}
        if self.thinking_budget:
            options["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        reply = self.client.messages.create(model=self.model, system=self.system, messages=self.messages,
                                            tools=self.tools, max_tokens=MAX_OUTPUT_TOKENS + self.thinking_budget,
                                            **options)
        # Thinking blocks go back exactly as they came (signatures included), as the API requires.
        self.messages.append({"role": "assistant",
                              "content": [block.model_dump(exclude_none=True) for block in reply.content]})
        usage = reply.usage
        return AssistantTurn(
            text="\n".join(b.text for b in reply.content if b.type == "text"),
            thinking=[b.thinking for b in reply.content if b.type == "thinking"],
            tool_calls=[ToolCall(b.id, b.name, dict(b.input)) for b in reply.content if b.type == "tool_use"],
            usage=Usage(input_tokens=usage.input_tokens + (usage.cache_read_input_tokens or 0),
                        output_tokens=usage.output_tokens, cached_tokens=usage.cache_read_input_tokens or 0,
                        calls=1),
            stop_reason=reply.stop_reason)

    def add_tool_results(self, results: list[ToolResult]) -> None:
        self.messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": r.call_id, "content": r.content, "is_error": r.is_error}
            for r in results]})

    def add_user(self, text: str) -> None:
        last = self.messages[-1]
        if last["role"] == "user" and isinstance(last["content"], list):  # roles must alternate
            last["content"].append({"type": "text", "text": text})
        else:
            self.messages.append({"role": "user", "content": text})
