"""The loopback LLM server as the OpenAI APIs behave: Responses streaming (custom tool calls too) and its failures
after the 200, replies cut at the output limit or declined, reasoning effort per model family, cache writes and
explicit breakpoints, the prompt_cache_key limit, DeepSeek's reasoning_content and the pairing of reasoning items;
driven through the real openai SDK."""

import json

import openai
import pytest

from agent.llm.retry import CONNECTION_ERRORS, call_with_retries
from agent.llm.types import ContextTooLong, ProviderFatal
from tests.helpers.llm_server import (
    LLMServer,
    custom_tool_call,
    cut_tool_call,
    dropped_connection,
    failed_response,
    refusal,
    stream_ended_early,
    stream_error,
    text,
    tool_call,
)

FUNCTION = {"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}}
CHAT_TOOL = {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}}
GO = [{"role": "user", "content": "go"}]


@pytest.fixture
def server():
    with LLMServer() as server:
        yield server


def gpt(server):
    return openai.OpenAI(api_key="test", base_url=server.openai_base_url(), max_retries=0)


def streamed(server, **request) -> list:
    request = {"model": "gpt-5.6", "input": GO, "store": False, "include": ["reasoning.encrypted_content"],
               **request}
    return list(gpt(server).responses.create(stream=True, **request))


def respond(server, **request):
    request = {"model": "gpt-5.6", "input": GO, "store": False, **request}
    return gpt(server).responses.create(**request)


def test_responses_stream_is_parsed_by_the_sdk(server):
    server.script(tool_call("read", {"path": "a" * 40}, text="Reading.", thinking="Read a first."))
    events = streamed(server, reasoning={"summary": "auto"}, tools=[FUNCTION])
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert "response.reasoning_summary_text.delta" in kinds and "response.output_text.delta" in kinds
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(deltas) == {"path": "a" * 40}
    final = events[-1].response
    assert [item.type for item in final.output] == ["reasoning", "message", "function_call"]
    assert final.output_text == "Reading." and final.output[0].encrypted_content
    assert final.usage.input_tokens > 0 and final.usage.input_tokens_details.cache_write_tokens == 0
    done = [e.item.type for e in events if e.type == "response.output_item.done"]
    assert done == ["reasoning", "message", "function_call"]
    assert server.requests[-1].status == 200 and server.pending == 0


def test_a_custom_tool_call_streams_its_raw_input(server):
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** End Patch\n"
    server.script(custom_tool_call("apply_patch", patch, thinking="Add the file."))
    tool = {"type": "custom", "name": "apply_patch", "format": {"type": "text"}}
    events = streamed(server, reasoning={"summary": "auto"}, tools=[tool])
    deltas = "".join(e.delta for e in events if e.type == "response.custom_tool_call_input.delta")
    final = events[-1].response
    assert deltas == patch and [item.type for item in final.output] == ["reasoning", "custom_tool_call"]
    call = final.output[1]
    assert (call.name, call.input) == ("apply_patch", patch) and call.call_id.startswith("call_")


def test_a_get_is_recorded_and_not_found(server):
    with pytest.raises(openai.NotFoundError, match="does not serve GET /v1/models"):
        gpt(server).models.list()
    assert [(r.api, r.path, r.status) for r in server.requests] == [(None, "/v1/models", 404)]


def test_chat_completions_still_refuses_streaming(server):
    with pytest.raises(openai.BadRequestError, match="not streamed on /v1/chat/completions"):
        gpt(server).chat.completions.create(model="qwen3", messages=GO, stream=True)


def test_responses_stream_error_event_and_failed_response(server):
    server.script(stream_error("server_error"), failed_response("rate_limit_exceeded"))
    events = streamed(server)
    assert [e.type for e in events] == ["response.created", "response.in_progress", "error"]
    assert events[-1].code == "server_error" and "server had an error" in events[-1].message
    events = streamed(server)
    assert events[-1].type == "response.failed"
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.code == "rate_limit_exceeded" and failed.usage.input_tokens > 0


