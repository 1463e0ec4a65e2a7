"""The loopback LLM server refuses what the real services refuse, with their status and error shape,
and accounts for prompt caching the way they bill it; driven through the real SDKs."""

import anthropic
import openai
import pytest

from tests.helpers.llm_server import LLMServer, text, tool_call

TOOL = {"name": "read", "description": "Read a file.", "input_schema": {"type": "object", "properties": {}}}
USER = [{"role": "user", "content": "Improve the trainer."}]
ADAPTIVE = {"type": "adaptive", "display": "summarized"}


@pytest.fixture(scope="module")
def server():
    with LLMServer() as server:
        yield server


def claude(server):
    return anthropic.Anthropic(api_key="test", base_url=server.anthropic_base_url(), max_retries=0)


def gpt(server):
    return openai.OpenAI(api_key="test", base_url=server.openai_base_url(), max_retries=0)


def refused_by_claude(server, match: str, **request):
    request = {"model": "claude-opus-4-8", "max_tokens": 4096, "messages": USER, **request}
    before = server.pending
    server.script(text("never sent"))
    with pytest.raises(anthropic.BadRequestError, match=match) as caught:
        with claude(server).messages.stream(**request) as stream:
            stream.get_final_message()
    assert caught.value.body["error"]["type"] == "invalid_request_error"
    assert server.pending == before + 1  # a refusal consumes no reply
    server.clear()


@pytest.mark.parametrize("request_, match", [
    (dict(thinking={"type": "enabled", "budget_tokens": 2000}), "thinking.type.enabled is not supported"),
    (dict(model="claude-fable-5", thinking={"type": "enabled", "budget_tokens": 2000}), "not supported"),
    (dict(model="claude-opus-4-5", thinking=ADAPTIVE), "adaptive thinking is not supported"),
    (dict(model="claude-opus-4-5", thinking={"type": "enabled", "budget_tokens": 512}), "greater than or equal"),
    (dict(model="claude-opus-4-5", thinking={"type": "enabled", "budget_tokens": 4096}),
     "must be greater than `thinking.budget_tokens`"),
    (dict(thinking=ADAPTIVE, extra_body={"temperature": 0.7}), "temperature` may only be set to 1"),
    (dict(thinking=ADAPTIVE, tools=[TOOL], tool_choice={"type": "any"}), "tool_choice forces tool use"),
    (dict(max_tokens=200_000), "maximum allowed number of output tokens"),
    (dict(model="claude-opus-4-5", max_tokens=100_000), "maximum allowed"),
    (dict(messages=[{"role": "user", "content": [{"type": "text", "text": ""}]}]), "must be non-empty"),
    (dict(system=[{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}] * 5),
     "A maximum of 4 blocks with cache_control"),
    (dict(messages=[*USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read",
                                                             "input": {}}]},
                    {"role": "user", "content": "go on"}]), "without `tool_result` blocks"),
    (dict(messages=[*USER, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read",
                                                             "input": {}}]},
                    {"role": "user", "content": [{"type": "text", "text": "here"},
                                                 {"type": "tool_result", "tool_use_id": "t1", "content": "x"}]}]),
     "must come first"),
    (dict(messages=[*USER, {"role": "assistant", "content": [{"type": "thinking", "thinking": "made up",
                                                             "signature": "forged"}, {"type": "text", "text": "hi"}]},
                    {"role": "user", "content": "and?"}]), "Invalid `signature`"),
])
def test_anthropic_refusals(server, request_, match):
    refused_by_claude(server, match, **request_)


def test_thinking_must_come_back_with_its_signature_before_the_tool_use(server):
    server.script(tool_call("read", {}, thinking="I should read first."), text("done"), text("done"))
    reply = claude(server).messages.create(model="claude-opus-4-8", max_tokens=4096, messages=USER, tools=[TOOL],
                                           thinking=ADAPTIVE)
    thinking, use = reply.content
    answer = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "x"}]}
    without = [*USER, {"role": "assistant", "content": [use.model_dump(exclude_none=True)]}, answer]
    with pytest.raises(anthropic.BadRequestError, match="must start with a thinking block"):
        claude(server).messages.create(model="claude-opus-4-8", max_tokens=4096, messages=without, tools=[TOOL],
                                       thinking=ADAPTIVE)
    returned = [*USER, {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in reply.content]},
                answer]
    ok = claude(server).messages.create(model="claude-opus-4-8", max_tokens=4096, messages=returned, tools=[TOOL],
                                        thinking=ADAPTIVE)
    assert ok.content[0].text == "done"
    server.clear()


