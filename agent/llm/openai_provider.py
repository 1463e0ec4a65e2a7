"""OpenAI: the Responses API for `openai:` models, Chat Completions for `openai-compatible:` servers.

Responses: store=False, so every call carries the whole conversation, reasoning items included with
their encrypted content (include=["reasoning.encrypted_content"]); reasoning={"effort", "summary": "auto"}
puts reasoning summaries into the transcript; prompt_cache_key (one per run tag) keeps the repeated
prefix on the same cache. Chat Completions (vLLM, llama.cpp, Ollama, OpenRouter) keeps the reasoning
text a server returns (reasoning_content); reasoning models there get max_completion_tokens, never
max_tokens, and no temperature.
"""

from __future__ import annotations

import json

import openai

from agent.llm.models import ModelInfo
from agent.llm.types import UNPARSED, AssistantTurn, ToolCall, ToolResult, ToolSpec, Usage

TRIMMED = "[cut to fit the context window]"


def _arguments(raw: str | None) -> dict:
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {UNPARSED: raw}
    return value if isinstance(value, dict) else {UNPARSED: raw}


def _error_text(result: ToolResult) -> str:
    return f"ERROR: {result.content}" if result.is_error else result.content


class ResponsesConversation:
    provider = "openai"

    def __init__(self, info: ModelInfo, api_key: str, base_url: str | None = None, *, effort: str | None = None,
                 cache_key: str | None = None, caching: bool = True, timeout: float = 600.0):
        self.model, self.info = info.name, info
        self.client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)
        self.effort, self.cache_key, self.caching = effort, cache_key, caching
        self.instructions, self.input, self.tools = "", [], []

    def start(self, system: str, user: str, tools: list[ToolSpec]) -> None:
        self.instructions = system
        self.input = [{"role": "user", "content": user}]
        self.tools = [{"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters,
                       "strict": False} for t in tools]

    def options(self) -> dict:
        options: dict = {"store": False, "max_output_tokens": self.info.max_output}
        if self.info.reasoning:
            options["include"] = ["reasoning.encrypted_content"]
            options["reasoning"] = {"summary": "auto", **({"effort": self.effort} if self.effort else {})}
        if self.caching and self.cache_key:
            options["prompt_cache_key"] = self.cache_key
        return options

    def step(self) -> AssistantTurn:
        reply = self.client.responses.create(model=self.model, instructions=self.instructions, input=self.input,
                                             tools=self.tools, **self.options())
        items = [item.model_dump(exclude_none=True) for item in reply.output]
        self.input.extend(item for item in items if item.get("type") in ("reasoning", "function_call", "message"))
        summaries = [part.text for item in reply.output if item.type == "reasoning"
                     for part in (item.summary or []) if part.text]
        usage = reply.usage
        cached = getattr(getattr(usage, "input_tokens_details", None), "cached_tokens", 0) or 0
        reasoning = getattr(getattr(usage, "output_tokens_details", None), "reasoning_tokens", 0) or 0
        return AssistantTurn(
            text=reply.output_text or "",
            thinking=summaries,
            tool_calls=[ToolCall(item.call_id, item.name, _arguments(item.arguments))
                        for item in reply.output if item.type == "function_call"],
            usage=Usage(input_tokens=usage.input_tokens if usage else 0,
                        output_tokens=usage.output_tokens if usage else 0,
                        cache_read_tokens=cached, thinking_tokens=reasoning, calls=1),
            stop_reason=reply.incomplete_details.reason if reply.incomplete_details else reply.status,
            service_model=reply.model, request_id=reply._request_id, params=self.options())

    def add_tool_results(self, results: list[ToolResult], note: str | None = None) -> None:
        self.input.extend({"type": "function_call_output", "call_id": r.call_id, "output": _error_text(r) or "(empty)"}
                          for r in results)
        if note:
            self.input.append({"role": "user", "content": note})

    def add_user(self, text: str) -> None:
        self.input.append({"role": "user", "content": text})

    def trim(self) -> bool:
        cut = False
        for item in self.input[1:-1]:
            if item.get("type") == "function_call_output" and item["output"] != TRIMMED:
                item["output"], cut = TRIMMED, True
        return cut


class ChatConversation:
    """Chat Completions, for OpenAI-compatible servers."""

    def __init__(self, info: ModelInfo, api_key: str, base_url: str | None = None, *,
                 provider: str = "openai-compatible", effort: str | None = None, timeout: float = 600.0):
        self.provider, self.model, self.info, self.effort = provider, info.name, info, effort
        self.client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)
        self.messages, self.tools = [], []

    def start(self, system: str, user: str, tools: list[ToolSpec]) -> None:
        self.messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        self.tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                        "parameters": t.parameters}} for t in tools]

    def options(self) -> dict:
        if self.info.reasoning:
            return {"max_completion_tokens": self.info.max_output,
                    **({"reasoning_effort": self.effort} if self.effort else {})}
        return {"max_tokens": self.info.max_output}

    def step(self) -> AssistantTurn:
        raw = self.client.chat.completions.with_raw_response.create(model=self.model, messages=self.messages,
                                                                    tools=self.tools, **self.options())
        reply = raw.parse()
        message = reply.choices[0].message
        calls = message.tool_calls or []
        assistant: dict = {"role": "assistant", "content": message.content}
        if calls:
            assistant["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.function.name, "arguments": c.function.arguments}} for c in calls]
        self.messages.append(assistant)
        extra = message.model_extra or {}
        reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        usage = reply.usage
        cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", 0) or 0
        thinking = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", 0) or 0
        return AssistantTurn(
            text=message.content or "",
            thinking=[reasoning] if isinstance(reasoning, str) and reasoning else [],
            tool_calls=[ToolCall(c.id, c.function.name, _arguments(c.function.arguments)) for c in calls],
            usage=Usage(input_tokens=usage.prompt_tokens if usage else 0,
                        output_tokens=usage.completion_tokens if usage else 0,
                        cache_read_tokens=cached, thinking_tokens=thinking, calls=1),
            stop_reason=reply.choices[0].finish_reason, service_model=reply.model,
            request_id=raw.headers.get("x-request-id"), params=self.options())

    def add_tool_results(self, results: list[ToolResult], note: str | None = None) -> None:
        for r in results:
            self.messages.append({"role": "tool", "tool_call_id": r.call_id, "content": _error_text(r) or "(empty)"})
        if note:
            self.messages.append({"role": "user", "content": note})

    def add_user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def trim(self) -> bool:
        cut = False
        for message in self.messages[2:-1]:
            if message["role"] == "tool" and message["content"] != TRIMMED:
                message["content"], cut = TRIMMED, True
        return cut
