"""The model table, prices and the retry policy's sorting of refusals."""

import json
from datetime import date

import anthropic
import openai
import pytest

from agent.llm.models import PricingError, find_model, model_info
from agent.llm.pricing import PriceTable
from agent.llm.retry import call_with_retries
from agent.llm.select import conversation_factory, model_warnings, parse_model
from agent.llm.types import ContextTooLong, ProviderFatal, ProviderUnavailable, RequestRefused, Usage
from tests.helpers.llm_server import LLMServer, error


@pytest.mark.parametrize("name, row", [
    ("claude-opus-4-6", "claude-opus-4-6"), ("claude-opus-4-20250514", "claude-opus-4"),
    ("claude-opus-4-9", None), ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
    ("claude-opus-4-8", "claude-opus-4-8"), ("claude-haiku-5-5", "claude-haiku-5-5"),
    ("gpt-5.6", "gpt-5.6"), ("gpt-5", "gpt-5"), ("gpt-5-mini", "gpt-5-mini"), ("gpt-5-pro", None),
    ("gpt-6.2-sol", "gpt-6.2-sol"), ("gpt-6.2", None), ("gpt-6-sol", "gpt-6-sol"),
    ("gpt-5.6-2026-07-09", "gpt-5.6"), ("openai/gpt-5.6", "gpt-5.6"), ("claude-fable-5-1", "claude-fable-5-1"),
])
def test_names_match_only_at_separators(name, row):
    found = find_model(name)
    assert (found.name if found else None) == row


def test_thinking_modes_by_family():
    assert model_info("anthropic", "claude-opus-4-8").thinking == "adaptive"
    assert model_info("anthropic", "claude-sonnet-4-6").thinking == "adaptive_or_enabled"
    assert model_info("anthropic", "claude-opus-4-5").thinking == "enabled"
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


def test_openai_cache_writes_and_long_context_tiers_are_priced():
    # gpt-6.2-sol: $2 in, $0.10 cached, $2.50 written, $10 out; over 272K input the whole request at 2x in, 1.5x out
    short = Usage(input_tokens=100_000, cache_read_tokens=50_000, cache_write_tokens=40_000, output_tokens=1_000)
    assert PriceTable().cost("gpt-6.2-sol", short) == pytest.approx((10_000 * 2 + 50_000 * 0.1 + 40_000 * 2.5
                                                                      + 1_000 * 10) / 1e6)
    long = Usage(input_tokens=300_000, cache_read_tokens=250_000, output_tokens=1_000)
    assert PriceTable().cost("gpt-6.2-sol", long) == pytest.approx((2 * (50_000 * 2 + 250_000 * 0.1)
                                                                     + 1.5 * 1_000 * 10) / 1e6)
    # Haiku 5.5 above 100K prompt tokens (cache reads included): every rate x5
    haiku = Usage(input_tokens=120_000, cache_read_tokens=100_000, output_tokens=1_000)
    assert PriceTable().cost("claude-haiku-5-5", haiku) == pytest.approx(5 * (20_000 * 0.1 + 100_000 * 0.01
                                                                             + 1_000 * 0.5) / 1e6)
    assert PriceTable().price("claude-sonnet-5-5").cache_read == 0.1


def test_every_row_says_where_its_facts_come_from_and_current_models_have_prices():
    from agent.llm.models import MODELS
    assert all(row.source and "2026" in row.source for row in MODELS)
    current = [row for row in MODELS if not row.retired]
    assert all(row.prices is not None for row in current)
    for name in ("gpt-6.2-astra", "gpt-6.2-sol", "gpt-6.1-sol", "gpt-6-sol", "gpt-6-luna", "gpt-6-astra",
                 "gpt-6.1-terra", "claude-haiku-5-5", "claude-fable-5-2", "claude-mythos-5-2", "claude-opus-5-5"):
        assert find_model(name).name == name and find_model(name).prices is not None


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


