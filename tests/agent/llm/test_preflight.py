"""The preflight: one request with the night's configuration before anything trains, through the real SDKs to
the loopback server, which refuses what the services refuse."""

import pytest

from agent.llm.select import checked_factory
from agent.llm.types import ProviderFatal
from tests.helpers.llm_server import error, serving_both_apis, text

EFFORT_REFUSED = {"type": "error", "error": {"type": "invalid_request_error",
                                             "message": "output_config.effort: effort 'max' is not supported"}}


@pytest.fixture
def server(monkeypatch):
    with serving_both_apis(monkeypatch) as server:
        yield server


def test_the_preflight_sends_the_nights_configuration_once(server):
    server.script(text("ready"))
    factory, found = checked_factory("anthropic:claude-opus-5-5", effort="high", retry_base_s=0.01)
    assert "accepts thinking adaptive, effort high" in found
    sent = server.requests[0].body
    assert sent["thinking"]["type"] == "adaptive" and sent["output_config"] == {"effort": "high"}
    assert {t["name"] for t in sent["tools"]} >= {"submit_experiment", "read_file"}  # the night's own tools
    assert factory().effort == "high" and len(server.requests) == 1


def test_an_unknown_model_runs_on_the_thinking_mode_the_service_takes(server):
    """claude-nova-1 is in no table: the server refuses adaptive thinking for it, takes enabled thinking."""
    server.script(text("ready"))
    factory, found = checked_factory("anthropic:claude-nova-1", retry_base_s=0.01)
    assert "accepts thinking enabled" in found and "found by trying" in found
    assert [r.status for r in server.requests] == [400, 200]
    assert "adaptive thinking is not supported" in server.refusals[0]
    assert factory().info.thinking == "enabled"


def test_a_refused_configuration_stops_before_anything_runs_with_the_fix(server):
    server.script(error(400, body=EFFORT_REFUSED))
    with pytest.raises(ProviderFatal, match="refused the night's configuration.*effort 'max'.*Fix: change or leave "
                                            "out --effort \\(claude-opus-5-5 takes low, medium, high, xhigh, max"):
        checked_factory("anthropic:claude-opus-5-5", effort="max", retry_base_s=0.01)


def test_an_unknown_openai_compatible_model_without_reasoning_is_found(server):
    """The server refuses max_completion_tokens for a model it does not treat as reasoning; the preflight falls
    back to a plain chat model."""
    refused = {"error": {"message": "Unsupported parameter: 'max_completion_tokens'", "type": "invalid_request_error",
                         "param": "max_completion_tokens", "code": "unsupported_parameter"}}
    server.script(error(400, body=refused), text("ready"))
    factory, found = checked_factory("openai-compatible:gpt-oss-local", retry_base_s=0.01)
    assert "accepts no reasoning" in found
    assert "max_tokens" in server.requests[1].body and "max_completion_tokens" not in server.requests[1].body
