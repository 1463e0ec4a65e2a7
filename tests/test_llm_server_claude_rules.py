"""The loopback server keeps the Messages API's rules of December 2026, through the real anthropic SDK: each
test fails if its rule is dropped from tests/helpers (llm_rules, llm_cache, llm_server)."""

import anthropic
import pytest

from agent.llm.retry import CONNECTION_ERRORS, call_with_retries
from agent.llm.types import ContextTooLong, ProviderFatal, RequestRefused
from tests.helpers.llm_server import (
    LLMServer,
    cut_tool_call,
    dropped_connection,
    refusal,
    stream_error,
    text,
    tool_call,
)

USER = [{"role": "user", "content": [{"type": "text", "text": "Improve the trainer."}]}]
TOOL = {"name": "submit", "description": "Submit.", "input_schema": {"type": "object"}}
ONE_HOUR, FIVE_MINUTES = {"type": "ephemeral", "ttl": "1h"}, {"type": "ephemeral", "ttl": "5m"}


@pytest.fixture
def server():
    with LLMServer() as server:
        yield server


def claude(server):
    return anthropic.Anthropic(api_key="k", base_url=server.anthropic_base_url(), max_retries=0)


def create(server, **request):
    return claude(server).messages.create(**{"model": "claude-opus-5-5", "max_tokens": 1024, "messages": USER,
                                             **request})


def streamed(server, **request):
    with claude(server).messages.stream(**{"model": "claude-opus-5-5", "max_tokens": 1024, "messages": USER,
                                           "tools": [TOOL], **request}) as stream:
        return stream.get_final_message()


def retried(server, call):
    return call_with_retries(call, "anthropic", on_retry=lambda _: None, outage_window_s=5.0, base_s=0.01)


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "claude-sonnet-4-5-20250929", "claude-opus-4-1",
                                   "claude-3-7-sonnet-20250219"])
def test_a_retired_model_is_not_found(server, model):
    with pytest.raises(anthropic.NotFoundError, match=f"model: {model}"):
        create(server, model=model)
    with pytest.raises(ProviderFatal, match="does not know this model"):
        retried(server, lambda: create(server, model=model))


@pytest.mark.parametrize("model, effort", [("claude-opus-4-6", "xhigh"), ("claude-sonnet-4-6", "xhigh"),
                                           ("claude-opus-4-5", "max"), ("claude-haiku-4-5", "low")])
def test_an_effort_the_model_does_not_take_is_refused(server, model, effort):
    with pytest.raises(anthropic.BadRequestError, match=f"effort '{effort}' is not supported by {model}"):
        create(server, model=model, output_config={"effort": effort})
    server.script(text("fine"))
    assert create(server, model="claude-opus-4-8", output_config={"effort": effort}).content[0].text == "fine"


def test_blank_text_is_refused(server):
    blank = [{"role": "user", "content": [{"type": "text", "text": " \n\t"}]}]
    with pytest.raises(anthropic.BadRequestError, match="must contain non-whitespace text"):
        create(server, messages=blank)


def test_a_one_hour_breakpoint_after_a_five_minute_one_is_refused(server):
    later = [{"role": "user", "content": [{"type": "text", "text": "a", "cache_control": FIVE_MINUTES},
                                          {"type": "text", "text": "b", "cache_control": ONE_HOUR}]}]
    with pytest.raises(anthropic.BadRequestError, match="ttl='1h' cache_control block must not come after"):
        create(server, messages=later)
    server.script(text("fine"))
    create(server, messages=[{"role": "user", "content": [later[0]["content"][1], later[0]["content"][0]]}])


def test_input_and_max_tokens_past_a_200k_window_is_too_long(server):
    long = [{"role": "user", "content": [{"type": "text", "text": "x" * 560_000}]}]  # ~140K tokens
    with pytest.raises(anthropic.BadRequestError, match="input length and `max_tokens` exceed context limit"):
        streamed(server, model="claude-opus-4-5", max_tokens=64_000, messages=long)
    with pytest.raises(ContextTooLong):
        retried(server, lambda: streamed(server, model="claude-opus-4-5", max_tokens=64_000, messages=long))
    server.script(text("fine"))
    streamed(server, model="claude-opus-5-5", max_tokens=64_000, messages=long)  # a 1M window takes it


@pytest.mark.parametrize("model, cached", [("claude-opus-4-6", False), ("claude-opus-4-7", False),
                                           ("claude-opus-4-8", True), ("claude-opus-5-5", True)])
def test_a_prefix_under_the_models_minimum_is_silently_not_cached(server, model, cached):
    system = [{"type": "text", "text": "y" * 6_000, "cache_control": ONE_HOUR}]  # ~1500 tokens
    server.script(text("one"), text("two"))
    first = create(server, model=model, system=system)
    second = create(server, model=model, system=system)
    assert (first.usage.cache_creation_input_tokens > 0) is cached
    assert (second.usage.cache_read_input_tokens > 0) is cached


def test_entries_live_as_long_as_their_breakpoint_says(server):
    clock = [1000.0]
    server.cache.clock = lambda: clock[0]
    system = [{"type": "text", "text": "s" * 8_000, "cache_control": ONE_HOUR}]
    messages = [{"role": "user", "content": [{"type": "text", "text": "m" * 8_000, "cache_control": FIVE_MINUTES}]}]
    server.script(text("a"), text("b"), text("c"))
    create(server, system=system, messages=messages)
    clock[0] += 6 * 60  # the 5-minute entry is gone, the 1-hour one is not
    usage = create(server, system=system, messages=messages).usage
    assert 2_000 <= usage.cache_read_input_tokens < 2_050  # the system prompt: 8000 characters and its JSON
    assert 2_000 <= usage.cache_creation_input_tokens < 2_050 and usage.cache_creation.ephemeral_1h_input_tokens == 0
    clock[0] += 61 * 60
    assert create(server, system=system, messages=messages).usage.cache_read_input_tokens == 0


def test_an_error_event_after_the_200_is_retried_when_the_service_calls_it_transient(server):
    server.script(stream_error("overloaded_error"))
    with pytest.raises(anthropic.APIStatusError) as raised:
        streamed(server)
    assert raised.value.status_code == 200 and "overloaded_error" in str(raised.value)
    server.script(stream_error("api_error"), tool_call("submit", {"n": 1}))
    assert retried(server, lambda: streamed(server)).content[0].input == {"n": 1}
    server.script(stream_error("invalid_request_error"))
    with pytest.raises(RequestRefused):
        retried(server, lambda: streamed(server))


def test_a_connection_closed_mid_stream_is_retried(server):
    server.script(dropped_connection())
    with pytest.raises(CONNECTION_ERRORS):  # wrapped by the newest SDK, the transport's own error by older ones
        streamed(server)
    server.script(dropped_connection(), text("whole"))
    assert retried(server, lambda: streamed(server)).content[0].text == "whole"


def test_a_tool_call_cut_at_max_tokens_arrives_incomplete(server):
    arguments = {"description": "one change", "hypothesis": "h", "edits": [{"old_string": "a", "new_string": "b"}]}
    server.script(cut_tool_call("submit", arguments))
    reply = streamed(server)
    assert reply.stop_reason == "max_tokens"
    assert reply.content[-1].type == "tool_use" and reply.content[-1].input != arguments


def test_a_refusal_ends_the_turn_with_its_stop_reason(server):
    server.script(refusal("I can't help with that."))
    reply = streamed(server)
    assert reply.stop_reason == "refusal" and reply.content[0].text == "I can't help with that."

