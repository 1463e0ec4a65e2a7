"""OpenAI Chat Completions with tool calls; also any OpenAI-compatible server (vLLM, llama.cpp, Ollama,
OpenRouter) through a base URL. Reasoning text is kept where the server returns it."""

from __future__ import annotations

import json

import openai

from agent.llm.types import AssistantTurn, ToolCall, ToolResult, ToolSpec, Usage


class OpenAIConversation:
    def __init__(self, model: str, api_key: str, base_url: str | None = None, provider: str = "openai",
                 timeout: float = 600.0):
        self.provider, self.model = provider, model
        self.client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)
        self.messages, self.tools = [], []

    def start(self, system: str, user: str, tools: list[ToolSpec]) -> None:
        self.messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        self.tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                        "parameters": t.parameters}} for t in tools]

    def step(self) -> AssistantTurn:
        reply = self.client.chat.completions.create(model=self.model, messages=self.messages, tools=self.tools)
        message = reply.choices[0].message
        calls = message.tool_calls or []
        assistant = {"role": "assistant", "content": message.content}
        if calls:
            assistant["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.function.name, "arguments": c.function.arguments}} for c in calls]
        self.messages.append(assistant)
        reasoning = (message.model_extra or {}).get("reasoning_content") or (message.model_extra or {}).get("reasoning")
        usage = reply.usage
        cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", 0) or 0
        thinking = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", 0) or 0
        return AssistantTurn(
            text=message.content or "",
            thinking=[reasoning] if isinstance(reasoning, str) and reasoning else [],
            tool_calls=[ToolCall(c.id, c.function.name, _arguments(c.function.arguments)) for c in calls],
            usage=Usage(input_tokens=usage.prompt_tokens if usage else 0,
                        output_tokens=usage.completion_tokens if usage else 0,
                        cached_tokens=cached, thinking_tokens=thinking, calls=1),
            stop_reason=reply.choices[0].finish_reason)

    def add_tool_results(self, results: list[ToolResult]) -> None:
        for r in results:
            content = f"ERROR: {r.content}" if r.is_error else r.content
            self.messages.append({"role": "tool", "tool_call_id": r.call_id, "content": content})

    def add_user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})


def _arguments(raw: str) -> dict:
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {"__unparsed__": raw}
    return value if isinstance(value, dict) else {"__unparsed__": raw}
