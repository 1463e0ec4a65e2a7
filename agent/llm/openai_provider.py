"""OpenAI: the Responses API for `openai:` models, Chat Completions for `openai-compatible:` servers.

Responses: store=False, so every call carries the whole conversation, reasoning items included with
their encrypted content (include=["reasoning.encrypted_content"]); reasoning={"effort", "summary": "auto"}
puts reasoning summaries into the transcript; prompt_cache_key (one per run tag, at most 64 characters)
keeps the repeated prefix on the same cache. With no --effort, the model table's default effort is sent
(gpt-5.1 and 5.2 would otherwise not reason at all). Models that take explicit cache marks
(cache_breakpoints) get a prompt_cache_breakpoint on train.py, the first block of the first message, when
the prefix up to it is long enough to cache.

Chat Completions (vLLM, llama.cpp, Ollama, OpenRouter, DeepSeek) keeps the reasoning text a server
returns (reasoning_content); reasoning models there get max_completion_tokens, never max_tokens, and no
temperature.
"""

from __future__ import annotations

import hashlib
import json

import openai

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

MAX_CACHE_KEY = 64  # the service refuses a longer prompt_cache_key
BREAKPOINT = {"mode": "explicit"}  # the TTL is the request's (prompt_cache_options.ttl, default 30m)


def _arguments(raw: str | None) -> dict:
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError:
        return {UNPARSED: raw}
    return value if isinstance(value, dict) else {UNPARSED: raw}


def _error_text(result: ToolResult) -> str:
    return f"ERROR: {result.content}" if result.is_error else result.content


def _short_cache_key(key: str | None) -> str | None:
    """The key itself, or for a longer one its start and a hash of the whole, within MAX_CACHE_KEY."""
    if key is None or len(key) <= MAX_CACHE_KEY:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"{key[: MAX_CACHE_KEY - len(digest) - 1]}-{digest}"


def _responses_usage(usage) -> Usage:
    if usage is None:
        return Usage(calls=1)
    details = getattr(usage, "input_tokens_details", None)
    return Usage(input_tokens=usage.input_tokens or 0, output_tokens=usage.output_tokens or 0,
                 cache_read_tokens=getattr(details, "cached_tokens", 0) or 0,
                 cache_write_tokens=getattr(details, "cache_write_tokens", 0) or 0,  # SDKs before 2.45 lack it
                 thinking_tokens=getattr(getattr(usage, "output_tokens_details", None), "reasoning_tokens", 0) or 0,
                 calls=1)


def _failed(kind: str | None, message: str | None, spent: Usage | None = None) -> FailedAfterAnswer:
    return FailedAfterAnswer("openai", kind or "server_error", message or "no message", spent)


