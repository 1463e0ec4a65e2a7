"""Retrying provider calls: transient failures wait and retry; the rest are sorted by what they mean.

Rate limits (429, honouring Retry-After), overload (529, 503), other 5xx, connection errors and
timeouts are retried, and so is a call that failed after its 200 (an error event in the stream, a
connection closed mid-body) when the service's error type says it is transient (overloaded, api or
server error, rate limit, timeout). They are retried with capped exponential backoff for up to the outage window; then
ProviderUnavailable. A bad key (401), no permission (403), an unknown model (404) or an exhausted
account (402, billing and quota errors) raise ProviderFatal, which ends the night with what to do.
Any other refusal (4xx) raises RequestRefused (ContextTooLong for a conversation that outgrew the
context window): it fails that one proposal.
"""

from __future__ import annotations

from collections.abc import Callable

import anthropic
import httpx
import openai
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_delay

from agent.llm.rate_limits import RateLimiter
from agent.llm.types import ContextTooLong, FailedAfterAnswer, ProviderFatal, ProviderUnavailable, RequestRefused

try:  # the SDKs moved to httpx2; an older SDK raises httpx's errors while it reads a stream
    import httpx2
    TRANSPORT_ERRORS: tuple[type[Exception], ...] = (httpx.TransportError, httpx2.TransportError)
except ImportError:  # pragma: no cover - depends on the SDK version installed
    TRANSPORT_ERRORS = (httpx.TransportError,)

TRANSIENT_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}
# Error types (Anthropic's error.type, OpenAI's error code or type) of failures that a later call may not meet.
TRANSIENT_KINDS = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error", "server_error",
                   "rate_limit_exceeded", "internal_error", "service_unavailable", "requests", "tokens"}
CONNECTION_ERRORS = (anthropic.APIConnectionError, openai.APIConnectionError, *TRANSPORT_ERRORS)
STATUS_ERRORS = (anthropic.APIStatusError, openai.APIStatusError)
KEY_VARIABLES = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY", "openai-compatible": "OPENAI_API_KEY"}
EXHAUSTED = ("credit balance", "insufficient_quota", "billing", "exceeded your current quota")
EXHAUSTED_AT_429 = ("credit balance", "insufficient_quota", "exceeded your current quota")
# A 403 or 404 about this one request, not about the key or the model (which the preflight checked):
# OpenRouter's moderation refusal (openrouter.ai/docs/errors), a Responses item the service no longer has, no
# endpoint for this request (users' reports; checked 2026-12-04).
ONE_REQUEST = ("moderation", "flagged", "item with id", "no endpoints found")
TOO_LONG = ("prompt is too long", "context_length_exceeded", "maximum context length", "context window",
            "too many tokens", "exceed context limit", "exceed the configured limit", "context_window_exceeded")


def _detail(error) -> str:
    return f"{getattr(error, 'code', None) or ''} {error}".lower()


def is_exhausted(error) -> bool:
    """For a status error (its callers check): whether the account has no credit left."""
    # A rate limit's message may point at the billing page ("add a payment method"): only a spent quota is final.
    markers = EXHAUSTED_AT_429 if error.status_code == 429 else EXHAUSTED
    return error.status_code == 402 or any(marker in _detail(error) for marker in markers)


def is_transient(error: BaseException) -> bool:
    if isinstance(error, CONNECTION_ERRORS):
        return True
    if isinstance(error, FailedAfterAnswer):
        return error.kind in TRANSIENT_KINDS
    if not isinstance(error, STATUS_ERRORS) or is_exhausted(error):
        return False
    if error.status_code < 400:  # an error event after the 200 of a stream: its body names the error's type
        body = error.body if isinstance(error.body, dict) else {}
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        return (inner.get("type") or inner.get("code")) in TRANSIENT_KINDS
    return error.status_code in TRANSIENT_STATUS


def retry_after_seconds(error: BaseException) -> float | None:
    try:
        return float(getattr(getattr(error, "response", None), "headers", {})["retry-after"])
    except (KeyError, TypeError, ValueError):
        return None


def call_with_retries(call: Callable, provider: str, on_retry: Callable[[dict], None], *,
                      outage_window_s: float = 1800.0, base_s: float = 1.0, max_wait_s: float = 60.0,
                      limiter: RateLimiter | None = None):
    """call() until it answers; with a limiter, every attempt waits for the key's shared limits and tells them
    what it met, so that the conversations sharing the key back off together."""
    def wait(state: RetryCallState) -> float:
        hinted = retry_after_seconds(state.outcome.exception())
        backoff = min(max_wait_s, base_s * 2 ** (state.attempt_number - 1))
        return min(max_wait_s, max(0.0, hinted)) if hinted is not None else backoff

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception()
        on_retry({"attempt": state.attempt_number, "status": getattr(error, "status_code", None),
                  "error": f"{type(error).__name__}: {str(error)[:300]}",
                  "wait_s": round(state.upcoming_sleep, 3), "retry_after": retry_after_seconds(error)})

    retrying = Retrying(retry=retry_if_exception(is_transient), wait=wait, before_sleep=before_sleep,
                        stop=stop_after_delay(outage_window_s), reraise=True)
    try:
        return retrying(call if limiter is None else lambda: limited(call, limiter))
    except Exception as error:
        if is_transient(error):
            raise ProviderUnavailable(f"{provider} did not answer for {outage_window_s:.0f} s "
                                      f"(last: {type(error).__name__}: {str(error)[:200]})") from error
        if isinstance(error, STATUS_ERRORS):
            raise classify(provider, error) from error
        if isinstance(error, FailedAfterAnswer):
            too_long = any(marker in str(error).lower() for marker in TOO_LONG)
            raise (ContextTooLong if too_long else RequestRefused)(str(error)) from error
        raise


def limited(call: Callable, limiter: RateLimiter):
    limiter.acquire()
    try:
        turn = call()
    except Exception as error:
        limiter.refused(getattr(error, "status_code", None), getattr(getattr(error, "response", None), "headers", {}))
        raise
    finally:
        limiter.release()
    limiter.answered(turn.rate_headers, turn.usage.input_tokens + turn.usage.output_tokens)
    return turn


def classify(provider: str, error) -> Exception:
    """ProviderFatal for what no later request can fix; RequestRefused (or ContextTooLong) for the rest."""
    status, detail = error.status_code, str(error)[:300]
    if status in (403, 404) and any(marker in _detail(error) for marker in ONE_REQUEST):
        return RequestRefused(f"{provider} refused the request ({status}: {detail})")
    if status == 401:
        return ProviderFatal(f"{provider} rejected the API key (401: {detail}); set "
                             f"{KEY_VARIABLES.get(provider, 'the key')} to a valid key")
    if status == 403:
        return ProviderFatal(f"{provider} denied permission (403: {detail}); check the key's access to this model")
    if status == 404:
        return ProviderFatal(f"{provider} does not know this model or endpoint (404: {detail}); check --model "
                             "and --base-url")
    if is_exhausted(error):
        return ProviderFatal(f"{provider} says the account has no credit left ({status}: {detail}); add credit or "
                             "raise the limit in the provider's console, then run again")
    if status == 413 or any(marker in _detail(error) for marker in TOO_LONG):
        return ContextTooLong(f"{provider}: the conversation is too long for the model ({status}: {detail})")
    return RequestRefused(f"{provider} refused the request ({status}: {detail})")
