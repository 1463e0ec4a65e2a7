"""A loopback stand-in for the Anthropic Messages and OpenAI Chat Completions APIs.

``LLMServer`` answers ``POST /v1/messages`` (Anthropic) and ``POST /v1/chat/completions``
(OpenAI), non-streaming, by replaying scripted replies from one shared queue. A reply is
built once (``text``, ``tool_call``, ``tool_calls``, ``error``) and rendered in the wire
format of whichever API consumes it, so tests can drive the real SDK clients over HTTP::

    with LLMServer() as server:
        server.script(tool_call("edit", {"path": "train.py"}), text("done"))
        client = anthropic.Anthropic(api_key="test", base_url=server.anthropic_base_url())

Usage numbers are billing buckets: ``usage=(input, output)`` counts fresh (uncached) input
and all output tokens, ``cached`` the input tokens read from the cache, ``thinking_tokens``
the part of the output spent on reasoning. Anthropic reports them as ``input_tokens=input``,
``cache_read_input_tokens=cached``; OpenAI as ``prompt_tokens=input + cached`` with
``prompt_tokens_details.cached_tokens=cached``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PATHS = {"/v1/messages": "anthropic", "/v1/chat/completions": "openai"}

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
    """An assistant turn: optional thinking, optional text, zero or more ``(name, arguments)`` tool calls."""
    text: str | None = None
    thinking: str | None = None
    calls: tuple[tuple[str, dict], ...] = ()
    usage: tuple[int, int] = (1000, 200)
    cached: int = 0
    thinking_tokens: int | None = None


@dataclass(frozen=True)
class Error:
    """An HTTP error answer; ``body=None`` means the default body for the status in the API's own shape."""
    status: int
    body: dict | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Recorded:
    """One request received: ``api`` is "anthropic", "openai" or None (unknown path); ``status`` what was answered."""
    api: str | None
    path: str
    headers: dict[str, str]
    body: Any
    status: int = 0


def _reply(text_: str | None, thinking: str | None, calls: list[tuple[str, dict]], usage: tuple[int, int],
           cached: int, thinking_tokens: int | None) -> Reply:
    if thinking_tokens is not None and thinking_tokens > usage[1]:
        raise ValueError("thinking_tokens is part of the output tokens and cannot exceed them")
    return Reply(text_, thinking, tuple((name, dict(arguments)) for name, arguments in calls),
                 tuple(usage), cached, thinking_tokens)


def text(content: str, thinking: str | None = None, *, usage: tuple[int, int] = (1000, 200), cached: int = 0,
         thinking_tokens: int | None = None) -> Reply:
    """A final assistant message with ``content`` and no tool calls."""
    return _reply(content, thinking, [], usage, cached, thinking_tokens)


def tool_call(name: str, arguments: dict, text: str | None = None, thinking: str | None = None, *,
              usage: tuple[int, int] = (1000, 200), cached: int = 0, thinking_tokens: int | None = None) -> Reply:
    """An assistant message calling one tool, optionally with text before the call."""
    return _reply(text, thinking, [(name, arguments)], usage, cached, thinking_tokens)


def tool_calls(calls: list[tuple[str, dict]], text: str | None = None, thinking: str | None = None, *,
               usage: tuple[int, int] = (1000, 200), cached: int = 0, thinking_tokens: int | None = None) -> Reply:
    """An assistant message calling several tools in one turn, in order."""
    if not calls:
        raise ValueError("tool_calls needs at least one call")
    return _reply(text, thinking, list(calls), usage, cached, thinking_tokens)


def error(status: int, body: dict | None = None, headers: dict[str, str] | None = None) -> Error:
    """An HTTP error answer, e.g. ``error(429, headers={"retry-after": "1"})`` or ``error(529)``."""
    return Error(status, body, dict(headers or {}))


def error_body(api: str | None, status: int, message: str | None = None) -> dict:
    """The error body the given API sends for ``status``."""
    fallback = ("invalid_request_error", "invalid_request_error", None, "Error") if status < 500 else ERRORS[500]
    anthropic_type, openai_type, code, default = ERRORS.get(status, fallback)
    message = message or default
    if api == "openai":
        return {"error": {"message": message, "type": openai_type, "param": None, "code": code}}
    return {"type": "error", "error": {"type": anthropic_type, "message": message}}