class ResponsesConversation:
    provider = "openai"

    def __init__(self, info: ModelInfo, api_key: str, base_url: str | None = None, *, effort: str | None = None,
                 cache_key: str | None = None, caching: bool = True, timeout: float = 600.0):
        self.model, self.info = info.name, info
        self.client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)
        self.effort, self.cache_key, self.caching = effort, _short_cache_key(cache_key), caching
        self.instructions, self.input, self.tools = "", [], []
        self.breakpoints: list[str] = []  # where explicit cache breakpoints are (or why one is not placed)

    def start(self, system: str, user: list[str], tools: list[ToolSpec]) -> None:
        self.instructions = system
        blocks = [{"type": "input_text", "text": part} for part in user if part.strip()]
        self.input = [{"role": "user", "content": blocks}]
        self.tools = [{"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters,
                       "strict": False} for t in tools]
        self.breakpoints = []
        if self.caching and self.info.cache_breakpoints and blocks:
            minimum = self.info.cache_min_tokens
            tokens = sum(estimated_tokens(json.dumps(part)) for part in (self.instructions, self.tools, blocks[0]))
            if tokens < minimum:
                self.breakpoints.append(f"train.py: not placed, ~{tokens} tokens < the model's minimum of {minimum}")
            else:
                blocks[0]["prompt_cache_breakpoint"] = dict(BREAKPOINT)
                self.breakpoints.append("train.py: explicit")

    def options(self) -> dict:
        options: dict = {"store": False, "max_output_tokens": self.info.max_output}
        if self.info.reasoning:
            options["include"] = ["reasoning.encrypted_content"]
            effort = self.effort or self.info.default_effort
            options["reasoning"] = {"summary": "auto", **({"effort": effort} if effort else {})}
        if self.caching and self.cache_key:
            options["prompt_cache_key"] = self.cache_key
        return options

    def step(self) -> AssistantTurn:
        options = self.options()
        stream = self.client.responses.create(model=self.model, instructions=self.instructions, input=self.input,
                                              tools=self.tools, stream=True, **options)
        reply, done, request_id, limits = self._read(stream)
        return self._turn(reply, reply.output or done, options, request_id, limits)

    @staticmethod
    def _read(stream):
        """The completed response, the items done along the way, the request id and the rate headers; a failure
        the stream reports (after HTTP 200 too) raised as the provider's error."""
        reply, done = None, []
        with stream:
            request_id, limits = stream.response.headers.get("x-request-id"), rate_headers(stream.response.headers)
            try:
                for event in stream:
                    if event.type == "response.output_item.done":
                        done.append(event.item)
                    elif event.type in ("response.completed", "response.incomplete"):
                        reply = event.response
                    elif event.type == "response.failed":
                        error = event.response.error
                        raise _failed(getattr(error, "code", None) or getattr(error, "type", None),
                                      getattr(error, "message", None),
                                      _responses_usage(event.response.usage) if event.response.usage else None)
                    elif event.type == "error":
                        raise _failed(event.code, event.message)  # no code: taken as a server error
            except openai.APIError as error:
                if isinstance(error, openai.APIConnectionError | openai.APIStatusError):
                    raise
                # the SDK raises a plain APIError for an event whose payload is {"error": {...}}
                body = error.body if isinstance(error.body, dict) else {}
                raise _failed(body.get("code") or body.get("type"), error.message) from error
        if reply is None:
            raise _failed("server_error", "the stream ended before the response was complete")
        return reply, done, request_id, limits

    def _turn(self, reply, output, options: dict, request_id, limits) -> AssistantTurn:
        items = [item.model_dump(exclude_none=True) for item in output]
        kept = [item for item in items if item.get("type") in ("reasoning", "function_call", "message")]
        while kept and kept[-1]["type"] == "reasoning":  # never sent back without the item it led to
            kept.pop()
        self.input.extend(kept)
        summaries = [part.text for item in output if item.type == "reasoning"
                     for part in (item.summary or []) if part.text]
        texts = [part.text for item in output if item.type == "message" for part in item.content
                 if part.type == "output_text"]
        refusals = [part.refusal for item in output if item.type == "message" for part in item.content
                    if part.type == "refusal"]
        stop = reply.incomplete_details.reason if reply.incomplete_details else reply.status
        params = {**options, "stream": True}
        if self.info.cache_breakpoints:
            params["cache_breakpoints"] = list(self.breakpoints)
        return AssistantTurn(
            text="".join(texts) if not refusals else "\n".join(refusals),
            thinking=summaries,
            tool_calls=[ToolCall(item.call_id, item.name, _arguments(item.arguments))
                        for item in output if item.type == "function_call"],
            usage=_responses_usage(reply.usage), stop_reason="refusal" if refusals else stop,
            service_model=reply.model, request_id=request_id, params=params, rate_headers=limits)

    def add_tool_results(self, results: list[ToolResult], note: str | None = None) -> None:
        self.input.extend({"type": "function_call_output", "call_id": r.call_id, "output": _error_text(r) or "(empty)"}
                          for r in results)
        if note:
            self.input.append({"role": "user", "content": note})

    def add_user(self, text: str) -> None:
        self.input.append({"role": "user", "content": text})

    def trim(self) -> bool:
        return trimmed([item for item in self.input[1:-1] if item.get("type") == "function_call_output"], "output")


