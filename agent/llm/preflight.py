"""Before the baseline trains: one small request with exactly the night's configuration (model,
thinking, effort, tools, caching), so that a request the service refuses stops `run` at once with
the parameter and the fix, instead of failing every proposal in the small hours.

For a model the table does not know, the preflight finds what the service takes: thinking adaptive,
then enabled, then none (Anthropic); reasoning, then none (OpenAI-compatible servers). The night
uses the first it accepts. A service that does not answer at all is not the configuration's fault:
the night starts and pauses on the outage as it would later.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.llm.models import ModelInfo
from agent.llm.retry import call_with_retries
from agent.llm.tools import TOOLS
from agent.llm.types import AssistantTurn, Conversation, ProviderFatal, ProviderUnavailable, RequestRefused

SYSTEM = "This request checks that the service accepts the configuration of a research night."
QUESTION = "Answer with the single word: ready. Do not call a tool."
OUTAGE_WINDOW_S = 120.0


def candidates(provider: str, info: ModelInfo) -> list[ModelInfo]:
    """The configurations to try, in order: the table's, or for an unknown model each mode the service may take."""
    if info.known:
        return [info]
    if provider == "anthropic":
        return [info.model_copy(update={"thinking": mode}) for mode in ("adaptive", "enabled", "none")]
    return [info, info.model_copy(update={"reasoning": False, "efforts": ()})]


def describe(provider: str, info: ModelInfo, effort: str | None) -> str:
    if provider == "anthropic":
        mode = f"thinking {info.thinking}"
    else:
        mode = "reasoning" if info.reasoning else "no reasoning"
    chosen = effort or info.default_effort
    return mode + (f", effort {chosen}" if chosen and (info.efforts or provider == "openai-compatible") else "")


def preflight(open_with: Callable[[ModelInfo], Conversation], provider: str, info: ModelInfo,
              effort: str | None, retry_base_s: float = 1.0) -> tuple[ModelInfo, str]:
    """The model row the night runs with and a line saying what the service accepted; ProviderFatal when it
    refuses every configuration tried."""
    refusals: list[str] = []
    for candidate in candidates(provider, info):
        try:
            turn = ask(open_with(candidate), retry_base_s)
        except ProviderUnavailable as err:
            return candidate, f"preflight: {provider} did not answer ({err}); the night starts and waits for it"
        except RequestRefused as err:
            refusals.append(f"{describe(provider, candidate, effort)}: {err}")
            continue
        return candidate, (f"preflight: {provider}:{info.name} accepts {describe(provider, candidate, effort)}"
                           + ("" if info.known else " (found by trying; the model is not in the table)")
                           + f" [{turn.usage.input_tokens} input, {turn.usage.output_tokens} output tokens]")
    raise ProviderFatal(f"{provider} refused the night's configuration before anything ran: "
                        + "; ".join(refusals) + ". " + fix_for(refusals[-1], info))


def ask(conversation: Conversation, retry_base_s: float) -> AssistantTurn:
    conversation.start(SYSTEM, [QUESTION], TOOLS)
    return call_with_retries(conversation.step, conversation.provider, on_retry=lambda _: None,
                             outage_window_s=OUTAGE_WINDOW_S, base_s=retry_base_s)


def fix_for(refusal: str, info: ModelInfo) -> str:
    text = refusal.lower()
    if "effort" in text:
        allowed = f" ({info.name} takes {', '.join(info.efforts)} by the model table)" if info.efforts else ""
        return f"Fix: change or leave out --effort{allowed}."
    if "thinking" in text or "budget_tokens" in text:
        return "Fix: change --thinking-budget, or name a model whose thinking mode the table knows."
    if "max_tokens" in text or "max_output_tokens" in text or "max_completion_tokens" in text:
        return "Fix: the model's output limit differs from the table's; give the model's row with --pricing or " \
               "report it."
    return "Fix: check --model, --effort and --base-url against the service's documentation."
