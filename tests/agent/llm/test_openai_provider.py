"""ResponsesConversation and ChatConversation against the loopback LLM server through the real openai SDK:
streamed replies and their failures after the 200 (retried through call_with_retries), refusals, tool
calls cut at the output limit, the model table's default effort, explicit cache breakpoints, DeepSeek's
reasoning_content and OpenRouter's reasoning_details passed back, a gateway's 200 with an error body.
The model rows are written here, not taken from the table."""

import pytest

from agent.llm.models import ModelInfo
from agent.llm.openai_provider import MAX_CACHE_KEY, ChatConversation, ResponsesConversation
from agent.llm.retry import call_with_retries
from agent.llm.types import UNPARSED, FailedAfterAnswer, RequestRefused, ToolResult, ToolSpec, Usage
from tests.helpers.llm_server import (
    LLMServer,
    cut_tool_call,
    dropped_connection,
    failed_response,
    refusal,
    stream_ended_early,
    stream_error,
    text,
    tool_call,
)

READ = ToolSpec("read", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})
TRAIN = "import torch\n" + "x = torch.zeros(1)  # a line of the training script\n" * 400  # ~5,000 tokens
GPT_5_6 = ModelInfo(name="gpt-5.6", provider="openai", reasoning=True, max_output=128_000)


@pytest.fixture
def server():
    with LLMServer() as server:
        yield server


def responses(server, info: ModelInfo = GPT_5_6, **kwargs) -> ResponsesConversation:
    conversation = ResponsesConversation(info, "test", server.openai_base_url(), cache_key="night-1", **kwargs)
    conversation.start("You improve a training script.", [TRAIN, "Propose one change."], [READ])
    return conversation


def chat(server, model: str = "qwen3-coder", **kwargs) -> ChatConversation:
    info = ModelInfo(name=model, provider="openai", **kwargs)
    conversation = ChatConversation(info, "test", server.openai_base_url())
    conversation.start("You improve a training script.", [TRAIN, "Propose one change."], [READ])
    return conversation


def retried(conversation) -> tuple:
    retries: list[dict] = []
    turn = call_with_retries(conversation.step, conversation.provider, retries.append, outage_window_s=30,
                             base_s=0.01, max_wait_s=0.05)
    return turn, retries


def test_streamed_turn_with_reasoning_and_a_tool_call(server):
    server.script(tool_call("read", {"path": "train.py"}, text="Looking.", thinking="Read it first.",
                            thinking_tokens=40), text("done"))
    conversation = responses(server)
    turn = conversation.step()
    assert turn.text == "Looking." and turn.thinking == ["Read it first."] and turn.stop_reason == "completed"
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("read", {"path": "train.py"})]
    assert turn.usage.input_tokens > 1000 and turn.usage.thinking_tokens == 40 and turn.usage.calls == 1
    assert turn.params["stream"] is True and turn.params["store"] is False and turn.request_id.startswith("req_")
    assert turn.params["include"] == ["reasoning.encrypted_content"] and turn.params["prompt_cache_key"] == "night-1"
    assert "cache_breakpoints" not in turn.params
    body = server.requests[-1].body
    assert body["stream"] is True and body["reasoning"] == {"summary": "auto"}
    conversation.add_tool_results([ToolResult(turn.tool_calls[0].id, "the file")])
    assert conversation.step().text == "done"  # reasoning went back with its encrypted content, then the call
    assert [item.get("type") for item in server.requests[-1].body["input"][1:]] == [
        "reasoning", "message", "function_call", "function_call_output"]


@pytest.mark.parametrize("fault", [stream_error("server_error"), failed_response("server_error"),
                                   dropped_connection(), stream_ended_early()],
                         ids=["error_event", "response_failed", "dropped", "ended_early"])
def test_failure_after_the_200_is_retried(server, fault):
    server.script(fault, text("after the retry"))
    conversation = responses(server)
    turn, retries = retried(conversation)
    assert turn.text == "after the retry" and len(retries) == 1 and server.pending == 0
    assert len(conversation.input) == 2  # only the reply that arrived joined the conversation


