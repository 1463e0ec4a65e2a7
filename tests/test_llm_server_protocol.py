"""The scripted LLM server speaks both wire formats well enough for the real SDK clients to parse."""

import json

import anthropic
import openai
import pytest

from tests.helpers.llm_server import LLMServer, error, text, tool_call, tool_calls

TOOLS = [{"name": "edit", "description": "Edit a file.",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
MESSAGES = [{"role": "user", "content": "Improve the trainer."}]


@pytest.fixture
def server():
    with LLMServer() as server:
        yield server


def claude(server: LLMServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test", base_url=server.anthropic_base_url(), max_retries=0)


def gpt(server: LLMServer) -> openai.OpenAI:
    return openai.OpenAI(api_key="test", base_url=server.openai_base_url(), max_retries=0)


def ask_claude(server: LLMServer, **kwargs) -> anthropic.types.Message:
    return claude(server).messages.create(model="claude-test", max_tokens=1024, messages=MESSAGES, **kwargs)


def ask_gpt(server: LLMServer, **kwargs):
    return gpt(server).chat.completions.create(model="gpt-test", messages=MESSAGES, **kwargs)


def test_text_reply_anthropic(server):
    server.script(text("hello", usage=(120, 30), cached=80))
    message = ask_claude(server)
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "hello"
    assert message.stop_reason == "end_turn"
    assert message.model == "claude-test"
    usage = message.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_input_tokens) == (120, 30, 80)
    assert usage.cache_creation_input_tokens == 0
    assert server.requests[0].api == "anthropic" and server.requests[0].status == 200
    assert server.pending == 0


def test_text_reply_openai(server):
    server.script(text("hello", usage=(120, 30), cached=80, thinking_tokens=10))
    completion = ask_gpt(server)
    choice = completion.choices[0]
    assert choice.message.content == "hello" and choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    usage = completion.usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (200, 30, 230)
    assert usage.prompt_tokens_details.cached_tokens == 80
    assert usage.completion_tokens_details.reasoning_tokens == 10
    assert server.requests[0].api == "openai"


def test_tool_call_anthropic(server):
    arguments = {"path": "train.py", "edits": [{"old": "a", "new": "b"}], "n": 3}
    server.script(tool_call("edit", arguments, text="Let me edit."),
                  tool_calls([("read", {"path": "a"}), ("read", {"path": "b"})]))
    message = ask_claude(server, tools=TOOLS)
    assert message.stop_reason == "tool_use"
    assert [block.type for block in message.content] == ["text", "tool_use"]
    use = message.content[1]
    assert (use.name, use.input) == ("edit", arguments)
    assert use.id.startswith("toolu_")
    second = ask_claude(server, tools=TOOLS)
    ids = [use.id] + [block.id for block in second.content]
    assert [block.input["path"] for block in second.content] == ["a", "b"]
    assert len(set(ids)) == 3


def test_tool_call_openai(server):
    arguments = {"path": "train.py", "edits": [{"old": "a", "new": "b"}], "n": 3}
    server.script(tool_calls([("edit", arguments), ("run", {})]))
    message = ask_gpt(server).choices[0].message
    assert message.content is None
    calls = message.tool_calls
    assert [(call.type, call.function.name) for call in calls] == [("function", "edit"), ("function", "run")]
    assert json.loads(calls[0].function.arguments) == arguments
    assert calls[0].id != calls[1].id and calls[0].id.startswith("call_")


def test_thinking(server):
    server.script(tool_call("edit", {"path": "x"}, thinking="hmm", thinking_tokens=50),
                  text("done", thinking="hmm"))
    message = ask_claude(server)
    assert [block.type for block in message.content] == ["thinking", "tool_use"]
    assert message.content[0].thinking == "hmm" and message.content[0].signature
    assert message.usage.output_tokens_details.thinking_tokens == 50

    reply = ask_gpt(server).choices[0].message
    assert reply.reasoning_content == "hmm"
    assert reply.model_extra == {"reasoning_content": "hmm"}


def test_rate_limit(server):
    server.script(error(429, headers={"retry-after": "1"}), error(429, headers={"retry-after": "1"}))
    with pytest.raises(anthropic.RateLimitError) as caught:
        ask_claude(server)
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.body["error"]["type"] == "rate_limit_error"
    with pytest.raises(openai.RateLimitError) as caught:
        ask_gpt(server)
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.code == "rate_limit_exceeded"


def test_authentication_error(server):
    server.script(error(401), error(401))
    with pytest.raises(anthropic.AuthenticationError) as caught:
        ask_claude(server)
    assert caught.value.body == {"type": "error", "error": {"type": "authentication_error",
                                                            "message": "Invalid API key"}}
    with pytest.raises(openai.AuthenticationError) as caught:
        ask_gpt(server)
    assert caught.value.code == "invalid_api_key"


def test_overloaded_and_unavailable(server):
    server.script(error(529), error(503), error(503))
    with pytest.raises(anthropic.OverloadedError) as caught:
        ask_claude(server)
    assert isinstance(caught.value, anthropic.InternalServerError)
    assert caught.value.status_code == 529
    assert caught.value.body["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    with pytest.raises(anthropic.ServiceUnavailableError):
        ask_claude(server)
    with pytest.raises(openai.InternalServerError) as caught:
        ask_gpt(server)
    assert caught.value.status_code == 503


def test_empty_queue_fails_clearly_without_retries(server):
    client = anthropic.Anthropic(api_key="test", base_url=server.anthropic_base_url())
    with pytest.raises(anthropic.InternalServerError, match="no scripted reply left"):
        client.messages.create(model="m", max_tokens=1, messages=MESSAGES)
    with pytest.raises(openai.InternalServerError, match="no scripted reply left"):
        openai.OpenAI(api_key="test", base_url=server.openai_base_url()).chat.completions.create(
            model="m", messages=MESSAGES)
    assert [(r.api, r.status) for r in server.requests] == [("anthropic", 500), ("openai", 500)]


def test_one_queue_in_order_and_requests_recorded(server):
    server.script(text("first"), text("second"))
    message = ask_claude(server, system="You are a researcher.", tools=TOOLS)
    completion = ask_gpt(server, tools=[{"type": "function", "function": {"name": "edit", "parameters": {}}}])
    assert message.content[0].text == "first"
    assert completion.choices[0].message.content == "second"

    sent_to_claude, sent_to_gpt = server.requests
    assert sent_to_claude.path == "/v1/messages"
    assert sent_to_claude.body["system"] == "You are a researcher."
    assert sent_to_claude.body["tools"] == TOOLS
    assert sent_to_claude.body["messages"] == MESSAGES
    assert sent_to_claude.headers["authorization"] == "Bearer test"
    assert "anthropic-version" in sent_to_claude.headers
    assert sent_to_gpt.path == "/v1/chat/completions"
    assert sent_to_gpt.body["messages"] == MESSAGES
    assert sent_to_gpt.body["tools"][0]["function"]["name"] == "edit"
    assert sent_to_gpt.headers["authorization"] == "Bearer test"


def test_custom_error_body_and_usage_validation(server):
    server.script(error(400, body={"type": "error", "error": {"type": "invalid_request_error", "message": "nope"}}))
    with pytest.raises(anthropic.BadRequestError, match="nope"):
        ask_claude(server)
    with pytest.raises(ValueError):
        text("x", usage=(10, 5), thinking_tokens=6)
