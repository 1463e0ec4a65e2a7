"""What the real services refuse, per API and model family, for the loopback LLM server.

Each check returns None for a request the service would accept, or a Refusal: the HTTP status and
message the service answers with (rendered in the API's own error shape by the server). The families
are written down here independently of the agent's model table, so that a wrong row there fails.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

ADAPTIVE_ONLY = re.compile(r"claude-(opus-4-[7-9]|opus-[5-9]|sonnet-[5-9]|haiku-[5-9]|fable|mythos)")
ADAPTIVE_OR_ENABLED = re.compile(r"claude-(opus|sonnet)-4-6")
LONG_OUTPUT = re.compile(r"claude-(opus-4-[6-9]|opus-[5-9]|sonnet-[5-9]|haiku-[5-9]|fable|mythos)")
SHORT_OUTPUT = re.compile(r"claude-opus-4(-1|-0)?(-\d{8})?$")
REASONING = re.compile(r"^(o\d|gpt-5|gpt-6)")
CHAT_TOOLS_NEED_RESPONSES = re.compile(r"^gpt-(5\.[5-9]|6)")
CHAT_TOOLS_WITH_EFFORT_NEED_RESPONSES = re.compile(r"^gpt-5\.[234]")
MAX_CACHE_BREAKPOINTS = 4
# Retired on the Claude API (model deprecations page and release notes, checked 2026-12-04): answered 404.
RETIRED_CLAUDE = re.compile(r"^claude-(sonnet-4-5|opus-4-1|opus-4|sonnet-4|3-7-sonnet|3-5-haiku|3-5-sonnet|"
                            r"mythos-preview)(-\d{8})?$")
# output_config.effort (effort docs, checked 2026-12-04): no xhigh on these, no max on Opus 4.5, none on Haiku 4.5.
EFFORT_WITHOUT_XHIGH = re.compile(r"claude-(opus-4-6|sonnet-4-6|opus-4-5)")
EFFORT_WITHOUT_MAX = re.compile(r"claude-opus-4-5")
NO_EFFORT = re.compile(r"claude-haiku-4-5")
CONTEXT_200K = re.compile(r"claude-(opus-4-5|haiku-4-5)")


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str
    param: str | None = None
    code: str | None = None


def _bare(model: str) -> str:
    return model.rsplit("/", 1)[-1]


def claude_max_output(model: str) -> int:
    if LONG_OUTPUT.search(model):
        return 128_000
    return 32_000 if SHORT_OUTPUT.search(model) else 64_000


def context_window(model: str) -> int:
    return 200_000 if CONTEXT_200K.search(model) else 1_000_000


DISPLAY_UPDATES_BETA = "thinking-display-updates-2026-08-18"


def check_anthropic(body: dict, signatures: dict[str, str], thinking_of_call: dict[str, str],
                    betas: str = "") -> Refusal | None:
    """signatures: thinking text -> the signature issued with it; thinking_of_call: tool_use id -> the
    signature of the thinking block of the turn that made the call; betas: the anthropic-beta header."""
    model = str(body.get("model", ""))
    if RETIRED_CLAUDE.search(model):
        return Refusal(404, f"model: {model}", code="not_found_error")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        return Refusal(400, "max_tokens: Field required")
    limit = claude_max_output(model)
    if max_tokens > limit:
        return Refusal(400, f"max_tokens: {max_tokens} > {limit}, which is the maximum allowed number of output "
                            f"tokens for {model}")
    thinking = body.get("thinking") or {}
    kind = thinking.get("type")
    if kind == "enabled":
        if ADAPTIVE_ONLY.search(model):
            return Refusal(400, "thinking.type.enabled is not supported for this model. Use thinking.type.adaptive "
                                "and output_config.effort to control thinking behavior.")
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            return Refusal(400, "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
        if budget >= max_tokens:
            return Refusal(400, "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our "
                                "documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
                                "#max-tokens-and-context-window-size")
    elif kind == "adaptive":
        if not (ADAPTIVE_ONLY.search(model) or ADAPTIVE_OR_ENABLED.search(model)):
            return Refusal(400, f"adaptive thinking is not supported on {model}. Use thinking.type.enabled with "
                                "budget_tokens.")
        # display "updates" (progress notes between tool calls, reasoning hidden) comes with its beta
        # (thinking-display-updates-2026-08-18; as documented on 2026-12-05); Claude Code sends it
        displays = ("summarized", "omitted") + (("updates",) if DISPLAY_UPDATES_BETA in betas else ())
        if thinking.get("display") not in (None, *displays):
            return Refusal(400, "thinking.adaptive.display: Input should be " + " or ".join(map(repr, displays)))
    elif kind not in (None, "disabled"):
        return Refusal(400, f"thinking.type: Input tag '{kind}' found using 'type' does not match any of the expected "
                            "tags: 'enabled', 'disabled', 'adaptive'")
    effort = (body.get("output_config") or {}).get("effort")
    if effort is not None and effort not in ("low", "medium", "high", "xhigh", "max"):
        return Refusal(400, "output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'")
    if effort is not None and (NO_EFFORT.search(model) or (effort == "xhigh" and EFFORT_WITHOUT_XHIGH.search(model))
                               or (effort == "max" and EFFORT_WITHOUT_MAX.search(model))):
        return Refusal(400, f"output_config.effort: effort '{effort}' is not supported by {model}")
    thinking_on = kind in ("enabled", "adaptive")
    if thinking_on and body.get("temperature") not in (None, 1, 1.0):
        return Refusal(400, "`temperature` may only be set to 1 when thinking is enabled or in adaptive mode. Please "
                            "consult our documentation at https://docs.claude.com/en/docs/build-with-claude/"
                            "extended-thinking#feature-compatibility")
    if thinking_on and (body.get("tool_choice") or {}).get("type") in ("any", "tool"):
        return Refusal(400, "Thinking may not be enabled when tool_choice forces tool use.")
    return (_check_cache_control(body) or _check_context(body, model, max_tokens)
            or _check_messages(body.get("messages"), thinking_on, signatures, thinking_of_call))


def _check_context(body: dict, model: str, max_tokens: int) -> Refusal | None:
    """The prompt (estimated as the server's cache does, a quarter of its JSON) and max_tokens against the window."""
    prompt = len(json.dumps({k: body.get(k) for k in ("tools", "system", "messages")}, sort_keys=True)) // 4
    window = context_window(model)
    if prompt > window:
        return Refusal(400, f"prompt is too long: {prompt} tokens > {window} maximum")
    if window == 200_000 and prompt + max_tokens > window:
        return Refusal(400, f"input length and `max_tokens` exceed context limit: {prompt} + {max_tokens} > {window}, "
                            "decrease input length or `max_tokens` and try again")
    return None


def _blocks_with_cache_control(body: dict) -> int:
    count = sum(1 for tool in body.get("tools") or [] if isinstance(tool, dict) and "cache_control" in tool)
    system = body.get("system")
    if isinstance(system, list):
        count += sum(1 for block in system if "cache_control" in block)
    for message in body.get("messages") or []:
        if isinstance(message.get("content"), list):
            count += sum(1 for block in message["content"] if isinstance(block, dict) and "cache_control" in block)
    return count


def _marks(body: dict) -> list[dict]:
    """Every cache_control in the prompt's order: tools, system, messages."""
    blocks = [tool for tool in body.get("tools") or [] if isinstance(tool, dict)]
    if isinstance(body.get("system"), list):
        blocks += body["system"]
    for message in body.get("messages") or []:
        if isinstance(message.get("content"), list):
            blocks += [block for block in message["content"] if isinstance(block, dict)]
    return [block["cache_control"] for block in blocks if isinstance(block.get("cache_control"), dict)]


def _check_cache_control(body: dict) -> Refusal | None:
    count = _blocks_with_cache_control(body)
    if count > MAX_CACHE_BREAKPOINTS:
        return Refusal(400, f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
                            f"Found {count}.")
    lifetimes = [mark.get("ttl", "5m") for mark in _marks(body)]
    if "5m" in lifetimes and "1h" in lifetimes[lifetimes.index("5m"):]:
        return Refusal(400, "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block. Note "
                            "that blocks are processed in the following order: `tools`, `system`, `messages`.")
    return None


def _check_messages(messages, thinking_on: bool, signatures: dict[str, str],
                    thinking_of_call: dict[str, str]) -> Refusal | None:
    if not isinstance(messages, list) or not messages:
        return Refusal(400, "messages: at least one message is required")
    if messages[0].get("role") != "user":
        return Refusal(400, "messages: first message must use the \"user\" role")
    pending: list[str] = []  # tool_use ids of the previous assistant turn
    last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    for i, message in enumerate(messages):
        content = message.get("content")
        if content == "" or content == []:
            return Refusal(400, f"messages.{i}: all messages must have non-empty content except for the optional "
                                "final assistant message")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for j, block in enumerate(blocks):
            if block.get("type") == "text" and not block.get("text"):
                return Refusal(400, f"messages.{i}.content.{j}.text: text content blocks must be non-empty")
            if block.get("type") == "text" and not str(block.get("text")).strip():
                return Refusal(400, "messages: text content blocks must contain non-whitespace text")
            if block.get("type") == "thinking" and signatures.get(block.get("thinking")) != block.get("signature"):
                return Refusal(400, f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block")
        if message.get("role") == "user":
            results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
            if pending:
                missing = [call for call in pending if call not in results]
                if missing:
                    return Refusal(400, f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                                        f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                                        "corresponding `tool_result` block in the next message.")
                first_other = next((k for k, b in enumerate(blocks) if b.get("type") != "tool_result"), len(blocks))
                if any(b.get("type") == "tool_result" for b in blocks[first_other:]):
                    return Refusal(400, f"messages.{i}: tool_result blocks must come first in the user message, "
                                        "before any other content")
            extra = [r for r in results if r not in pending]
            if extra:
                return Refusal(400, f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: "
                                    f"{extra[0]}. Each `tool_result` block must have a corresponding `tool_use` "
                                    "block in the previous message.")
            pending = []
        else:
            pending = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
            if thinking_on and i == last_assistant and pending and pending[0] in thinking_of_call:
                first = blocks[0]
                if first.get("type") not in ("thinking", "redacted_thinking") \
                        or first.get("signature") != thinking_of_call[pending[0]]:
                    return Refusal(400, f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, "
                                        f"but found `{first.get('type')}`. When `thinking` is enabled, a final "
                                        "`assistant` message must start with a thinking block (preceeding the "
                                        "lastmost set of `tool_use` and `tool_result` blocks).")
    return None


# OpenAI reasoning effort per family (developers.openai.com model pages, 2026-12; /work/notes/facts_openai.md),
# first match wins; a name matching none (an unknown or local model) may send any value.
NONE_TO_HIGH, NONE_TO_XHIGH = ("none", "low", "medium", "high"), ("none", "low", "medium", "high", "xhigh")
LOW_TO_MAX, NONE_TO_MAX = ("low", "medium", "high", "xhigh", "max"), ("none", "low", "medium", "high", "xhigh", "max")
_DATED = r"(-\d{4}-\d{2}-\d{2}|-latest)?$"
EFFORTS = [
    (re.compile(r"^gpt-(6\.1-sol|6\.2-sol|6\.2-astra|6-astra)" + _DATED), LOW_TO_MAX),
    (re.compile(r"^gpt-(6-sol|6-luna|6\.1-terra|5\.6|5\.6-sol|5\.6-terra|5\.6-luna)" + _DATED), NONE_TO_MAX),
    (re.compile(r"^gpt-(5\.2|5\.4|5\.4-mini|5\.4-nano|5\.5)" + _DATED), NONE_TO_XHIGH),
    (re.compile(r"^gpt-5\.1" + _DATED), NONE_TO_HIGH),
    (re.compile(r"^gpt-5(-mini|-nano)?" + _DATED), ("minimal", "low", "medium", "high")),
    (re.compile(r"^o\d(-mini|-pro)?" + _DATED), ("low", "medium", "high")),
]
CHAT_TOPS_AT_XHIGH = re.compile(r"^gpt-6\.1-sol" + _DATED)  # max needs the Responses API
REASONS_ONLY_WHEN_ASKED = re.compile(r"^gpt-5\.[12]" + _DATED)  # effort defaults to none
CACHE_WRITES_BILLED = re.compile(r"^gpt-(5\.([6-9]|\d\d)|[6-9])")  # 5.6 and later: writes cost, explicit marks
DEEPSEEK_THINKING = re.compile(r"^deepseek-(reasoner|v4)")
MAX_CACHE_KEY = 64


def supported_efforts(model: str) -> tuple[str, ...] | None:
    """The reasoning efforts the service accepts for ``model`` (None: not known here, anything goes)."""
    return next((values for family, values in EFFORTS if family.search(_bare(model))), None)


def _check_effort(model: str, effort, param: str, chat: bool) -> Refusal | None:
    values = supported_efforts(model)
    if effort is None or values is None:
        return None
    if chat and CHAT_TOPS_AT_XHIGH.search(_bare(model)):
        values = tuple(v for v in values if v != "max")
    if effort in values:
        return None
    listed = ", ".join(f"'{v}'" for v in values[:-1]) + f", and '{values[-1]}'"
    return Refusal(400, f"Unsupported value: '{param}' does not support '{effort}' with this model. Supported values "
                        f"are: {listed}.", param, "unsupported_value")


def check_chat(body: dict) -> Refusal | None:
    model = _bare(str(body.get("model", "")))
    reasoning = bool(REASONING.search(model))
    if reasoning and "max_tokens" in body:
        return Refusal(400, "Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                            "'max_completion_tokens' instead.", "max_tokens", "unsupported_parameter")
    if reasoning and body.get("temperature") not in (None, 1, 1.0):
        return Refusal(400, "Unsupported value: 'temperature' does not support "
                            f"{body.get('temperature')} with this model. Only the default (1) value is supported.",
                       "temperature", "unsupported_value")
    effort = body.get("reasoning_effort")
    refused = _check_effort(model, effort, "reasoning_effort", chat=True) if reasoning else None
    if refused is not None:
        return refused
    if body.get("tools"):
        if CHAT_TOOLS_NEED_RESPONSES.search(model) or (
                CHAT_TOOLS_WITH_EFFORT_NEED_RESPONSES.search(model) and effort not in (None, "none")):
            return Refusal(400, f"Function tools with reasoning_effort are not supported for {model} in "
                                "/v1/chat/completions. Please use /v1/responses instead.", "tools",
                           "unsupported_parameter")
    pending: list[str] = []
    for i, message in enumerate(body.get("messages") or []):
        if message.get("role") == "tool":
            if message.get("tool_call_id") not in pending:
                return Refusal(400, "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                                    "message with 'tool_calls'.", f"messages.[{i}].role")
            pending.remove(message["tool_call_id"])
            continue
        if pending:
            return Refusal(400, "An assistant message with 'tool_calls' must be followed by tool messages responding "
                                "to each 'tool_call_id'. The following tool_call_ids did not have response "
                                f"messages: {', '.join(pending)}", f"messages.[{i}].role")
        pending = [call["id"] for call in message.get("tool_calls") or []]
        if pending and DEEPSEEK_THINKING.search(model) and "reasoning_content" not in message:
            return Refusal(400, "The reasoning_content in the thinking mode must be passed back to the API.", None,
                           "invalid_request_error")
    return None


# Shut down on 2026-10-23 (deprecations page, announced 2026-04-22): answered 404 like an unknown model.
INPUT_272K = re.compile(r"^(gpt-5|gpt-5-mini|gpt-5-nano|gpt-5\.1|gpt-5\.2)(-\d{4}-\d{2}-\d{2})?$")  # 400K window
RETIRED_GPT = re.compile(r"^(o4-mini|o1|o3-mini|gpt-4-turbo|gpt-3\.5-turbo|gpt-4\.1-nano)(-\d{4}-\d{2}-\d{2})?$")


def check_responses(body: dict, encrypted: dict[str, str]) -> Refusal | None:
    """encrypted: reasoning item id -> the encrypted content issued with it."""
    model = _bare(str(body.get("model", "")))
    if RETIRED_GPT.search(model):
        return Refusal(404, f"The model `{model}` does not exist or you do not have access to it.", None,
                       "model_not_found")
    limit = 272_000 if INPUT_272K.search(model) else 922_000
    tokens = len(json.dumps({k: body.get(k) for k in ("instructions", "tools", "input")}, sort_keys=True)) // 4
    if tokens > limit:
        return Refusal(400, f"Input tokens exceed the configured limit of {limit} tokens. Your messages resulted in "
                            f"{tokens} tokens. Please reduce the length of the messages.", "input",
                       "context_length_exceeded")
    reasoning = bool(REASONING.search(model))
    for name in ("max_tokens", "max_completion_tokens", "messages"):
        if name in body:
            return Refusal(400, f"Unsupported parameter: '{name}'. In the Responses API, this parameter has moved "
                                "to 'max_output_tokens'." if name != "messages" else
                                "Unsupported parameter: 'messages'. Use 'input'.", name, "unsupported_parameter")
    if reasoning and body.get("temperature") not in (None, 1, 1.0):
        return Refusal(400, "Unsupported parameter: 'temperature' is not supported with this model.", "temperature",
                       "unsupported_parameter")
    if not reasoning and body.get("reasoning"):
        return Refusal(400, "Unsupported parameter: 'reasoning.effort' is not supported with this model.",
                       "reasoning.effort", "unsupported_parameter")
    refused = _check_effort(model, (body.get("reasoning") or {}).get("effort"), "reasoning.effort", chat=False)
    if refused is not None:
        return refused
    key = body.get("prompt_cache_key")
    if isinstance(key, str) and len(key) > MAX_CACHE_KEY:
        return Refusal(400, f"Invalid 'prompt_cache_key': string too long. Expected a string with maximum length "
                            f"{MAX_CACHE_KEY}, but got a string with length {len(key)} instead.", "prompt_cache_key",
                       "string_above_max_length")
    items = body.get("input")
    if isinstance(items, str):
        return None
    if not isinstance(items, list) or not items:
        return Refusal(400, "Missing required parameter: 'input'.", "input", "missing_required_parameter")
    calls = [item.get("call_id") for item in items if item.get("type") == "function_call"]
    outputs = [item.get("call_id") for item in items if item.get("type") == "function_call_output"]
    for call_id in outputs:
        if call_id not in calls:
            return Refusal(400, f"No tool call found for function call output with call_id {call_id}.", "input")
    for call_id in calls:
        if call_id not in outputs:
            return Refusal(400, f"No tool output found for function call {call_id}.", "input")
    for index, item in enumerate(items):
        if item.get("type") == "reasoning" and index == len(items) - 1:
            return Refusal(400, f"Item '{item.get('id')}' of type 'reasoning' was provided without its required "
                                "following item.", "input")
        if item.get("type") == "reasoning" and body.get("store") is False:
            if encrypted.get(item.get("id")) != item.get("encrypted_content"):
                return Refusal(400, f"Item with id '{item.get('id')}' not found. Items are not persisted when `store` "
                                    "is set to false. Try again with `store` set to true, or remove this item from "
                                    "your input.", "input")
        if item.get("type") == "message" and item.get("role") == "assistant" and not item.get("content"):
            return Refusal(400, "Invalid 'input': an assistant message needs content.", "input")
    return None