def test_streamed_reply_with_thinking_and_a_tool_call(server):
    server.script(tool_call("read", {"path": "train.py", "n": [1, 2]}, text="Reading.", thinking="Plan: read."))
    with claude(server).messages.stream(model="claude-opus-4-8", max_tokens=128_000, messages=USER, tools=[TOOL],
                                        thinking=ADAPTIVE) as stream:
        reply = stream.get_final_message()
        assert stream.request_id.startswith("req_")
    assert [b.type for b in reply.content] == ["thinking", "text", "tool_use"]
    assert reply.content[0].thinking == "Plan: read." and reply.content[0].signature
    assert reply.content[2].input == {"path": "train.py", "n": [1, 2]} and reply.stop_reason == "tool_use"
    assert reply.usage.output_tokens == 200 and reply.usage.input_tokens > 0


def test_anthropic_cache_reads_what_an_earlier_request_wrote(server):
    system = [{"type": "text", "text": "program " * 3000, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    server.script(text("a"), text("b"), text("c"))
    first = claude(server).messages.create(model="claude-sonnet-4-6", max_tokens=1024, system=system, messages=USER)
    assert first.usage.cache_read_input_tokens == 0 and first.usage.cache_creation_input_tokens > 1024
    assert first.usage.cache_creation.ephemeral_1h_input_tokens == first.usage.cache_creation_input_tokens
    second = claude(server).messages.create(model="claude-sonnet-4-6", max_tokens=1024, system=system, messages=USER)
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert second.usage.cache_creation_input_tokens == 0 and second.usage.input_tokens == first.usage.input_tokens
    unmarked = claude(server).messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=USER,
                                              system=[{"type": "text", "text": "program " * 3000}])
    assert unmarked.usage.cache_read_input_tokens == 0 and unmarked.usage.cache_creation_input_tokens == 0
    assert unmarked.usage.input_tokens == first.usage.input_tokens + first.usage.cache_creation_input_tokens


CHAT_TOOL = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}}]


@pytest.mark.parametrize("request_, match", [
    (dict(model="gpt-5.6", tools=CHAT_TOOL), "Please use /v1/responses"),
    (dict(model="gpt-5.4", tools=CHAT_TOOL, reasoning_effort="high"), "Please use /v1/responses"),
    (dict(model="gpt-5", max_tokens=1000), "Use 'max_completion_tokens' instead"),
    (dict(model="o3", temperature=0.2), "Only the default \\(1\\) value is supported"),
    (dict(model="qwen3", messages=[*USER, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
        {"role": "user", "content": "next"}]), "did not have response messages: c1"),
])
def test_chat_completions_refusals(server, request_, match):
    request_ = {"messages": USER, **request_}
    with pytest.raises(openai.BadRequestError, match=match) as caught:
        gpt(server).chat.completions.create(**request_)
    assert caught.value.body["type"] == "invalid_request_error"


def test_chat_completions_accepts_what_the_services_accept(server):
    server.script(text("fine"), text("fine"))
    assert gpt(server).chat.completions.create(model="gpt-5.4", messages=USER, tools=CHAT_TOOL,
                                               max_completion_tokens=100).choices[0].message.content == "fine"
    assert gpt(server).chat.completions.create(model="qwen3", messages=USER, tools=CHAT_TOOL,
                                               max_tokens=100).choices[0].message.content == "fine"


RESPONSES = dict(model="gpt-5.6", store=False, include=["reasoning.encrypted_content"],
                 tools=[{"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}}])


def test_responses_round_trip_and_refusals(server):
    server.script(tool_call("read", {"path": "a"}, thinking="Read a first."), text("done"))
    first = gpt(server).responses.create(input=[{"role": "user", "content": "go"}], prompt_cache_key="t",
                                         reasoning={"summary": "auto"}, **RESPONSES)
    reasoning, call = first.output
    assert reasoning.summary[0].text == "Read a first." and reasoning.encrypted_content
    items = [i.model_dump(exclude_none=True) for i in first.output]
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "file a"}
    stranger = {"type": "function_call_output", "call_id": "call_unknown", "output": "x"}
    stripped = {**items[0]}
    stripped.pop("encrypted_content")
    for wrong, match in [([*items, output, stranger], "No tool call found for function call output with call_id "
                                                      "call_unknown"),
                         ([stripped, items[1], output], "Items are not persisted when `store` is set to false"),
                         ([items[0], items[1]], f"No tool output found for function call {call.call_id}")]:
        with pytest.raises(openai.BadRequestError, match=match):
            gpt(server).responses.create(input=[{"role": "user", "content": "go"}, *wrong], **RESPONSES)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        gpt(server).responses.create(input="go", temperature=0.3, **RESPONSES)
    done = gpt(server).responses.create(input=[{"role": "user", "content": "go"}, *items, output],
                                        prompt_cache_key="t", **RESPONSES)
    assert done.output_text == "done" and done._request_id.startswith("req_")
    assert server.pending == 0
