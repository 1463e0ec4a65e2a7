"""The key's rate limits as one limiter shared by every conversation: what the services' headers say, read as
they write them (Anthropic: RFC 3339 reset times; OpenAI: durations), and a pause that holds every caller."""

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from agent.llm.rate_limits import RateLimiter, exhausted_for, retry_after


def test_anthropic_headers_pause_until_the_exhausted_limit_resets():
    reset = (datetime.now(UTC) + timedelta(seconds=12)).isoformat().replace("+00:00", "Z")
    assert exhausted_for({"anthropic-ratelimit-requests-remaining": "0",
                          "anthropic-ratelimit-requests-reset": reset}, 0) == pytest.approx(12, abs=1.5)
    # tokens left, but fewer than the last request took
    assert exhausted_for({"anthropic-ratelimit-input-tokens-remaining": "900",
                          "anthropic-ratelimit-input-tokens-reset": reset}, 5000) == pytest.approx(12, abs=1.5)
    assert exhausted_for({"anthropic-ratelimit-input-tokens-remaining": "90000",
                          "anthropic-ratelimit-input-tokens-reset": reset}, 5000) is None


@pytest.mark.parametrize(("reset", "seconds"), [("6m0s", 360.0), ("1s", 1.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5),
                                                ("0.5s", 0.5)])
def test_openai_reset_durations(reset, seconds):
    assert exhausted_for({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": reset},
                         0) == pytest.approx(seconds)


def test_what_is_not_reported_or_not_understood_never_pauses():
    assert exhausted_for({"x-ratelimit-remaining-tokens": "-1", "x-ratelimit-reset-tokens": "0"}, 100) is None
    assert exhausted_for({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "soon"}, 0) is None
    assert exhausted_for({}, 100) is None
    assert retry_after({"retry-after": "later"}) is None
    assert retry_after({"retry-after-ms": "1500", "retry-after": "2"}) == 1.5


def test_a_429_pauses_every_caller_until_its_retry_after():
    limiter = RateLimiter(base_pause_s=5.0)
    limiter.refused(429, {"retry-after": "0.4"})
    started, waited = time.monotonic(), []

    def call():
        limiter.acquire()
        waited.append(time.monotonic() - started)
        limiter.release()

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(waited) == 4 and min(waited) >= 0.35 and max(waited) < 2.0
    assert limiter.pauses == 1 and limiter.waits == 4


def test_without_a_hint_429s_in_a_row_back_off_doubling_and_a_success_resets_them():
    now = [100.0]
    limiter = RateLimiter(base_pause_s=1.0, clock=lambda: now[0])
    limiter.refused(429, {})
    assert limiter._paused_until == 101.0
    limiter.refused(429, {})
    assert limiter._paused_until == 102.0
    limiter.answered({}, 10)
    now[0] = 200.0
    limiter.refused(529, {})
    assert limiter._paused_until == 201.0
    limiter.refused(400, {})  # a refusal of this request is no reason for the others to wait
    assert limiter._paused_until == 201.0


def test_requests_in_flight_are_capped():
    limiter = RateLimiter(concurrency=2)
    limiter.acquire()
    limiter.acquire()
    third = threading.Thread(target=limiter.acquire)
    third.start()
    third.join(0.3)
    assert third.is_alive()
    limiter.release()
    third.join(2)
    assert not third.is_alive()
