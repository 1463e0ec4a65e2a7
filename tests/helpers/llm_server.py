"""A loopback stand-in for the Anthropic Messages, OpenAI Chat Completions and OpenAI Responses APIs.

``LLMServer`` answers ``POST /v1/messages`` (Anthropic; streamed as server-sent events when the
request asks for ``stream``), ``POST /v1/chat/completions`` and ``POST /v1/responses`` (OpenAI; the
Responses API streamed as its events when asked, Chat Completions never) by replaying scripted replies
from one shared queue. A reply is built once (``text``, ``tool_call``, ``tool_calls``, ``error``; for the Responses
API also ``custom_tool_call``, a freeform call such as Codex's apply_patch) and
rendered in the wire format of whichever API consumes it, so tests can drive the real SDK clients over HTTP::

    with LLMServer() as server:
        server.script(tool_call("edit", {"path": "train.py"}), text("done"))
        client = anthropic.Anthropic(api_key="test", base_url=server.anthropic_base_url())

Like the services, it refuses what they refuse (tests/helpers/llm_rules.py), with their status and
error shape, before a scripted reply is consumed. Usage: with ``usage=None`` (the default) input
tokens are measured from the request and the prompt cache is simulated (tests/helpers/llm_cache.py):
Anthropic reports ``input_tokens`` without the cache reads and writes, which come in
``cache_read_input_tokens`` and ``cache_creation_input_tokens``; OpenAI reports all prompt tokens with
the cached part in ``cached_tokens``. With ``usage=(input, output)`` the numbers are billing buckets
given by the test: fresh input, all output, and ``cached`` input read from the cache.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.helpers import llm_rules
from tests.helpers.llm_cache import PromptCache
from tests.helpers.llm_rules import Refusal, check_anthropic, check_chat, check_responses

PATHS = {"/v1/messages": "anthropic", "/v1/chat/completions": "openai", "/v1/responses": "responses"}
DEFAULT_OUTPUT_TOKENS = 200

ERROR_MESSAGES = {"overloaded_error": "Overloaded", "api_error": "Internal server error",
                  "server_error": "The server had an error while processing your request. Sorry about that!",
                  "rate_limit_error": "Rate limit exceeded", "invalid_request_error": "Invalid request"}

# status: (anthropic error type, openai error type, openai code, message)
ERRORS = {
    400: ("invalid_request_error", "invalid_request_error", None, "Invalid request"),
    401: ("authentication_error", "invalid_request_error", "invalid_api_key", "Invalid API key"),
    403: ("permission_error", "invalid_request_error", None, "Permission denied"),
    404: ("not_found_error", "invalid_request_error", "model_not_found", "Not found"),
    413: ("request_too_large", "invalid_request_error", None, "Request too large"),
    429: ("rate_limit_error", "requests", "rate_limit_exceeded", "Rate limit exceeded"),
    500: ("api_error", "server_error", None, "Internal server error"),
    503: ("api_error", "server_error", None, "Service unavailable"),
    529: ("overloaded_error", "server_error", None, "Overloaded"),
}


@dataclass(frozen=True)
class Reply:
    """An assistant turn: optional thinking, optional text, zero or more ``(name, arguments)`` tool calls;
    arguments given as a string are sent as they are (OpenAI only: Anthropic always sends JSON). ``stop``
    ends it the way the service ends a turn early: "max_tokens" cuts the last tool call's arguments (or the
    text) short at the output limit, "refusal" is the model declining (its text is the refusal)."""
    text: str | None = None
    thinking: str | None = None
    calls: tuple[tuple[str, dict | str], ...] = ()
    usage: tuple[int, int] | None = None
    cached: int = 0
    thinking_tokens: int | None = None
    stop: str | None = None
    custom: bool = False  # Responses API: the calls are custom (freeform) tool calls whose input is the raw string


@dataclass(frozen=True)
class Fault:
    """A request answered 200 that then fails, as the services' streams do: ``error_event`` sends the start of
    the reply and then the API's error event of ``kind`` (Anthropic's error.type, OpenAI's error code);
    ``drop`` closes the connection halfway through the body."""
    how: str
    kind: str = "overloaded_error"
    reply: Reply = Reply(text="this reply never arrives whole")


@dataclass(frozen=True)
class Error:
    """An HTTP error answer; ``body=None`` means the default body for the status in the API's own shape."""
    status: int
    body: dict | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Recorded:
    """One request received: ``api`` is "anthropic", "openai", "responses" or None (unknown path); ``status`` what
    was answered; ``usage`` the usage reported (of a successful answer)."""
    api: str | None
    path: str
    headers: dict[str, str]
    body: Any
    status: int = 0
    usage: dict | None = None
    refusal: str | None = None


