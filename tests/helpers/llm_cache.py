"""Prompt-cache accounting of the loopback LLM server, the way the services bill it.

Tokens are estimated as a quarter of the JSON length of each piece of the prompt. Anthropic caches
only what the request marks: at each cache_control breakpoint it looks back (up to 20 blocks) for the
longest prefix it has stored, reads that, and writes the rest up to the last breakpoint, each stretch
at the lifetime of the breakpoint that ends it; the reported input_tokens exclude both. OpenAI caches
automatically, per prompt_cache_key, in steps of 128 tokens once the prompt reaches 1024; input_tokens
include the cached ones. Prefixes shorter than
1024 tokens are never cached. Entries do not expire (a night's prefix is refreshed on every read).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

MIN_CACHEABLE = 1024
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


class PromptCache:
    def __init__(self) -> None:
        self.anthropic: set[str] = set()
        self.openai: dict[str, set[str]] = {}

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
        read_upto = -1
        for point in breakpoints:
            for i in range(point, max(-1, point - LOOKBACK_BLOCKS), -1):
                if hashes[i] in self.anthropic:
                    read_upto = max(read_upto, i)
                    break
        usage.read = sizes[read_upto] if read_upto >= 0 else 0
        written_upto = usage.read  # each breakpoint writes the stretch after the one before, at its own lifetime
        for point in breakpoints:
            if point <= read_upto or sizes[point] < MIN_CACHEABLE:
                continue
            stretch, written_upto = sizes[point] - written_upto, sizes[point]
            usage.written += stretch
            if (marks[point] or {}).get("ttl") == "1h":
                usage.written_1h += stretch
        for point in breakpoints:
            if sizes[point] >= MIN_CACHEABLE:
                self.anthropic.add(hashes[point])
        return usage

    def openai_usage(self, body: dict, parts: list) -> CacheUsage:
        """parts: the prompt in order (instructions, tools, then each message or input item)."""
        key = str(body.get("prompt_cache_key") or "") + "|" + str(body.get("model"))
        seen = self.openai.setdefault(key, set())
        running, size, cached = hashlib.sha256(), 0, 0
        for part in parts:
            running.update(json.dumps(part, sort_keys=True).encode())
            size += tokens_of(part)
            digest = running.hexdigest()
            if digest in seen:
                cached = size
            seen.add(digest)
        if size < MIN_CACHEABLE:
            return CacheUsage(total=size)
        return CacheUsage(total=size, read=cached // OPENAI_STEP * OPENAI_STEP)
