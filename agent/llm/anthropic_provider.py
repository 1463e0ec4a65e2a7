"""Anthropic Messages API, streamed: thinking as the model table says, prompt caching, tool use.

Adaptive-thinking models get thinking={"type": "adaptive", "display": "summarized"} (so the transcript
holds the reasoning) and output_config.effort when an effort is chosen; models that only know
enabled thinking get a budget with 1024 <= budget_tokens < max_tokens. No temperature is ever sent.
Thinking blocks go back exactly as they came, signatures included. The system prompt (and the tools
before it) carries a 1-hour cache breakpoint, the newest message a 5-minute one, so the growing prefix
is read from the cache on every call and the fixed part across the training runs between experiments.
"""

from __future__ import annotations

import copy

import anthropic

from agent.llm.models import ModelInfo
from agent.llm.types import UNPARSED, AssistantTurn, ToolCall, ToolResult, ToolSpec, Usage

# The system prompt and tools are the same for every experiment of a night: cached for an hour, they
# outlive the training run between two proposals. The conversation's own prefix is only re-read within
# one proposal, seconds apart: the 5-minute lifetime is enough and its writes cost less (1.25x vs 2x input).
CACHE_NIGHT = {"type": "ephemeral", "ttl": "1h"}
CACHE_PROPOSAL = {"type": "ephemeral", "ttl": "5m"}
TRIMMED = "[cut to fit the context window]"


class AnthropicConversation:
    provider = "anthropic"

    def __init__(self, info: ModelInfo, api_key: str, base_url: str | None = None, *, effort: str | None = None,
                 thinking_budget: int = 4000, caching: bool = True, timeout: float = 600.0):
        self.model, self.info = info.name, info
        self.client = anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout)
        self.effort, self.caching = effort, caching
        self.max_tokens = info.max_output
        self.thinking_budget = min(max(1024, thinking_budget), self.max_tokens - 1)
        self.system, self.messages, self.tools = "", [], []

    def start(self, system: str, user: str, tools: list[ToolSpec]) -> None:
        self.system = system
        self.messages = [{"role": "user", "content": [{"type": "text", "text": user}]}]
        self.tools = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]

    def options(self) -> dict:
        """Everything the request sends besides the conversation itself."""
        options: dict = {"max_tokens": self.max_tokens}
        if self.info.thinking in ("adaptive", "adaptive_or_enabled"):
            options["thinking"] = {"type": "adaptive", "display": "summarized"}
            if self.effort:
                options["output_config"] = {"effort": self.effort}
        elif self.info.thinking == "enabled":
            options["thinking"] = {"type": "enabled", "budget_tokens": self.thinking_budget}
        return options

    def request(self) -> dict:
        system: list[dict] = [{"type": "text", "text": self.system}]
        messages = self.messages
        if self.caching:
            system[0]["cache_control"] = CACHE_NIGHT
            messages = copy.deepcopy(self.messages)
            messages[-1]["content"][-1]["cache_control"] = CACHE_PROPOSAL
        return {"model": self.model, "system": system, "messages": messages, "tools": self.tools, **self.options()}

    def step(self) -> AssistantTurn:
        with self.client.messages.stream(**self.request()) as stream:
            reply = stream.get_final_message()
            request_id = stream.request_id
        content = [block.model_dump(exclude_none=True) for block in reply.content]
        # Only blocks with content go back: an empty text block (or message) is refused by the service.
        kept = [b for b in content if b["type"] != "text" or b.get("text")]
        if kept:
            self.messages.append({"role": "assistant", "content": kept})
        usage = reply.usage
        read, written = usage.cache_read_input_tokens or 0, usage.cache_creation_input_tokens or 0
        details = getattr(usage, "output_tokens_details", None)
        written_1h = getattr(getattr(usage, "cache_creation", None), "ephemeral_1h_input_tokens", 0) or 0
        return AssistantTurn(
            text="\n".join(b.text for b in reply.content if b.type == "text" and b.text),
            thinking=[b.thinking for b in reply.content if b.type == "thinking" and b.thinking],
            tool_calls=[ToolCall(b.id, b.name, b.input if isinstance(b.input, dict) else {UNPARSED: b.input})
                        for b in reply.content if b.type == "tool_use"],
            usage=Usage(input_tokens=usage.input_tokens + read + written, output_tokens=usage.output_tokens,
                        cache_read_tokens=read, cache_write_tokens=written, cache_write_1h_tokens=written_1h,
                        thinking_tokens=getattr(details, "thinking_tokens", 0) or 0, calls=1),
            stop_reason=reply.stop_reason, service_model=reply.model, request_id=request_id,
            params={**self.options(), "stream": True,
                    "cache_breakpoints": ["system: 1h", "last message: 5m"] if self.caching else []})

    def add_tool_results(self, results: list[ToolResult], note: str | None = None) -> None:
        """One user message answering every tool call of the last turn, tool results first."""
        content: list[dict] = [{"type": "tool_result", "tool_use_id": r.call_id, "is_error": r.is_error,
                                "content": r.content or "(empty)"} for r in results]
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
        cut = False
        for message in self.messages[1:-1]:
            for block in message["content"]:
                if block.get("type") == "tool_result" and block.get("content") != TRIMMED:
                    block["content"], cut = TRIMMED, True
        return cut
