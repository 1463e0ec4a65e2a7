"""Prompt-cache accounting of the loopback LLM server, the way the services bill it.

Tokens are estimated as a quarter of the JSON length of each piece of the prompt. Anthropic caches
only what the request marks: at each cache_control breakpoint it looks back (up to 20 blocks) for the
longest prefix it has stored, reads that, and writes the rest up to the last breakpoint, each stretch
at the lifetime of the breakpoint that ends it; the reported input_tokens exclude both. A prefix
shorter than the model's minimum (512 to 4096 tokens by model, prompt-caching docs checked 2026-12-04)
is silently not cached, and an entry lives 5 minutes or 1 hour from its last write or read, as marked
(``clock`` gives the time; a test may move it). OpenAI caches
automatically, per prompt_cache_key, in steps of 128 tokens once the prompt reaches 1024; input_tokens
include the cached ones. From gpt-5.6 on, writes are reported (and billed), and a request that marks
prompt_cache_breakpoint blocks is cached only at those marks. OpenAI prefixes shorter
than 1024 tokens are never cached; its entries do not expire.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass

from tests.helpers.llm_rules import CACHE_WRITES_BILLED

MIN_CACHEABLE = 1024
CLAUDE_MINIMUMS = [(re.compile(r"claude-(opus-4-6|opus-4-5|haiku-4-5)"), 4096),
                   (re.compile(r"claude-opus-4-7"), 2048),
                   (re.compile(r"claude-(opus-4-8|sonnet-4-6|sonnet-5(?!-5))"), 1024),
                   (re.compile(r"claude-(fable|mythos-5|opus-5|sonnet-5-5|haiku-5-5)"), 512)]
LIFETIMES = {"5m": 300.0, "1h": 3600.0}
LOOKBACK_BLOCKS = 20
OPENAI_STEP = 128


def tokens_of(value) -> int:
    return max(1, len(json.dumps(value, sort_keys=True)) // 4)


def _without_cache_control(block):
    return {k: v for k, v in block.items() if k != "cache_control"} if isinstance(block, dict) else block


@dataclass
class CacheUsage:
    total: int          # every input token of the request
    read: int = 0
    written: int = 0
    written_1h: int = 0

    @property
    def fresh(self) -> int:
        return self.total - self.read - self.written


def claude_minimum(model: str) -> int:
    return next((tokens for family, tokens in CLAUDE_MINIMUMS if family.search(model)), MIN_CACHEABLE)


class PromptCache:
    def __init__(self) -> None:
        self.anthropic: dict[str, float] = {}  # prefix hash -> when it expires
        self.openai: dict[str, set[str]] = {}
        self.clock = time.monotonic

    def _alive(self, digest: str) -> bool:
        return self.anthropic.get(digest, float("-inf")) > self.clock()

    def anthropic_usage(self, body: dict) -> CacheUsage:
        blocks, marks = [], []  # the prompt in cache order (tools, system, messages) and its breakpoints
        for tool in body.get("tools") or []:
            blocks.append(("tool", _without_cache_control(tool)))
            marks.append(tool.get("cache_control"))
        system = body.get("system")
        for block in ([{"type": "text", "text": system}] if isinstance(system, str) else system or []):
            blocks.append(("system", _without_cache_control(block)))
            marks.append(block.get("cache_control"))
        for index, message in enumerate(body.get("messages") or []):
            content = message.get("content")
            for block in ([{"type": "text", "text": content}] if isinstance(content, str) else content or []):
                blocks.append((f"{index}:{message.get('role')}", _without_cache_control(block)))
                marks.append(block.get("cache_control") if isinstance(block, dict) else None)
        hashes, sizes, running, size = [], [], hashlib.sha256(str(body.get("model")).encode()), 0
        for block in blocks:
            running.update(json.dumps(block, sort_keys=True).encode())
            hashes.append(running.hexdigest())
            size += tokens_of(block[1])
            sizes.append(size)
        usage = CacheUsage(total=size)
        breakpoints = [i for i, mark in enumerate(marks) if mark]
        if not breakpoints:
            return usage
        minimum = claude_minimum(str(body.get("model")))
        read_upto = -1
        for point in breakpoints:
            for i in range(point, max(-1, point - LOOKBACK_BLOCKS), -1):
                if self._alive(hashes[i]):
                    read_upto = max(read_upto, i)
                    break
        usage.read = sizes[read_upto] if read_upto >= 0 else 0
        written_upto = usage.read  # each breakpoint writes the stretch after the one before, at its own lifetime
        for point in breakpoints:
            if point <= read_upto or sizes[point] < minimum:
                continue
            stretch, written_upto = sizes[point] - written_upto, sizes[point]
            usage.written += stretch
            if (marks[point] or {}).get("ttl") == "1h":
                usage.written_1h += stretch
        for point in breakpoints:  # written or read, an entry lives its lifetime from now
            if sizes[point] >= minimum:
                lifetime = LIFETIMES.get((marks[point] or {}).get("ttl", "5m"), 300.0)
                self.anthropic[hashes[point]] = max(self.anthropic.get(hashes[point], 0.0), self.clock() + lifetime)
        return usage

    def openai_usage(self, body: dict, parts: list) -> CacheUsage:
        """parts: the prompt in order (instructions, tools, then each message, input item or content block); a
        part carrying prompt_cache_breakpoint is an explicit breakpoint. Models from gpt-5.6 on report what a
        request writes (cache_write_tokens) and, when a request marks any breakpoint, cache there and (in the
        default implicit mode) at the prompt's end, with no 128-token rounding; otherwise the longest prefix
        seen before is read, in steps of 128 tokens."""
        model = str(body.get("model"))
        key = str(body.get("prompt_cache_key") or "") + "|" + model
        seen = self.openai.setdefault(key, set())
        running, size, hashes, sizes, marks = hashlib.sha256(), 0, [], [], []
        for part in parts:
            marks.append(isinstance(part, dict) and "prompt_cache_breakpoint" in part)
            if marks[-1]:
                part = {k: v for k, v in part.items() if k != "prompt_cache_breakpoint"}
            running.update(json.dumps(part, sort_keys=True).encode())
            size += tokens_of(part)
            hashes.append(running.hexdigest())
            sizes.append(size)
        billed = bool(CACHE_WRITES_BILLED.search(model.rsplit("/", 1)[-1]))
        if billed and any(marks):
            # Implicit mode (the default) adds one breakpoint of its own at the end of the prompt.
            implicit = (body.get("prompt_cache_options") or {}).get("mode", "implicit") == "implicit"
            points = [i for i, marked in enumerate(marks) if marked] + ([len(parts) - 1] if implicit else [])
            usage = CacheUsage(total=size, read=max((sizes[i] for i in range(len(parts)) if hashes[i] in seen),
                                                    default=0))
            written_upto = usage.read
            for i in points:
                if sizes[i] > usage.read and sizes[i] >= MIN_CACHEABLE:
                    usage.written += sizes[i] - written_upto
                    written_upto = sizes[i]
                    seen.add(hashes[i])
            return usage
        cached = max((sizes[i] for i, digest in enumerate(hashes) if digest in seen), default=0)
        seen.update(hashes)
        if size < MIN_CACHEABLE:
            return CacheUsage(total=size)
        read = cached // OPENAI_STEP * OPENAI_STEP
        return CacheUsage(total=size, read=read, written=max(0, size // OPENAI_STEP * OPENAI_STEP - read) if billed
                          else 0)
