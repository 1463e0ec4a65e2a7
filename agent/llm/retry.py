"""Retrying provider calls: transient failures wait and retry; the rest are sorted by what they mean.

Rate limits (429, honouring Retry-After), overload (529, 503), other 5xx, connection errors and
timeouts are retried with capped exponential backoff for up to the outage window; then
ProviderUnavailable. A bad key (401), no permission (403), an unknown model (404) or an exhausted
account (402, billing and quota errors) raise ProviderFatal, which ends the night with what to do.
Any other refusal (4xx) raises RequestRefused (ContextTooLong for a conversation that outgrew the
context window): it fails that one proposal.
"""

from __future__ import annotations

from collections.abc import Callable

import anthropic
import openai
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_delay

from agent.llm.types import ContextTooLong, ProviderFatal, ProviderUnavailable, RequestRefused

TRANSIENT_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}
CONNECTION_ERRORS = (anthropic.APIConnectionError, openai.APIConnectionError)
STATUS_ERRORS = (anthropic.APIStatusError, openai.APIStatusError)
KEY_VARIABLES = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY", "openai-compatible": "OPENAI_API_KEY"}
EXHAUSTED = ("credit balance", "insufficient_quota", "billing", "exceeded your current quota")
TOO_LONG = ("prompt is too long", "context_length_exceeded", "maximum context length", "context window",
            "too many tokens")


def _detail(error) -> str:
    return f"{getattr(error, 'code', None) or ''} {error}".lower()


def is_exhausted(error: BaseException) -> bool:
    if not isinstance(error, STATUS_ERRORS):
        return False
    return error.status_code == 402 or any(marker in _detail(error) for marker in EXHAUSTED)


def is_transient(error: BaseException) -> bool:
    if isinstance(error, CONNECTION_ERRORS):
        return True
    return (isinstance(error, STATUS_ERRORS) and error.status_code in TRANSIENT_STATUS
            and not is_exhausted(error))


def retry_after_seconds(error: BaseException) -> float | None:
    response = getattr(error, "response", None)
    value = response.headers.get("retry-after") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def call_with_retries(call: Callable, provider: str, on_retry: Callable[[dict], None], *,
                      outage_window_s: float = 1800.0, base_s: float = 1.0, max_wait_s: float = 60.0):
    def wait(state: RetryCallState) -> float:
        hinted = retry_after_seconds(state.outcome.exception())
        backoff = min(max_wait_s, base_s * 2 ** (state.attempt_number - 1))
        return min(max_wait_s, hinted) if hinted is not None else backoff

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception()
        on_retry({"attempt": state.attempt_number, "status": getattr(error, "status_code", None),
                  "error": f"{type(error).__name__}: {str(error)[:300]}",
                  "wait_s": round(state.upcoming_sleep, 3), "retry_after": retry_after_seconds(error)})

    retrying = Retrying(retry=retry_if_exception(is_transient), wait=wait, before_sleep=before_sleep,
                        stop=stop_after_delay(outage_window_s), reraise=True)
    try:
        return retrying(call)
    except Exception as error:
        if is_transient(error):
            raise ProviderUnavailable(f"{provider} did not answer for {outage_window_s:.0f} s "
                                      f"(last: {type(error).__name__}: {str(error)[:200]})") from error
        if isinstance(error, STATUS_ERRORS):
            raise classify(provider, error) from error
        raise


def classify(provider: str, error) -> Exception:
    """ProviderFatal for what no later request can fix; RequestRefused (or ContextTooLong) for the rest."""
    status, detail = error.status_code, str(error)[:300]
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
