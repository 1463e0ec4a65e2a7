"""The rate limits of one key, shared by every conversation that uses it.

Limits are per key (requests and tokens per minute), not per conversation: when one conversation meets a
429, or a reply says that none of the window's requests or fewer tokens than a request takes are left,
every conversation waits until the limit resets, so that N conversations back off once instead of N times.
What a pause lasts comes from the service: Retry-After, else the reset time of the exhausted limit
(Anthropic: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{remaining,reset}` with RFC
3339 times; OpenAI: `x-ratelimit-{remaining,reset}-{requests,tokens}` with durations such as "6m0s" or
"20ms"; both checked 2026-12-04), else a backoff that doubles with each 429 in a row. Requests in flight
at once are capped as well.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Mapping
from datetime import datetime

MAX_PAUSE_S = 60.0
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?$")
ANTHROPIC_LIMITS = ("requests", "tokens", "input-tokens", "output-tokens")
OPENAI_LIMITS = ("requests", "tokens")


class RateLimiter:
    def __init__(self, concurrency: int = 64, base_pause_s: float = 1.0, clock=time.monotonic):
        self.concurrency, self.base_pause_s, self.clock = concurrency, base_pause_s, clock
        self._changed = threading.Condition()
        self._open = 0
        self._paused_until = 0.0
        self._in_a_row = 0                # 429s without a success between them
        self.request_tokens = 0           # tokens the last request took: what the next one will need, about
        self.pauses, self.waits, self.waited_s = 0, 0, 0.0

    def acquire(self) -> None:
        """Returns once a request may be sent: no pause in force and fewer than `concurrency` in flight."""
        with self._changed:
            started = self.clock()
            while self._open >= self.concurrency or self.clock() < self._paused_until:
                self._changed.wait(max(0.01, min(0.5, self._paused_until - self.clock())))
            self._open += 1
            if (waited := self.clock() - started) > 0.001:
                self.waits, self.waited_s = self.waits + 1, self.waited_s + waited

    def release(self) -> None:
        with self._changed:
            self._open -= 1
            self._changed.notify_all()

    def answered(self, headers: Mapping[str, str], tokens: int = 0) -> None:
        """A reply arrived: what its headers say is left of the key's limits."""
        with self._changed:
            self._in_a_row = 0
            self.request_tokens = tokens or self.request_tokens
        if (wait := exhausted_for(headers, self.request_tokens)) is not None:
            self.pause(wait)

    def refused(self, status: int | None, headers: Mapping[str, str]) -> None:
        """A 429 (or an overload, which every conversation meets alike): everyone waits."""
        if status not in (429, 529):
            return
        with self._changed:
            self._in_a_row += 1
            backoff = self.base_pause_s * 2 ** (self._in_a_row - 1)
        hints = (retry_after(headers), exhausted_for(headers, self.request_tokens))
        self.pause(next((hint for hint in hints if hint is not None), backoff))

    def pause(self, seconds: float) -> None:
        with self._changed:
            if (until := self.clock() + min(MAX_PAUSE_S, max(0.0, seconds))) > self._paused_until:
                self._paused_until, self.pauses = until, self.pauses + 1
            self._changed.notify_all()


def retry_after(headers: Mapping[str, str]) -> float | None:
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        try:
            return float(headers[name]) * scale
        except (KeyError, TypeError, ValueError):
            continue
    return None


def exhausted_for(headers: Mapping[str, str], request_tokens: int) -> float | None:
    """Seconds until the first of the key's limits that cannot take another request resets; None if none."""
    needs = {name: 1 if name == "requests" else request_tokens for name in ANTHROPIC_LIMITS}
    waits = [_until(headers.get(f"anthropic-ratelimit-{name}-reset")) for name in ANTHROPIC_LIMITS
             if _short(headers.get(f"anthropic-ratelimit-{name}-remaining"), needs[name])]
    waits += [_duration(headers.get(f"x-ratelimit-reset-{name}")) for name in OPENAI_LIMITS
              if _short(headers.get(f"x-ratelimit-remaining-{name}"), needs[name])]
    return max((wait for wait in waits if wait is not None), default=None)


def _short(remaining: str | None, needed: int) -> bool:
    """Whether what is left is less than the next request needs (a negative count means "not reported")."""
    try:
        left = int(float(remaining))
    except (TypeError, ValueError):
        return False
    return 0 <= left < max(1, needed)


def _until(reset: str | None) -> float | None:
    try:
        moment = datetime.fromisoformat(reset.replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - time.time())


def _duration(text: str | None) -> float | None:
    if (found := _DURATION.match(text.strip()) if text else None) is None or not any(found.groups()):
        return None
    hours, minutes, seconds, millis = (float(g) if g else 0.0 for g in found.groups())
    return hours * 3600 + minutes * 60 + seconds + millis / 1000
