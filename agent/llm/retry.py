"""Retrying provider calls: transient failures wait and retry, fatal ones stop at once.

Rate limits (429, honouring Retry-After), overload (529, 503), other 5xx, connection errors
and timeouts are retried with capped exponential backoff for up to the outage window;
then ProviderUnavailable. Authentication, permission, bad requests (a context that is too
long included) and unknown models raise ProviderFatal with a message that says what to do.
"""

from __future__ import annotations

from collections.abc import Callable

import anthropic
import openai
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_delay

from agent.llm.types import ProviderFatal, ProviderUnavailable

TRANSIENT_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}
CONNECTION_ERRORS = (anthropic.APIConnectionError, openai.APIConnectionError)
STATUS_ERRORS = (anthropic.APIStatusError, openai.APIStatusError)
KEY_VARIABLES = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY", "openai-compatible": "OPENAI_API_KEY"}


def is_transient(error: BaseException) -> bool:
    if isinstance(error, CONNECTION_ERRORS):
        return True
    return isinstance(error, STATUS_ERRORS) and error.status_code in TRANSIENT_STATUS


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
            raise ProviderFatal(fatal_message(provider, error)) from error
        raise


def fatal_message(provider: str, error) -> str:
    status, detail = error.status_code, str(error)[:300]
    if status == 401:
        return (f"{provider} rejected the API key (401: {detail}); set {KEY_VARIABLES.get(provider, 'the key')} "
                "to a valid key")
    if status == 403:
        return f"{provider} denied permission (403: {detail}); check the key's access to this model"
    if status == 404:
        return f"{provider} does not know this model or endpoint (404: {detail}); check --model and --base-url"
    return f"{provider} refused the request ({status}: {detail})"