def test_responses_stream_dropped_or_ended_early(server):
    server.script(dropped_connection(), stream_ended_early())
    with pytest.raises(CONNECTION_ERRORS):  # wrapped by the newest SDKs, the transport's own error by older ones
        streamed(server)
    events = streamed(server)
    assert events and not any(e.type in ("response.completed", "response.incomplete", "response.failed")
                              for e in events)


def test_chat_fault_is_a_200_with_an_error_body(server):
    server.script(stream_error("server_error"))
    raw = gpt(server).chat.completions.with_raw_response.create(model="qwen3", messages=GO)
    assert raw.status_code == 200 and raw.http_response.json()["error"]["type"] == "server_error"


def test_cut_tool_call_is_an_incomplete_response(server):
    server.script(cut_tool_call("edit", {"path": "train.py", "content": "x" * 80}),
                  cut_tool_call("edit", {"path": "train.py", "content": "x" * 80}))
    events = streamed(server, tools=[FUNCTION])
    assert events[-1].type == "response.incomplete"
    reply = events[-1].response
    assert reply.status == "incomplete" and reply.incomplete_details.reason == "max_output_tokens"
    call = reply.output[-1]
    assert call.type == "function_call" and call.status == "incomplete"
    with pytest.raises(json.JSONDecodeError):
        json.loads(call.arguments)
    plain = respond(server, tools=[FUNCTION])
    assert plain.status == "incomplete" and plain.incomplete_details.reason == "max_output_tokens"


def test_refusal_is_a_refusal_content_part(server):
    server.script(refusal("I won't do that."), refusal("No."))
    events = streamed(server)
    assert "response.refusal.delta" in [e.type for e in events]
    part = events[-1].response.output[0].content[0]
    assert part.type == "refusal" and part.refusal == "I won't do that."
    assert events[-1].response.output_text == ""
    message = gpt(server).chat.completions.create(model="qwen3", messages=GO).choices[0].message
    assert message.refusal == "No." and message.content is None


@pytest.mark.parametrize("model, effort, accepted", [
    ("gpt-6.2-sol", "none", False), ("gpt-6.2-sol", "minimal", False), ("gpt-6.2-sol", "max", True),
    ("gpt-6.1-sol", "none", False), ("gpt-6.1-sol", "low", True), ("gpt-6.2-astra", "minimal", False),
    ("gpt-5.1", "xhigh", False), ("gpt-5.1", "none", True), ("gpt-5.1", "minimal", False),
    ("gpt-5.2", "xhigh", True), ("gpt-5.2", "max", False), ("gpt-5.5", "max", False), ("gpt-5.4", "none", True),
    ("gpt-5", "none", False), ("gpt-5", "minimal", True), ("gpt-5-mini", "xhigh", False),
    ("o3", "none", False), ("o3", "minimal", False), ("o3", "high", True),
    ("gpt-5.6", "none", True), ("gpt-5.6-luna", "max", True), ("gpt-6-sol", "none", True),
    ("gpt-6.9-nova", "ultra", True),
])
def test_reasoning_effort_per_model(server, model, effort, accepted):
    server.script(text("fine"))
    if accepted:
        assert respond(server, model=model, reasoning={"effort": effort}).output_text == "fine"
        return
    with pytest.raises(openai.BadRequestError, match=f"does not support '{effort}'.*Supported values are") as caught:
        respond(server, model=model, reasoning={"effort": effort})
    assert caught.value.body["param"] == "reasoning.effort" and caught.value.body["code"] == "unsupported_value"
    assert server.pending == 1


def test_chat_reasoning_effort(server):
    server.script(text("fine"), text("fine"))
    for model, effort in [("gpt-6.1-sol", "max"), ("gpt-5.1", "xhigh"), ("o3", "minimal")]:
        with pytest.raises(openai.BadRequestError, match="Supported values are") as caught:
            gpt(server).chat.completions.create(model=model, messages=GO, reasoning_effort=effort)
        assert caught.value.body["param"] == "reasoning_effort"
    assert gpt(server).chat.completions.create(model="gpt-6.1-sol", messages=GO,
                                               reasoning_effort="xhigh").choices[0].message.content == "fine"
    assert gpt(server).chat.completions.create(model="openai/gpt-5.1", messages=GO,
                                               reasoning_effort="high").choices[0].message.content == "fine"