def test_failed_response_says_what_was_spent(server):
    server.script(failed_response("server_error"), stream_error("server_error"), stream_ended_early())
    conversation = responses(server)
    with pytest.raises(FailedAfterAnswer) as caught:
        conversation.step()
    assert caught.value.kind == "server_error"
    assert isinstance(caught.value.spent, Usage) and caught.value.spent.input_tokens > 1000
    with pytest.raises(FailedAfterAnswer, match="server_error") as caught:
        conversation.step()
    assert caught.value.spent is None
    with pytest.raises(FailedAfterAnswer, match="the stream ended before the response was complete") as caught:
        conversation.step()
    assert caught.value.kind == "server_error"


def test_failure_of_a_kind_that_is_not_transient_fails_the_request(server):
    server.script(stream_error("invalid_prompt"), text("never"))
    with pytest.raises(RequestRefused, match="invalid_prompt"):
        retried(responses(server))
    assert server.pending == 1


def test_refusal(server):
    server.script(refusal("I can't help with that."))
    turn = responses(server).step()
    assert turn.stop_reason == "refusal" and turn.text == "I can't help with that." and not turn.tool_calls


def test_cut_tool_call(server):
    server.script(cut_tool_call("read", {"path": "train.py" * 20}), text("shorter now"))
    conversation = responses(server)
    turn = conversation.step()
    assert turn.stop_reason == "max_output_tokens"
    assert len(turn.tool_calls) == 1 and UNPARSED in turn.tool_calls[0].arguments
    conversation.add_tool_results([ToolResult(turn.tool_calls[0].id, "not run: cut at the output limit", True)])
    assert conversation.step().text == "shorter now"


def test_default_effort_is_sent_unless_one_is_given(server):
    info = ModelInfo(name="gpt-5.1", provider="openai", reasoning=True, efforts=("none", "low", "medium", "high"),
                     default_effort="medium")
    server.script(text("a", thinking="thought"), text("b", thinking="thought"), text("c", thinking="thought"))
    turn = responses(server, info).step()
    assert server.requests[-1].body["reasoning"] == {"summary": "auto", "effort": "medium"}
    assert turn.params["reasoning"]["effort"] == "medium" and turn.thinking == ["thought"]
    responses(server, info, effort="high").step()
    assert server.requests[-1].body["reasoning"]["effort"] == "high"
    bare = info.model_copy(update={"default_effort": None})
    turn = responses(server, bare).step()
    assert "effort" not in server.requests[-1].body["reasoning"] and turn.thinking == []  # gpt-5.1 defaults to none


def test_chat_default_effort(server):
    server.script(text("a"), text("b"))
    chat(server, "gpt-5.1", reasoning=True, default_effort="medium").step()
    assert server.requests[-1].body["reasoning_effort"] == "medium"
    chat(server, "gpt-5.1", reasoning=True).step()
    assert "reasoning_effort" not in server.requests[-1].body


def breakpoint_model(minimum: int = 1024) -> ModelInfo:
    return ModelInfo(name="gpt-6.1-sol", provider="openai", reasoning=True, cache_breakpoints=True,
                     cache_min_tokens=minimum, default_effort="medium")


def test_explicit_breakpoint_on_train_py(server):
    server.script(text("first"), text("second"))
    first = responses(server, breakpoint_model())
    turn = first.step()
    blocks = server.requests[-1].body["input"][0]["content"]
    assert blocks[0]["prompt_cache_breakpoint"] == {"mode": "explicit"} and blocks[0]["text"] == TRAIN
    assert "prompt_cache_breakpoint" not in blocks[1]
    assert turn.params["cache_breakpoints"] == ["train.py: explicit"]
    assert turn.usage.cache_write_tokens > 1000 and turn.usage.cache_read_tokens == 0
    again = responses(server, breakpoint_model()).step()  # the next experiment reads train.py from the cache
    assert again.usage.cache_read_tokens == turn.usage.cache_write_tokens and again.usage.cache_write_tokens == 0