def test_unknown_and_retiring_models_get_a_warning_and_retired_ones_a_replacement():
    assert model_warnings("anthropic:claude-opus-5-5") == []
    assert "not in the model table" in model_warnings("openai-compatible:my-llama")[0]
    assert "did you mean" not in model_warnings("openai-compatible:my-llama")[0]
    assert "(did you mean anthropic:claude-opus-5-5?)" in model_warnings("anthropic:claude-opsu-5-5")[0]
    soon = model_warnings("openai:gpt-5", today=date(2026, 12, 4))
    assert len(soon) == 1 and "2026-12-11" in soon[0] and "openai:gpt-6.1-sol" in soon[0]
    with pytest.raises(ProviderFatal, match="retired by openai on 2026-12-11.*--model openai:gpt-6.1-sol"):
        parse_model("openai:gpt-5", today=date(2026, 12, 11))
    with pytest.raises(ProviderFatal, match="claude-sonnet-4-5-20250929 was retired.*anthropic:claude-sonnet-5-5"):
        parse_model("anthropic:claude-sonnet-4-5-20250929")
    assert parse_model("openai-compatible:o4-mini")[1].name == "o4-mini"  # a server of one's own decides


@pytest.mark.parametrize("model, effort, match", [
    ("anthropic:claude-opus-4-6", "xhigh", "refused by claude-opus-4-6: it takes low, medium, high, max"),
    ("anthropic:claude-sonnet-4-6", "xhigh", "takes low, medium, high, max"),
    ("anthropic:claude-opus-4-5", "max", "takes low, medium, high$"),
    ("anthropic:claude-haiku-4-5", "high", "takes no effort setting"),
    ("anthropic:claude-opus-5-5", "minimal", "refused by claude-opus-5-5: it takes low, medium, high, xhigh, max"),
    ("anthropic:claude-opus-5-5", "extreme", "must be one of none, minimal, low"),
    ("openai:gpt-6.2-sol", "none", "takes low, medium, high, xhigh, max"),
    ("openai:gpt-6.1-sol", "minimal", "refused by gpt-6.1-sol"),
    ("openai:gpt-5.5", "minimal", "takes none, low, medium, high, xhigh$"),
    ("openai:gpt-5.1", "xhigh", "takes none, low, medium, high$"),
    ("openai:gpt-4.1", "low", "takes no effort setting"),
])
def test_an_effort_the_model_refuses_is_named_with_the_values_it_takes(model, effort, match, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    with pytest.raises(ProviderFatal, match=match):
        conversation_factory(model, effort=effort)


@pytest.mark.parametrize("model, effort", [("anthropic:claude-opus-4-8", "xhigh"), ("anthropic:claude-opus-4-6", "max"),
                                           ("openai:gpt-6.2-sol", "max"), ("openai:gpt-5.1", "none"),
                                           ("openai:gpt-5", "minimal")])
def test_an_effort_the_model_takes_is_accepted(model, effort, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert conversation_factory(model, effort=effort)().effort == effort


QUOTA = {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "param": None,
                   "code": "insufficient_quota"}}
CREDIT = {"type": "error", "error": {"type": "invalid_request_error",
                                     "message": "Your credit balance is too low to access the Anthropic API."}}
# Users' reports (2023-2026): a rate limit whose message points at the billing page; OpenRouter's moderation 403
# (openrouter.ai/docs/errors); a Responses item the service does not have.
RATE_LIMIT_WITH_BILLING = {"error": {"message": "Rate limit reached for requests. Please try again in 20s. You can "
                                                "increase your rate limit by adding a payment method to your account "
                                                "at https://platform.openai.com/account/billing.",
                                     "type": "requests", "param": None, "code": "rate_limit_exceeded"}}
MODERATED = {"error": {"code": 403, "message": "gpt-6.2-sol requires moderation on OpenRouter. Your input was flagged "
                                               "for \"violence\"."}}
ITEM_GONE = {"error": {"message": "Item with id 'rs_0123' not found. Items are not persisted when `store` is set to "
                                  "false.", "type": "invalid_request_error", "param": "input", "code": None}}
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
    ("openai", error(429, body=RATE_LIMIT_WITH_BILLING), ProviderUnavailable, "did not answer"),
    ("openai", error(403, body=MODERATED), RequestRefused, "refused the request \\(403"),
    ("openai", error(404, body=ITEM_GONE), RequestRefused, "refused the request \\(404"),
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