def test_gpt_5_1_and_5_2_do_not_reason_unless_asked(server):
    for model in ("gpt-5.1", "gpt-5.2-2025-12-11"):
        server.script(text("a", thinking="hm", thinking_tokens=50), text("b", thinking="hm", thinking_tokens=50),
                      text("c", thinking="hm", thinking_tokens=50))
        quiet = respond(server, model=model, reasoning={"summary": "auto"})
        assert [item.type for item in quiet.output] == ["message"]
        assert quiet.usage.output_tokens_details.reasoning_tokens == 0
        asked = respond(server, model=model, reasoning={"effort": "low", "summary": "auto"})
        assert [item.type for item in asked.output] == ["reasoning", "message"]
        assert asked.usage.output_tokens_details.reasoning_tokens == 50
        none = respond(server, model=model, reasoning={"effort": "none"})
        assert [item.type for item in none.output] == ["message"]
    server.script(text("d", thinking="hm"))
    assert [item.type for item in respond(server, model="gpt-5.6").output] == ["reasoning", "message"]


BIG = "stable program text " * 1500  # ~7,500 tokens: cacheable on its own


def big_input(marked: bool, tail: str) -> list[dict]:
    first = {"type": "input_text", "text": BIG}
    if marked:
        first["prompt_cache_breakpoint"] = {"mode": "explicit"}
    return [{"role": "user", "content": [first, {"type": "input_text", "text": tail * 600}]}]


def test_cache_writes_are_reported_from_gpt_5_6_on(server):
    server.script(*[text("ok") for _ in range(4)])
    first = respond(server, model="gpt-5.6-sol", input=big_input(False, "tail "), prompt_cache_key="k")
    details = first.usage.input_tokens_details
    assert details.cached_tokens == 0 and details.cache_write_tokens > 7000
    second = respond(server, model="gpt-5.6-sol", input=big_input(False, "tail "), prompt_cache_key="k")
    details = second.usage.input_tokens_details
    assert details.cached_tokens == first.usage.input_tokens_details.cache_write_tokens
    assert details.cache_write_tokens == 0
    older = respond(server, model="gpt-5.4", input=big_input(False, "tail "), prompt_cache_key="k")
    assert older.usage.input_tokens_details.cache_write_tokens == 0
    older = respond(server, model="gpt-5.4", input=big_input(False, "tail "), prompt_cache_key="k")
    assert older.usage.input_tokens_details.cached_tokens > 7000


def test_explicit_breakpoints_cache_at_the_marks_and_implicit_mode_at_the_end(server):
    server.script(*[text("ok") for _ in range(4)])
    explicit = {"mode": "explicit"}
    first = respond(server, model="gpt-6.1-sol", input=big_input(True, "one "), prompt_cache_key="k",
                    extra_body={"prompt_cache_options": explicit})
    written = first.usage.input_tokens_details.cache_write_tokens
    assert 7000 < written < first.usage.input_tokens - 500  # the marked prefix, not the tail after it
    second = respond(server, model="gpt-6.1-sol", input=big_input(True, "two "), prompt_cache_key="k",
                     extra_body={"prompt_cache_options": explicit})
    assert second.usage.input_tokens_details.cached_tokens == written  # no 128-token rounding
    assert second.usage.input_tokens_details.cache_write_tokens == 0
    # the default (implicit) mode also writes its own breakpoint at the end of the prompt
    third = respond(server, model="gpt-6.1-sol", input=big_input(True, "three "), prompt_cache_key="k2")
    assert third.usage.input_tokens_details.cache_write_tokens == third.usage.input_tokens
    # the same prompt unmarked is cached implicitly, as a whole
    fourth = respond(server, model="gpt-6.1-sol", input=big_input(False, "four "), prompt_cache_key="other")
    assert fourth.usage.input_tokens_details.cache_write_tokens > written