def _reply(text_: str | None, thinking: str | None, calls: list[tuple[str, dict | str]],
           usage: tuple[int, int] | None, cached: int, thinking_tokens: int | None) -> Reply:
    output = usage[1] if usage is not None else DEFAULT_OUTPUT_TOKENS
    if thinking_tokens is not None and thinking_tokens > output:
        raise ValueError("thinking_tokens is part of the output tokens and cannot exceed them")
    return Reply(text_, thinking, tuple((name, arguments if isinstance(arguments, str) else dict(arguments))
                                        for name, arguments in calls),
                 tuple(usage) if usage is not None else None, cached, thinking_tokens)


def text(content: str, thinking: str | None = None, *, usage: tuple[int, int] | None = None, cached: int = 0,
         thinking_tokens: int | None = None) -> Reply:
    """A final assistant message with ``content`` and no tool calls."""
    return _reply(content, thinking, [], usage, cached, thinking_tokens)


def tool_call(name: str, arguments: dict | str, text: str | None = None, thinking: str | None = None, *,
              usage: tuple[int, int] | None = None, cached: int = 0, thinking_tokens: int | None = None) -> Reply:
    """An assistant message calling one tool, optionally with text before the call."""
    return _reply(text, thinking, [(name, arguments)], usage, cached, thinking_tokens)


def tool_calls(calls: list[tuple[str, dict | str]], text: str | None = None, thinking: str | None = None, *,
               usage: tuple[int, int] | None = None, cached: int = 0, thinking_tokens: int | None = None) -> Reply:
    """An assistant message calling several tools in one turn, in order."""
    if not calls:
        raise ValueError("tool_calls needs at least one call")
    return _reply(text, thinking, list(calls), usage, cached, thinking_tokens)


def custom_tool_call(name: str, input_text: str, text: str | None = None, thinking: str | None = None) -> Reply:
    """A Responses API custom (freeform) tool call, e.g. Codex's apply_patch, whose input is plain text, not JSON."""
    return replace(_reply(text, thinking, [(name, input_text)], None, 0, None), custom=True)


def cut_tool_call(name: str, arguments: dict, *, usage: tuple[int, int] | None = None) -> Reply:
    """A tool call cut at the output limit: its arguments arrive incomplete, the stop reason says max_tokens."""
    return Reply(calls=((name, dict(arguments)),), usage=usage, stop="max_tokens")


def refusal(content: str = "I can't help with that.") -> Reply:
    """The model declining: Anthropic's stop reason "refusal", OpenAI's refusal content part."""
    return Reply(text=content, stop="refusal")


def stream_error(kind: str = "overloaded_error") -> Fault:
    """HTTP 200, the start of the reply, then an error event of ``kind``."""
    return Fault("error_event", kind)


def dropped_connection() -> Fault:
    """HTTP 200 and half the body, then the connection closes."""
    return Fault("drop")


def failed_response(kind: str = "server_error") -> Fault:
    """OpenAI Responses stream: HTTP 200, the start of the reply, then response.failed with error.code ``kind``
    (and the usage so far); elsewhere the same as ``stream_error(kind)``."""
    return Fault("failed", kind)


