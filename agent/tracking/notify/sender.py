"""Posting notifications to one webhook, from a thread of its own, so that the loop never waits for it.

Each notification is one POST with a short timeout, retried (tenacity) after a connection error or a time-out,
a 5xx, or a 429 (after its Retry-After when the service says one within MAX_RETRY_AFTER_SECONDS; a longer one
is not waited for). Any other refusal (4xx: a deleted webhook, a bad body) is not retried. A notification that
could not be sent is dropped; the first failure of each webhook is said once, with the URL masked.
"""

from __future__ import annotations

import queue
import threading
import time
from contextlib import suppress
from dataclasses import dataclass

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, stop_after_delay

from agent.tracking.notify.events import Notification
from agent.tracking.notify.formats import Webhook, body
from agent.untrusted import bounded

MAX_RETRY_AFTER_SECONDS = 30.0


@dataclass(frozen=True)
class RetryPolicy:
    timeout_seconds: float = 10.0      # one POST: connect, send and read
    attempts: int = 4                  # tries of one notification, the first included
    give_up_seconds: float = 90.0      # no try starts this long after the first
    backoff_seconds: float = 1.0       # waits 1, 2, 4 ... s between tries
    max_backoff_seconds: float = 15.0


class Refused(Exception):
    """The webhook answered with an HTTP error, and maybe a Retry-After in seconds (Slack, Discord and ntfy give
    seconds; an HTTP date is not waited for)."""

    def __init__(self, response: httpx.Response):
        super().__init__(f"HTTP {response.status_code}")
        self.status, self.retry_after = response.status_code, None
        with suppress(ValueError):
            self.retry_after = max(0.0, float(response.headers.get("Retry-After", "")))


class Sender:
    def __init__(self, hook: Webhook, say, policy: RetryPolicy):
        self.hook, self.say, self.policy = hook, say, policy
        self.sent, self.dropped = 0, 0
        self._warned = False
        self._queue: queue.Queue[Notification | None] = queue.Queue()
        self._client = httpx.Client(timeout=policy.timeout_seconds, follow_redirects=False)
        self._thread = threading.Thread(target=self._work, name=f"notify-{hook.number}", daemon=True)
        self._thread.start()

    def put(self, notification: Notification) -> None:
        self._queue.put(notification)

    def close(self) -> None:
        """No more notifications: the thread ends once those queued are sent."""
        self._queue.put(None)

    def join(self, seconds: float) -> int:
        """Waits up to `seconds` for the queue to drain; the notifications not sent by then."""
        self._thread.join(timeout=max(0.0, seconds))
        # those queued, less the closing None, plus the one being tried
        return self._queue.qsize() if self._thread.is_alive() else 0

    def _work(self) -> None:
        while (notification := self._queue.get()) is not None:
            try:
                self._post(notification)
                self.sent += 1
            except Exception as err:  # a dead webhook costs its own notifications, nothing else
                self.dropped += 1
                self._warn(err)
        self._client.close()

    def _post(self, notification: Notification) -> None:
        made = body(notification, self.hook.format)
        policy = self.policy
        for attempt in Retrying(stop=stop_after_attempt(policy.attempts) | stop_after_delay(policy.give_up_seconds),
                                wait=self._wait, retry=retry_if_exception(self._transient), reraise=True):
            with attempt:
                response = self._client.post(self.hook.url, content=made.content, headers=made.headers)
                if response.status_code >= 300:
                    raise Refused(response)

    def _transient(self, error: BaseException) -> bool:
        if isinstance(error, Refused) and error.status == 429:
            return error.retry_after is None or error.retry_after <= MAX_RETRY_AFTER_SECONDS
        return isinstance(error, httpx.TransportError) or isinstance(error, Refused) and error.status >= 500

    def _wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, Refused) and error.status == 429 and error.retry_after is not None:
            return error.retry_after
        policy = self.policy
        return min(policy.max_backoff_seconds, policy.backoff_seconds * 2 ** (state.attempt_number - 1))

    def _warn(self, error: Exception) -> None:
        if self._warned:
            return
        self._warned = True
        what = str(error) if isinstance(error, Refused) else f"{type(error).__name__}: {error}"
        what = bounded(what.replace(self.hook.url, "<the URL>"), 200)
        self.say(f"warning: notifications to {self.hook.masked()} fail ({what}); the night goes on without them "
                 "(said once)")


def drain(senders: list[Sender], seconds: float) -> int:
    """Closes every sender and waits, `seconds` in all, for their queues; the notifications left unsent."""
    for sender in senders:
        sender.close()
    deadline = time.monotonic() + seconds
    return sum(sender.join(deadline - time.monotonic()) for sender in senders)