class ChatConversation:
    provider = "openai-compatible"

    def __init__(self, info: ModelInfo, api_key: str, base_url: str | None = None, *, effort: str | None = None,
                 timeout: float = 600.0):
        self.model, self.info, self.effort = info.name, info, effort
        self.client = openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)
        self.messages, self.tools = [], []

    def start(self, system: str, user: list[str], tools: list[ToolSpec]) -> None:
        self.messages = [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(user)}]
        self.tools = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                        "parameters": t.parameters}} for t in tools]

    def options(self) -> dict:
        if self.info.reasoning:
            effort = self.effort or self.info.default_effort
            return {"max_completion_tokens": self.info.max_output,
                    **({"reasoning_effort": effort} if effort else {})}
        return {"max_tokens": self.info.max_output}

    def step(self) -> AssistantTurn:
        raw = self.client.chat.completions.with_raw_response.create(model=self.model, messages=self.messages,
                                                                    tools=self.tools, **self.options())
        reply = raw.parse()
        if not getattr(reply, "choices", None):
            raise self._error_answer(raw)
        message = reply.choices[0].message
        calls = message.tool_calls or []
        extra = message.model_extra or {}
        assistant: dict = {"role": "assistant", "content": message.content}
        if calls:
            assistant["tool_calls"] = [{"id": c.id, "type": "function", "function": {
                "name": c.function.name, "arguments": c.function.arguments}} for c in calls]
            if isinstance(extra.get("reasoning_content"), str):  # DeepSeek refuses a tool call turn without it
                assistant["reasoning_content"] = extra["reasoning_content"]
        if extra.get("reasoning_details"):  # OpenRouter: back as it came, for the reasoning to continue
            assistant["reasoning_details"] = extra["reasoning_details"]
        if calls or message.content:  # an assistant message needs content or tool calls
            self.messages.append(assistant)
        declined = getattr(message, "refusal", None)
        reasoning = extra.get("reasoning_content") or extra.get("reasoning")
        usage = reply.usage
        cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", 0) or 0
        thinking = getattr(getattr(usage, "completion_tokens_details", None), "reasoning_tokens", 0) or 0
        return AssistantTurn(
            text=message.content or declined or "",
            thinking=[reasoning] if isinstance(reasoning, str) and reasoning else [],
            tool_calls=[ToolCall(c.id, c.function.name, _arguments(c.function.arguments)) for c in calls],
            usage=Usage(input_tokens=usage.prompt_tokens if usage else 0,
                        output_tokens=usage.completion_tokens if usage else 0,
                        cache_read_tokens=cached, thinking_tokens=thinking, calls=1),
            stop_reason="refusal" if declined else reply.choices[0].finish_reason, service_model=reply.model,
            request_id=raw.headers.get("x-request-id"), params=self.options(), rate_headers=rate_headers(raw.headers))

    def _error_answer(self, raw) -> FailedAfterAnswer:
        """A 200 without choices: gateways put the upstream error in the body (its type or code names it)."""
        try:
            body = raw.http_response.json()
        except ValueError:
            body = None
        error = body.get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict):
            return FailedAfterAnswer(self.provider, "server_error", "the answer had no choices and no error")
        kind = error.get("type") or error.get("code")
        if isinstance(kind, int):  # OpenRouter names the upstream HTTP status
            kind = "rate_limit_exceeded" if kind == 429 else "server_error" if kind >= 500 else str(kind)
        return FailedAfterAnswer(self.provider, str(kind or "server_error"), str(error.get("message") or error))

    def add_tool_results(self, results: list[ToolResult], note: str | None = None) -> None:
        self.messages.extend({"role": "tool", "tool_call_id": r.call_id, "content": _error_text(r) or "(empty)"}
                             for r in results)
        if note:
            self.messages.append({"role": "user", "content": note})

    def add_user(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})

    def trim(self) -> bool:
        return trimmed([message for message in self.messages[2:-1] if message["role"] == "tool"], "content")