def stream_ended_early(reply: Reply | None = None) -> Fault:
    """HTTP 200 and a whole body that stops before the end: an OpenAI Responses stream without its terminal
    event, an Anthropic stream inside the last delta of ``reply`` (no message_delta, no message_stop);
    elsewhere the same as ``dropped_connection()``."""
    return Fault("end_early", reply=reply or Reply(text="this reply never arrives whole"))


def error(status: int, body: dict | None = None, headers: dict[str, str] | None = None) -> Error:
    """An HTTP error answer, e.g. ``error(429, headers={"retry-after": "1"})`` or ``error(529)``."""
    return Error(status, body, dict(headers or {}))


def error_body(api: str | None, status: int, message: str | None = None) -> dict:
    """The error body the given API sends for ``status``."""
    fallback = ("invalid_request_error", "invalid_request_error", None, "Error") if status < 500 else ERRORS[500]
    anthropic_type, openai_type, code, default = ERRORS.get(status, fallback)
    message = message or default
    if api in ("openai", "responses"):
        return {"error": {"message": message, "type": openai_type, "param": None, "code": code}}
    return {"type": "error", "error": {"type": anthropic_type, "message": message}}



def refusal_body(api: str, refusal: Refusal) -> dict:
    if api == "anthropic":
        kind = ERRORS[refusal.status][0] if refusal.status in ERRORS else "invalid_request_error"
        return {"type": "error", "error": {"type": kind, "message": refusal.message}}
    return {"error": {"message": refusal.message, "type": "invalid_request_error", "param": refusal.param,
                      "code": refusal.code}}