class LLMServer:
    """Context manager running the scripted LLM server on 127.0.0.1 in a background thread."""

    def __init__(self, latency: float = 0.0) -> None:
        self.latency = latency  # seconds each successful reply takes, like a model thinking
        self.requests: list[Recorded] = []
        self._queue: deque[Reply | Error] = deque()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def anthropic_base_url(self) -> str:
        """For ``ANTHROPIC_BASE_URL``; the SDK appends ``/v1/messages``."""
        return self.url

    def openai_base_url(self) -> str:
        """For ``OPENAI_BASE_URL``; the SDK appends ``/chat/completions``."""
        return self.url + "/v1"

    def script(self, *replies: Reply | Error) -> None:
        """Queue replies; each model request (either API) consumes the next one."""
        for reply in replies:
            if not isinstance(reply, Reply | Error):
                raise TypeError(f"not a scripted reply: {reply!r}")
        with self._lock:
            self._queue.extend(replies)

    @property
    def pending(self) -> int:
        """How many scripted replies are still unconsumed."""
        with self._lock:
            return len(self._queue)

    def __enter__(self) -> LLMServer:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, args=(0.01,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _record(self, request: Recorded, consume: bool) -> Reply | Error | None:
        """Record ``request`` and, if ``consume``, pop the reply it gets (None when the queue is empty)."""
        with self._lock:
            self.requests.append(request)
            return self._queue.popleft() if consume and self._queue else None

    def _next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def _render(self, api: str, reply: Reply, model: str) -> dict:
        """``reply`` as a non-streaming response body of ``api``."""
        n = self._next_id()
        fresh, output = reply.usage
        if api == "anthropic":
            content = []
            if reply.thinking is not None:
                content.append({"type": "thinking", "thinking": reply.thinking, "signature": f"sig_{n}"})
            if reply.text is not None:
                content.append({"type": "text", "text": reply.text})
            for name, arguments in reply.calls:
                content.append({"type": "tool_use", "id": f"toolu_{self._next_id()}", "name": name,
                                "input": arguments})
            usage = {"input_tokens": fresh, "output_tokens": output, "cache_read_input_tokens": reply.cached,
                     "cache_creation_input_tokens": 0}
            if reply.thinking_tokens is not None:
                usage["output_tokens_details"] = {"thinking_tokens": reply.thinking_tokens}
            return {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": model, "content": content,
                    "stop_reason": "tool_use" if reply.calls else "end_turn", "stop_sequence": None,
                    "usage": usage}
        message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
        if reply.calls:
            message["tool_calls"] = [
                {"id": f"call_{self._next_id()}", "type": "function",
                 "function": {"name": name, "arguments": json.dumps(arguments)}}
                for name, arguments in reply.calls]
        if reply.thinking is not None:
            message["reasoning_content"] = reply.thinking
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": "tool_calls" if reply.calls else "stop"}],
                "usage": {"prompt_tokens": fresh + reply.cached, "completion_tokens": output,
                          "total_tokens": fresh + reply.cached + output,
                          "prompt_tokens_details": {"cached_tokens": reply.cached},
                          "completion_tokens_details": {"reasoning_tokens": reply.thinking_tokens or 0}}}


def _handler(server: LLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, format, *args) -> None:
            pass

        def do_POST(self) -> None:
            path = self.path.split("?", 1)[0]
            api = PATHS.get(path)
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            request = Recorded(api, path, {k.lower(): v for k, v in self.headers.items()}, body)

            valid = api is not None and isinstance(body, dict) and not body.get("stream")
            reply = server._record(request, consume=valid)
            if api is None:
                return self._error(request, 404, f"LLMServer does not serve {path}")
            if not valid:
                return self._error(request, 400, "LLMServer wants a non-streaming JSON request body")
            if reply is None:
                return self._error(request, 500, "no scripted reply left", {"x-should-retry": "false"})
            if isinstance(reply, Error):
                body = reply.body if reply.body is not None else error_body(api, reply.status)
                return self._send(request, reply.status, body, reply.headers)
            time.sleep(server.latency)
            return self._send(request, 200, server._render(api, reply, str(body.get("model", "scripted"))))

        def _error(self, request: Recorded, status: int, message: str, headers: dict | None = None) -> None:
            self._send(request, status, error_body(request.api, status, message), headers)

        def _send(self, request: Recorded, status: int, body: dict, headers: dict | None = None) -> None:
            request.status = status
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("request-id" if request.api == "anthropic" else "x-request-id", f"req_{server._next_id()}")
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

    return Handler