def test_breakpoint_not_placed_under_the_minimum(server):
    server.script(text("ok"))
    turn = responses(server, breakpoint_model(minimum=50_000)).step()
    assert "prompt_cache_breakpoint" not in server.requests[-1].body["input"][0]["content"][0]
    [note] = turn.params["cache_breakpoints"]
    assert note.startswith("train.py: not placed, ~") and note.endswith("tokens < the model's minimum of 50000")
    assert turn.usage.cache_write_tokens > 0  # unmarked: cached implicitly, as a whole


def test_long_cache_key_is_shortened_and_accepted(server):
    server.script(text("ok"))
    conversation = ResponsesConversation(GPT_5_6, "test", server.openai_base_url(), cache_key="night-" + "x" * 100)
    conversation.start("system", ["user"], [])
    assert conversation.step().text == "ok"
    sent = server.requests[-1].body["prompt_cache_key"]
    assert len(sent) == MAX_CACHE_KEY and sent.startswith("night-xxx")


def test_deepseek_reasoning_content_goes_back(server):
    server.script(tool_call("read", {"path": "train.py"}), tool_call("read", {"path": "b"}, thinking="Now b."),
                  text("done"))
    conversation = chat(server, "deepseek-v4-pro", reasoning=True)
    for _ in range(2):
        turn = conversation.step()
        conversation.add_tool_results([ToolResult(turn.tool_calls[0].id, "contents")])
    assert conversation.step().text == "done" and server.refusals == []
    sent = [m for m in server.requests[-1].body["messages"] if m["role"] == "assistant"]
    assert [m["reasoning_content"] for m in sent] == ["", "Now b."]


def test_openrouter_reasoning_details_go_back_unmodified(server):
    server.script(tool_call("read", {"path": "a"}, thinking="Check a."), text("done"))
    conversation = chat(server, "anthropic/claude-sonnet-5", reasoning=True)
    turn = conversation.step()
    details = conversation.messages[-1]["reasoning_details"]
    conversation.add_tool_results([ToolResult(turn.tool_calls[0].id, "contents")])
    conversation.step()
    sent = [m for m in server.requests[-1].body["messages"] if m["role"] == "assistant"][0]
    assert sent["reasoning_details"] == details == [{"type": "reasoning.text", "text": "Check a.",
                                                     "format": "unknown", "index": 0}]


def test_gateway_200_with_an_error_body(server):
    server.script(stream_error("server_error"), text("fine"))
    conversation = chat(server)
    turn, retries = retried(conversation)
    assert turn.text == "fine" and len(retries) == 1 and "server_error" in retries[0]["error"]
    assert [m["role"] for m in conversation.messages] == ["system", "user", "assistant"]
    server.script(stream_error("invalid_request_error"))
    with pytest.raises(FailedAfterAnswer) as caught:
        chat(server).step()
    assert caught.value.kind == "invalid_request_error"


def test_chat_refusal_and_cut_tool_call(server):
    server.script(refusal("No."), cut_tool_call("read", {"path": "x" * 50}))
    turn = chat(server).step()
    assert turn.stop_reason == "refusal" and turn.text == "No."
    turn = chat(server).step()
    assert turn.stop_reason == "length" and UNPARSED in turn.tool_calls[0].arguments


def test_a_chat_reply_with_no_content_and_no_tool_calls_is_not_sent_back():
    """vLLM and llama.cpp with a reasoning parser answer content null when the output limit cut the reasoning; an
    assistant message needs content or tool calls, so it stays out of the history."""
    from agent.llm.models import model_info
    from tests.helpers.llm_server import Reply
    with LLMServer() as server:
        server.script(Reply(thinking="thinking until the limit", stop="max_tokens"), text("done"))
        conversation = ChatConversation(model_info("openai-compatible", "qwen3"), "k", server.openai_base_url())
        conversation.start("system", ["go"], [READ])
        assert conversation.step().stop_reason == "length"
        conversation.add_user("Use the tools.")
        assert conversation.step().text == "done"
        assert all(m.get("content") is not None or m.get("tool_calls") for m in server.requests[1].body["messages"])