def test_prompt_cache_key_longer_than_64_characters_is_refused(server):
    server.script(text("fine"))
    with pytest.raises(openai.BadRequestError, match="string too long") as caught:
        respond(server, prompt_cache_key="k" * 65)
    assert caught.value.body["param"] == "prompt_cache_key"
    assert respond(server, prompt_cache_key="k" * 64).output_text == "fine"


def test_deepseek_reasoning_content_must_come_back_on_tool_calls(server):
    server.script(tool_call("read", {}), text("done"), text("done"))
    reply = gpt(server).chat.completions.create(model="deepseek-v4-pro", messages=GO, tools=[CHAT_TOOL])
    message = reply.choices[0].message
    assert message.model_extra["reasoning_content"] == ""  # thinking mode always sends it
    call = message.tool_calls[0]
    assistant = {"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function", "function": {"name": "read", "arguments": "{}"}}]}
    result = {"role": "tool", "tool_call_id": call.id, "content": "file"}
    for model in ("deepseek-v4-flash", "deepseek-reasoner"):
        with pytest.raises(openai.BadRequestError, match="The reasoning_content in the thinking mode must be passed "
                                                         "back to the API."):
            gpt(server).chat.completions.create(model=model, messages=[*GO, assistant, result], tools=[CHAT_TOOL])
    passed = {**assistant, "reasoning_content": ""}
    assert gpt(server).chat.completions.create(model="deepseek-v4-flash", messages=[*GO, passed, result],
                                               tools=[CHAT_TOOL]).choices[0].message.content == "done"
    assert gpt(server).chat.completions.create(model="deepseek-chat", messages=[*GO, assistant, result],
                                               tools=[CHAT_TOOL]).choices[0].message.content == "done"


def test_a_reasoning_item_needs_a_following_item(server):
    server.script(tool_call("read", {}, thinking="Read."), text("done"))
    first = respond(server, tools=[FUNCTION], include=["reasoning.encrypted_content"], reasoning={"summary": "auto"})
    reasoning, call = [item.model_dump(exclude_none=True) for item in first.output]
    with pytest.raises(openai.BadRequestError, match="of type 'reasoning' was provided without its required "
                                                     "following item"):
        respond(server, input=[*GO, reasoning], tools=[FUNCTION])
    output = {"type": "function_call_output", "call_id": call["call_id"], "output": "file"}
    assert respond(server, input=[*GO, reasoning, call, output], tools=[FUNCTION]).output_text == "done"


def test_a_shut_down_openai_model_is_not_found_too(server):
    client = openai.OpenAI(api_key="k", base_url=server.openai_base_url(), max_retries=0)
    with pytest.raises(openai.NotFoundError, match="The model `o4-mini` does not exist"):
        client.responses.create(model="o4-mini", input="hi")
    with pytest.raises(ProviderFatal, match="does not know this model"):
        call_with_retries(lambda: client.responses.create(model="o4-mini-2025-04-16", input="hi"), "openai",
                          on_retry=lambda _: None, outage_window_s=5.0, base_s=0.01)


def test_input_past_the_models_limit_is_refused_as_too_long(server):

    client = openai.OpenAI(api_key="k", base_url=server.openai_base_url(), max_retries=0)
    long = "x" * 1_200_000  # ~300K tokens: over gpt-5.1's 272K input, under gpt-6.2-sol's 922K
    with pytest.raises(openai.BadRequestError, match="Input tokens exceed the configured limit of 272000"):
        client.responses.create(model="gpt-5.1", input=long)
    with pytest.raises(ContextTooLong):
        call_with_retries(lambda: client.responses.create(model="gpt-5.1", input=long), "openai",
                          on_retry=lambda _: None, outage_window_s=5.0, base_s=0.01)
    server.script(text("fine"))
    assert client.responses.create(model="gpt-6.2-sol", input=long, stream=False).output_text == "fine"