class LLMServer:
    """Context manager running the scripted LLM server on 127.0.0.1 in a background thread."""

    def __init__(self, latency: float = 0.0, responder=None) -> None:
        self.latency = latency  # seconds each successful reply takes, like a model thinking
        # responder(api, body) -> Reply | Error | Fault: the reply to a request when no scripted one is left (a model
        # that answers what it is asked, for conversations running at once, which take replies in no set order)
        self.responder = responder
        self._limited_until = 0.0  # a rate limit in force: every request until then is refused with a 429
        self._serving = 0
        self.most_at_once = 0      # the most requests being answered at the same moment
        self.requests: list[Recorded] = []
        self.cache = PromptCache()
        self._queue: deque[Reply | Error | Fault] = deque()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._signatures: dict[str, str] = {}         # thinking text -> signature issued with it
        self._thinking_of_call: dict[str, str] = {}   # tool_use id -> signature of its turn's thinking
        self._encrypted: dict[str, str] = {}          # reasoning item id -> encrypted content issued with it

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def anthropic_base_url(self) -> str:
        """For ``ANTHROPIC_BASE_URL``; the SDK appends ``/v1/messages``."""
        return self.url

    def openai_base_url(self) -> str:
        """For ``OPENAI_BASE_URL``; the SDK appends ``/chat/completions`` or ``/responses``."""
        return self.url + "/v1"

    def script(self, *replies: Reply | Error | Fault) -> None:
        """Queue replies; each model request (either API) consumes the next one."""
        for reply in replies:
            if not isinstance(reply, Reply | Error | Fault):
                raise TypeError(f"not a scripted reply: {reply!r}")
        with self._lock:
            self._queue.extend(replies)

    def rate_limit(self, seconds: float) -> None:
        """Refuses every request for the next `seconds` with a 429, as a key's exhausted limit does: Retry-After (in
        whole seconds, as the services send it) and the API's remaining/reset headers."""
        with self._lock:
            self._limited_until = max(self._limited_until, time.monotonic() + seconds)

    def _limited(self, api: str) -> dict[str, str] | None:
        """The 429's headers while a rate limit is in force, else None."""
        with self._lock:
            left = self._limited_until - time.monotonic()
        if left <= 0:
            return None
        if api == "anthropic":
            reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + left + 1))
            return {"retry-after": str(math.ceil(left)), "anthropic-ratelimit-requests-remaining": "0",
                    "anthropic-ratelimit-requests-reset": reset}
        return {"retry-after": str(math.ceil(left)), "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": f"{left:.3f}s"}

    def clear(self) -> None:
        """Drop the replies not consumed yet."""
        with self._lock:
            self._queue.clear()

    @property
    def pending(self) -> int:
        """How many scripted replies are still unconsumed."""
        with self._lock:
            return len(self._queue)

    @property
    def refusals(self) -> list[str]:
        """The messages of every request refused by the rules, in order."""
        return [r.refusal for r in self.requests if r.refusal]

    def __enter__(self) -> LLMServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, args=(0.01,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _check(self, api: str, body: dict, headers: dict[str, str]) -> Refusal | None:
        with self._lock:
            if api == "anthropic":
                betas = headers.get("anthropic-beta", "")
                return check_anthropic(body, self._signatures, self._thinking_of_call, betas)
            if api == "openai":
                return check_chat(body)
            return check_responses(body, self._encrypted)

    def _record(self, request: Recorded, consume: bool) -> Reply | Error | None:
        """Record ``request`` and, if ``consume``, pop the reply it gets (None when the queue is empty)."""
        with self._lock:
            self.requests.append(request)
            return self._queue.popleft() if consume and self._queue else None

    def _next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def _usage(self, api: str, reply: Reply, body: dict, output: int) -> dict:
        if reply.usage is not None:
            fresh, out = reply.usage
            if api == "anthropic":
                return {"input_tokens": fresh, "output_tokens": out, "cache_read_input_tokens": reply.cached,
                        "cache_creation_input_tokens": 0}
            return {"input": fresh + reply.cached, "cached": reply.cached, "written": 0, "output": out}
        with self._lock:
            if api == "anthropic":
                cache = self.cache.anthropic_usage(body)
                return {"input_tokens": cache.fresh, "output_tokens": output,
                        "cache_read_input_tokens": cache.read, "cache_creation_input_tokens": cache.written,
                        "cache_creation": {"ephemeral_1h_input_tokens": cache.written_1h,
                                           "ephemeral_5m_input_tokens": cache.written - cache.written_1h}}
            if api == "openai":
                parts = [body.get("tools") or []] + list(body.get("messages") or [])
            else:  # each content block a part of its own: a block may carry a prompt_cache_breakpoint
                parts = [body.get("instructions"), body.get("tools") or []]
                for item in [body["input"]] if isinstance(body.get("input"), str) else list(body.get("input") or []):
                    content = item.get("content") if isinstance(item, dict) else None
                    if isinstance(content, list) and content:
                        parts += [{"role": item.get("role"), **block} if isinstance(block, dict) else block
                                  for block in content]
                    else:
                        parts.append(item)
            cache = self.cache.openai_usage(body, parts)
            return {"input": cache.total, "cached": cache.read, "written": cache.written, "output": output}

    def _render(self, api: str, reply: Reply, body: dict) -> dict:
        """``reply`` as a non-streaming response body of ``api``."""
        model = str(body.get("model", "scripted"))
        n = self._next_id()
        if api == "anthropic":
            content = []
            signature = None
            if reply.thinking is not None:
                signature = f"sig_{n}_{abs(hash(reply.thinking)) % 10**8}"
                content.append({"type": "thinking", "thinking": reply.thinking, "signature": signature})
            if reply.text is not None:
                content.append({"type": "text", "text": reply.text})
            for name, arguments in reply.calls:
                content.append({"type": "tool_use", "id": f"toolu_{self._next_id()}", "name": name,
                                "input": arguments})
            if reply.stop == "max_tokens" and reply.calls:
                content[-1]["cut"] = True  # rendered with its arguments cut short
            with self._lock:
                if signature is not None:
                    self._signatures[reply.thinking] = signature
                    for block in content:
                        if block["type"] == "tool_use":
                            self._thinking_of_call[block["id"]] = signature
            usage = self._usage(api, reply, body, DEFAULT_OUTPUT_TOKENS)
            if reply.thinking_tokens is not None:
                usage["output_tokens_details"] = {"thinking_tokens": reply.thinking_tokens}
            return {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": model, "content": content,
                    "stop_reason": reply.stop or ("tool_use" if reply.calls else "end_turn"), "stop_sequence": None,
                    "usage": usage}
        arguments_of = [(name, arguments if isinstance(arguments, str) else json.dumps(arguments))
                        for name, arguments in reply.calls]
        if api == "responses":
            output: list[dict] = []
            effort = (body.get("reasoning") or {}).get("effort")
            # a model that does not reason, or effort none (gpt-5.1 and 5.2 default to it): no reasoning item
            bare = model.rsplit("/")[-1]
            reasons = bool(llm_rules.REASONING.search(bare)) and effort != "none" and not (
                effort is None and llm_rules.REASONS_ONLY_WHEN_ASKED.search(bare))
            if reply.thinking is not None and reasons:
                item = {"type": "reasoning", "id": f"rs_{n}", "summary": [{"type": "summary_text",
                                                                             "text": reply.thinking}]}
                if "reasoning.encrypted_content" in (body.get("include") or []):
                    item["encrypted_content"] = f"enc_{n}_{abs(hash(reply.thinking)) % 10**8}"
                    with self._lock:
                        self._encrypted[item["id"]] = item["encrypted_content"]
                output.append(item)
            if reply.text is not None:
                part = ({"type": "refusal", "refusal": reply.text} if reply.stop == "refusal" else
                        {"type": "output_text", "text": reply.text, "annotations": []})
                output.append({"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                               "content": [part]})
            cut = reply.stop == "max_tokens"
            for index, (name, arguments) in enumerate(arguments_of):
                k = self._next_id()
                last = index == len(arguments_of) - 1
                if reply.custom:
                    output.append(custom_call_item(name, arguments, k))
                    continue
                output.append({"type": "function_call", "id": f"fc_{k}", "call_id": f"call_{k}", "name": name,
                               "arguments": arguments[: len(arguments) * 3 // 5] if cut and last else arguments,
                               "status": "incomplete" if cut and last else "completed"})
            usage = self._usage(api, reply, body, DEFAULT_OUTPUT_TOKENS)
            return {"id": f"resp_{n}", "object": "response", "created_at": int(time.time()), "model": model,
                    "status": "incomplete" if cut else "completed", "output": output, "error": None,
                    "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
                    "parallel_tool_calls": True, "tool_choice": "auto", "tools": body.get("tools") or [],
                    "store": body.get("store", True),
                    "usage": {"input_tokens": usage["input"], "output_tokens": usage["output"],
                              "total_tokens": usage["input"] + usage["output"],
                              "input_tokens_details": {"cached_tokens": usage["cached"],
                                                       "cache_write_tokens": usage["written"]},
                              "output_tokens_details": {"reasoning_tokens": reply.thinking_tokens or 0 if reasons
                                                        else 0}}}
        declined = reply.stop == "refusal"
        message: dict[str, Any] = {"role": "assistant", "content": None if declined else reply.text,
                                   "refusal": reply.text if declined else None}
        if reply.calls:
            if reply.stop == "max_tokens":  # the last call's arguments cut short at the output limit
                name, arguments = arguments_of[-1]
                arguments_of[-1] = (name, arguments[: len(arguments) * 3 // 5])
            message["tool_calls"] = [{"id": f"call_{self._next_id()}", "type": "function",
                                      "function": {"name": name, "arguments": arguments}}
                                     for name, arguments in arguments_of]
        if reply.thinking is not None or llm_rules.DEEPSEEK_THINKING.search(model.rsplit("/")[-1]):
            message["reasoning_content"] = reply.thinking or ""  # DeepSeek's thinking mode always sends it
        if reply.thinking is not None and "/" in model:  # OpenRouter: the reasoning as structured details
            message["reasoning_details"] = [{"type": "reasoning.text", "text": reply.thinking, "format": "unknown",
                                             "index": 0}]
        usage = self._usage(api, reply, body, DEFAULT_OUTPUT_TOKENS)
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": "length" if reply.stop == "max_tokens" else
                             "tool_calls" if reply.calls else "stop"}],
                "usage": {"prompt_tokens": usage["input"], "completion_tokens": usage["output"],
                          "total_tokens": usage["input"] + usage["output"],
                          "prompt_tokens_details": {"cached_tokens": usage["cached"]},
                          "completion_tokens_details": {"reasoning_tokens": reply.thinking_tokens or 0}}}


def anthropic_events(message: dict) -> list[tuple[str, dict]]:
    """An Anthropic message as the events the service streams for ``stream: true``; a tool call marked "cut"
    stops partway through its arguments, as one cut at max_tokens does."""
    usage = message["usage"]
    events = [("message_start", {"type": "message_start", "message": {
        **message, "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1}}})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "thinking":
            start, deltas = {"type": "thinking", "thinking": "", "signature": ""}, [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]}]
        elif block["type"] == "text":
            start, deltas = {"type": "text", "text": ""}, [{"type": "text_delta", "text": block["text"]}]
        else:
            raw = json.dumps(block["input"])
            if block.get("cut"):
                raw = raw[: len(raw) * 3 // 5]
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": raw[: len(raw) // 2]},
                      {"type": "input_json_delta", "partial_json": raw[len(raw) // 2:]}]
        events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": start}))
        events += [("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
                   for delta in deltas]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(("message_delta", {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"],
                                                                        "stop_sequence": None},
                                     "usage": {"output_tokens": usage["output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def encoded_events(events: list[tuple[str, dict]]) -> bytes:
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


def server_sent_events(message: dict) -> bytes:
    """An Anthropic message as the event stream the service sends for ``stream: true``."""
    return encoded_events(anthropic_events(message))


def responses_events(response: dict) -> list[tuple[str, dict]]:
    """An OpenAI response as the events the Responses API streams for ``stream: true``: created, in_progress,
    each output item with its parts and deltas, then response.completed or response.incomplete (no [DONE])."""
    started = {**response, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    events: list[tuple[str, dict]] = [("response.created", {"response": started}),
                                      ("response.in_progress", {"response": started})]
    for index, item in enumerate(response["output"]):
        at = {"item_id": item["id"], "output_index": index}
        if item["type"] == "reasoning":
            events.append(("response.output_item.added", {"output_index": index, "item": {**item, "summary": []}}))
            for j, part in enumerate(item.get("summary") or []):
                events += [("response.reasoning_summary_part.added", {**at, "summary_index": j,
                                                                       "part": {**part, "text": ""}}),
                           ("response.reasoning_summary_text.delta", {**at, "summary_index": j,
                                                                       "delta": part["text"]}),
                           ("response.reasoning_summary_text.done", {**at, "summary_index": j, "text": part["text"]}),
                           ("response.reasoning_summary_part.done", {**at, "summary_index": j, "part": part})]
        elif item["type"] == "message":
            events.append(("response.output_item.added", {"output_index": index,
                                                          "item": {**item, "status": "in_progress", "content": []}}))
            for j, part in enumerate(item["content"]):
                key = "refusal" if part["type"] == "refusal" else "text"
                kind = "refusal" if key == "refusal" else "output_text"
                logprobs = {} if key == "refusal" else {"logprobs": []}
                events += [("response.content_part.added", {**at, "content_index": j, "part": {**part, key: ""}}),
                           (f"response.{kind}.delta", {**at, "content_index": j, "delta": part[key], **logprobs}),
                           (f"response.{kind}.done", {**at, "content_index": j, key: part[key], **logprobs}),
                           ("response.content_part.done", {**at, "content_index": j, "part": part})]
        elif item["type"] == "custom_tool_call":
            events += custom_call_events(item, index)
            continue
        else:
            raw = item["arguments"]
            events += [("response.output_item.added", {"output_index": index, "item": {
                           **item, "arguments": "", "status": "in_progress"}}),
                       ("response.function_call_arguments.delta", {**at, "delta": raw[: len(raw) // 2]}),
                       ("response.function_call_arguments.delta", {**at, "delta": raw[len(raw) // 2:]}),
                       ("response.function_call_arguments.done", {**at, "arguments": raw})]
        events.append(("response.output_item.done", {"output_index": index, "item": item}))
    events.append((f"response.{response['status']}", {"response": response}))
    return [(name, {"type": name, "sequence_number": number, **data}) for number, (name, data) in enumerate(events)]


def custom_call_item(name: str, input_text: str, k: int) -> dict:
    """A custom (freeform) tool call output item of the Responses API: its input is the raw text."""
    return {"type": "custom_tool_call", "id": f"ctc_{k}", "call_id": f"call_{k}", "name": name, "input": input_text,
            "status": "completed"}


def custom_call_events(item: dict, index: int) -> list[tuple[str, dict]]:
    """A custom tool call as streamed: added (empty input), the input in two deltas, its done event, item done."""
    at = {"item_id": item["id"], "output_index": index}
    raw = item["input"]
    return [("response.output_item.added", {"output_index": index, "item": {**item, "input": "",
                                                                           "status": "in_progress"}}),
            ("response.custom_tool_call_input.delta", {**at, "delta": raw[: len(raw) // 2]}),
            ("response.custom_tool_call_input.delta", {**at, "delta": raw[len(raw) // 2:]}),
            ("response.custom_tool_call_input.done", {**at, "input": raw}),
            ("response.output_item.done", {"output_index": index, "item": item})]


def failed_after_200(api: str, streaming: bool, rendered: dict, fault: Fault) -> tuple[bytes, str, bool]:
    """The body of a 200 that fails (what is sent, its content type, and whether the connection is cut after
    half of it)."""
    if api == "responses" and streaming:
        events = responses_events(rendered)
        if fault.how == "end_early":  # a whole body, but no terminal event
            return encoded_events(events[:-1]), "text/event-stream", False
        if fault.how == "drop":
            return encoded_events(events), "text/event-stream", True
        message = ERROR_MESSAGES.get(fault.kind, fault.kind)
        if fault.how == "failed":
            failed = {**rendered, "status": "failed", "output": [], "incomplete_details": None,
                      "error": {"code": fault.kind, "message": message}}
            last = ("response.failed", {"type": "response.failed", "sequence_number": 2, "response": failed})
        else:
            last = ("error", {"type": "error", "sequence_number": 2, "code": fault.kind, "message": message,
                              "param": None})
        return encoded_events(events[:2] + [last]), "text/event-stream", False
    if api == "anthropic" and streaming and fault.how == "end_early":  # a whole body, stopping inside a tool call
        events = anthropic_events(rendered)
        last_delta = max(i for i, (name, _) in enumerate(events) if name == "content_block_delta")
        return encoded_events(events[:last_delta]), "text/event-stream", False
    if fault.how in ("failed", "end_early"):
        fault = Fault("error_event" if fault.how == "failed" else "drop", fault.kind, fault.reply)
    if api == "anthropic" and streaming:
        events = anthropic_events({**rendered, "content": [b for b in rendered["content"] if not b.get("cut")]})
        if fault.how == "error_event":
            message = ERROR_MESSAGES.get(fault.kind, fault.kind)
            error = {"type": "error", "error": {"type": fault.kind, "message": message}}
            return encoded_events(events[:2] + [("error", error)]), "text/event-stream", False
        return encoded_events(events), "text/event-stream", True
    if fault.how == "error_event":  # a JSON body that is an error, as OpenAI-compatible gateways send with a 200
        body = {"error": {"message": ERROR_MESSAGES.get(fault.kind, fault.kind), "type": fault.kind, "param": None,
                          "code": fault.kind}}
        return json.dumps(body).encode(), "application/json", False
    return json.dumps(rendered).encode(), "application/json", True


def _handler(server: LLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format, *args) -> None:
            pass

        def do_POST(self) -> None:
            with server._lock:
                server._serving += 1
                server.most_at_once = max(server.most_at_once, server._serving)
            try:
                self._answer()
            finally:
                with server._lock:
                    server._serving -= 1

        def do_GET(self) -> None:
            """Recorded and answered 404 (no API here is read with GET), so a test sees every request a client makes."""
            request = Recorded(None, self.path.split("?", 1)[0], {k.lower(): v for k, v in self.headers.items()}, None)
            server._record(request, consume=False)
            self._error(request, 404, f"LLMServer does not serve GET {request.path}")

        def _answer(self) -> None:
            path = self.path.split("?", 1)[0]
            api = PATHS.get(path)
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            request = Recorded(api, path, {k.lower(): v for k, v in self.headers.items()}, body)
            streaming = isinstance(body, dict) and bool(body.get("stream"))
            valid = api is not None and isinstance(body, dict) and (api != "openai" or not streaming)
            limited = server._limited(api) if valid else None
            refusal = server._check(api, body, request.headers) if valid and limited is None else None
            reply = server._record(request, consume=valid and refusal is None and limited is None)
            if limited is not None:
                return self._send(request, 429, error_body(api, 429), limited)
            if reply is None and valid and refusal is None and server.responder is not None:
                reply = server.responder(api, body)
            if api is None:
                return self._error(request, 404, f"LLMServer does not serve {path}")
            if not valid:
                return self._error(request, 400, "LLMServer wants a JSON request body (not streamed on "
                                                 "/v1/chat/completions)")
            if refusal is not None:
                request.refusal = refusal.message
                return self._send(request, refusal.status, refusal_body(api, refusal))
            if reply is None:
                return self._error(request, 500, "no scripted reply left", {"x-should-retry": "false"})
            if isinstance(reply, Error):
                body = reply.body if reply.body is not None else error_body(api, reply.status)
                return self._send(request, reply.status, body, reply.headers)
            if isinstance(reply, Fault):
                data, content_type, cut = failed_after_200(api, streaming, server._render(api, reply.reply, body),
                                                           reply)
                return self._send_bytes(request, 200, data, content_type, cut=cut)
            time.sleep(server.latency)
            rendered = server._render(api, reply, body)
            request.usage = rendered["usage"]
            if streaming and api == "responses":
                return self._send_bytes(request, 200, encoded_events(responses_events(rendered)), "text/event-stream")
            if streaming:
                return self._send_bytes(request, 200, server_sent_events(rendered), "text/event-stream")
            return self._send(request, 200, rendered)

        def _error(self, request: Recorded, status: int, message: str, headers: dict | None = None) -> None:
            self._send(request, status, error_body(request.api, status, message), headers)

        def _send(self, request: Recorded, status: int, body: dict, headers: dict | None = None) -> None:
            self._send_bytes(request, status, json.dumps(body).encode(), "application/json", headers)

        def _send_bytes(self, request: Recorded, status: int, data: bytes, content_type: str,
                        headers: dict | None = None, cut: bool = False) -> None:
            request.status = status
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("request-id" if request.api == "anthropic" else "x-request-id", f"req_{server._next_id()}")
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if cut:  # the promised length never arrives: the client sees the connection close mid-body
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            self.wfile.write(data)

    return Handler


@contextlib.contextmanager
def serving_both_apis(monkeypatch):
    """An LLMServer that the SDKs' own variables point at, with test keys (a pytest monkeypatch sets them)."""
    with LLMServer() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url())
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url())
        yield server
