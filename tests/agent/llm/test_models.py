"""The model table, prices and the retry policy's sorting of refusals."""

import json

import anthropic
import openai
import pytest

from agent.llm.models import PricingError, find_model, model_info
from agent.llm.pricing import PriceTable
from agent.llm.retry import call_with_retries
from agent.llm.select import conversation_factory, unknown_model_warning
from agent.llm.types import ContextTooLong, ProviderFatal, ProviderUnavailable, RequestRefused, Usage
from tests.helpers.llm_server import LLMServer, error


@pytest.mark.parametrize("name, row", [
    ("claude-opus-4-6", "claude-opus-4-6"), ("claude-opus-4-20250514", "claude-opus-4"),
    ("claude-opus-4-9", None), ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
    ("claude-opus-4-8", "claude-opus-4-8"),
    ("gpt-5.6", "gpt-5.6"), ("gpt-5", "gpt-5"), ("gpt-5-mini", "gpt-5-mini"), ("gpt-5-nano", None),
    ("gpt-5.6-2026-07-09", "gpt-5.6"), ("openai/gpt-5.6", "gpt-5.6"), ("claude-fable-5-1", "claude-fable-5-1"),
])
def test_names_match_only_at_separators(name, row):
    found = find_model(name)
    assert (found.name if found else None) == row


def test_thinking_modes_by_family():
    assert model_info("anthropic", "claude-opus-4-8").thinking == "adaptive"
    assert not model_info("anthropic", "claude-opus-4-8").shows_thinking
    assert model_info("anthropic", "claude-sonnet-4-6").thinking == "adaptive_or_enabled"
    assert model_info("anthropic", "claude-sonnet-4-5").thinking == "enabled"
    unknown = model_info("anthropic", "claude-opus-9")
    assert (unknown.known, unknown.thinking, unknown.prices) == (False, "adaptive", None)
    assert model_info("openai-compatible", "llama-3.3-70b").reasoning is False
    assert model_info("openai-compatible", "deepseek-r1-distill").reasoning is True
    assert model_info("openai", "gpt-4.1").reasoning is False


def test_cost_prices_cache_reads_and_writes_apart():
    usage = Usage(input_tokens=10_000, cache_read_tokens=8_000, cache_write_tokens=1_000, cache_write_1h_tokens=1_000,
                  output_tokens=1_000)
    # 1000 fresh x $5 + 8000 read x $0.50 + 1000 written (1 h) x $10 + 1000 out x $25, per million
    assert PriceTable().cost("claude-opus-4-8", usage) == pytest.approx(0.044)
    usage.cache_write_1h_tokens = 400  # the other 600 written for 5 minutes, at $6.25
    assert PriceTable().cost("claude-opus-4-8", usage) == pytest.approx(0.044 - 600 * (10 - 6.25) / 1e6)
    assert PriceTable().cost("gpt-5.6", Usage(input_tokens=10_000, cache_read_tokens=8_000)) == pytest.approx(0.014)
    assert PriceTable().cost("my-model", usage) == 0.0 and PriceTable().price("my-model") is None


def test_pricing_file_adds_and_overrides_and_a_bad_one_says_how(tmp_path):
    good = tmp_path / "prices.json"
    good.write_text(json.dumps({"my-model": {"input": 1.0, "output": 2.0}, "gpt-5.6": {"input": 4, "output": 20}}))
    table = PriceTable(good)
    assert table.cost("my-model", Usage(input_tokens=1_000_000, output_tokens=1_000_000)) == pytest.approx(3.0)
    assert table.price("gpt-5.6").input == 4
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"my-model": {"in": 1}}))
    with pytest.raises(PricingError, match="cannot use --pricing .*Expected e.g."):
        PriceTable(bad)


def test_unknown_models_get_a_warning():
    assert unknown_model_warning("anthropic:claude-opus-4-8") is None
    assert "not in the model table" in unknown_model_warning("openai-compatible:my-llama")
    with pytest.raises(ProviderFatal, match="--effort for anthropic must be one of low, medium, high, xhigh, max"):
        conversation_factory("anthropic:claude-opus-4-8", effort="minimal")


QUOTA = {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "param": None,
                   "code": "insufficient_quota"}}
CREDIT = {"type": "error", "error": {"type": "invalid_request_error",
                                     "message": "Your credit balance is too low to access the Anthropic API."}}
TOO_LONG = {"type": "error", "error": {"type": "invalid_request_error",
                                       "message": "prompt is too long: 210000 tokens > 200000 maximum"}}


@pytest.mark.parametrize("api, reply, outcome, match", [
    ("anthropic", error(401), ProviderFatal, "rejected the API key .* set ANTHROPIC_API_KEY"),
    ("anthropic", error(403), ProviderFatal, "denied permission"),
    ("openai", error(404), ProviderFatal, "does not know this model"),
    ("anthropic", error(400, body=CREDIT), ProviderFatal, "no credit left"),
    ("openai", error(429, body=QUOTA), ProviderFatal, "no credit left"),
    ("openai", error(402), ProviderFatal, "no credit left"),
    ("anthropic", error(400), RequestRefused, "refused the request \\(400"),
    ("openai", error(422), RequestRefused, "refused the request \\(422"),
    ("anthropic", error(400, body=TOO_LONG), ContextTooLong, "too long"),
    ("anthropic", error(413), ContextTooLong, "too long"),
    ("openai", error(503), ProviderUnavailable, "did not answer"),
])
def test_what_stops_the_night_and_what_fails_one_proposal(api, reply, outcome, match):
    with LLMServer() as server:
        server.script(reply, reply, reply)
        if api == "anthropic":
            client = anthropic.Anthropic(api_key="k", base_url=server.anthropic_base_url(), max_retries=0)
            call = lambda: client.messages.create(model="claude-opus-4-8", max_tokens=10,  # noqa: E731
                                                  messages=[{"role": "user", "content": "hi"}])
        else:
            client = openai.OpenAI(api_key="k", base_url=server.openai_base_url(), max_retries=0)
            call = lambda: client.responses.create(model="gpt-5.6", input="hi")  # noqa: E731
        with pytest.raises(outcome, match=match):
            call_with_retries(call, api, on_retry=lambda _: None, outage_window_s=0.05, base_s=0.01)
        if outcome is not ProviderUnavailable:
            assert len(server.requests) == 1  # never retried
