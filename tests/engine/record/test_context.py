"""Where a prompt's context went (engine/record/context.py): parts counted with a real tokenizer
(the default model's vocabulary) in prompts a real template rendered (Qwen 3's, which writes
tools into the system turn), and the token-aligned diff of two turns."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from engine.chat.packs import resolve_pack
from engine.chat.request import ChatRequest, Message
from engine.record import context
from engine.record.recording import request_to_dict


def _tool(name: str, desc: str) -> dict:
    return {"type": "function", "function": {
        "name": name, "description": desc,
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                       "required": ["q"]}}}


TOOLS = (_tool("get_weather", "Weather for a city."), _tool("search_web", "Search the web."),
         _tool("read_file", "Read a file from the workspace."))
MESSAGES = (
    Message("system", "You are a careful assistant for the Prism project."),
    Message("user", "What is the weather in Paris today?"),
    Message("assistant", "", tool_calls=({"id": "c1", "type": "function", "function": {
        "name": "get_weather", "arguments": {"q": "Paris"}}},)),
    Message("tool", "Sunny, 21 degrees.", tool_call_id="c1", name="get_weather"),
    Message("user", "And should I take an umbrella tomorrow?"),
)


@pytest.fixture(scope="module")
def tokenize(default_model):
    from engine.backends.llama.vocab import Vocab

    vocab = Vocab(default_model)
    yield vocab.tokenize
    vocab.close()


@pytest.fixture(scope="module")
def render():
    template = resolve_pack("qwen3-xml", require_model=False).chat_template()

    def render_request(req: ChatRequest) -> str:
        return template.render(req.messages, tools=req.tools, enable_thinking=False)

    return render_request


def _request(messages=MESSAGES, tools=TOOLS) -> ChatRequest:
    return ChatRequest(messages=messages, tools=tools)


def test_parts_add_up_to_the_real_total_and_each_is_its_own_text(tokenize, render):
    req = _request()
    prompt = render(req)
    b = context.of_request(prompt, req, tokenize, render)
    assert b.total == len(tokenize(prompt))
    assert sum(p.tokens for p in b.parts) == b.total
    by = b.by_kind()
    assert all(by[k] > 0 for k in ("system", "tools", "user", "tool_calls", "tool_results",
                                    "scaffolding")), by
    tools = [p for p in b.parts if p.kind == "tools"]
    assert [p.label for p in tools] == ["tool get_weather", "tool search_web", "tool read_file"]
    for p, tool in zip(tools, TOOLS, strict=True):
        assert p.located
        text = prompt[p.start:p.end]
        assert tool["function"]["name"] in text and tool["function"]["description"] in text
    # Only get_weather was called in the history.
    assert b.unused_tools() == ("search_web", "read_file")
    system = next(p for p in b.parts if p.kind == "system")
    assert prompt[system.start:system.end] == MESSAGES[0].content
    calls = next(p for p in b.parts if p.kind == "tool_calls")
    assert "Paris" in prompt[calls.start:calls.end]
    result = next(p for p in b.parts if p.kind == "tool_results")
    assert prompt[result.start:result.end] == "Sunny, 21 degrees."
    # No two located parts overlap.
    spans = sorted((p.start, p.end) for p in b.parts if p.located)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))


def test_a_recorded_request_dict_reads_the_same(tokenize, render):
    req = _request()
    prompt = render(req)
    live = context.of_request(prompt, req, tokenize, render)
    recorded = context.of_request(prompt, request_to_dict(req), tokenize, render)
    assert recorded == live


def test_without_the_template_tools_are_counted_as_json_and_marked_unlocated(tokenize, render):
    req = _request()
    prompt = render(req)
    b = context.of_request(prompt, request_to_dict(req), tokenize)
    tools = [p for p in b.parts if p.kind == "tools"]
    assert len(tools) == 3 and not any(p.located for p in tools)
    assert all(p.tokens > 10 for p in tools)
    # The parts still add up to the total: the JSON counts stand in for the schemas' text.
    assert sum(p.tokens for p in b.parts) == b.total


def test_a_render_that_differs_from_the_prompt_falls_back_to_search(tokenize, render):
    req = _request()
    prompt = render(req) + "extra"
    b = context.of_request(prompt, req, tokenize, render)
    assert not any(p.located for p in b.parts if p.kind == "tools")
    assert next(p for p in b.parts if p.kind == "user").located


def test_reasoning_replayed_in_the_history_is_its_own_part(tokenize):
    template = resolve_pack("qwen3-xml", require_model=False).chat_template()
    messages = (Message("user", "Hi"),
                Message("assistant", "Hello!", reasoning_content="The user greets me warmly."),
                Message("user", "Bye"))
    prompt = template.render(messages, enable_thinking=True)
    b = context.breakdown(prompt, messages, (), tokenize)
    if "The user greets me warmly." in prompt:
        part = next(p for p in b.parts if p.kind == "reasoning")
        assert prompt[part.start:part.end] == "The user greets me warmly."
    else:  # Qwen 3 drops an earlier turn's thinking: then nothing may claim it
        assert b.by_kind()["reasoning"] == 0


def test_prompt_diff_of_two_turns_shares_the_first_turns_tokens(tokenize, render):
    one = _request(MESSAGES[:2], ())
    two = _request((*MESSAGES[:2], Message("assistant", "It is sunny."),
                    Message("user", "Thanks")), ())
    a, b = render(one), render(two)
    d = context.prompt_diff(a, b, tokenize)
    assert d.a == tuple(tokenize(a)) and d.b == tuple(tokenize(b))
    # Everything through the first turn's question is shared; the second turn only adds.
    question = MESSAGES[1].content
    shared = len(tokenize(a[:a.index(question) + len(question)]))
    assert d.common_prefix >= shared - 1
    assert d.a[:d.common_prefix] == d.b[:d.common_prefix]
    assert d.a[d.common_prefix] != d.b[d.common_prefix]
    assert d.changed and all(op.a0 >= d.common_prefix for op in d.changed)
    assert sum(op.b1 - op.b0 for op in d.changed if op.tag in ("insert", "replace")) > 0


def test_prompt_diff_finds_a_changed_system_prompt_at_the_start(tokenize, render):
    a = render(_request(MESSAGES[:2], ()))
    changed = (dataclasses.replace(MESSAGES[0], content="Time: 12:01. " + MESSAGES[0].content),
               MESSAGES[1])
    b = render(_request(changed, ()))
    d = context.prompt_diff(a, b, tokenize)
    assert d.common_prefix < 8  # the cache could reuse almost nothing
    assert len(d.changed) == 1 and d.changed[0].tag in ("insert", "replace")  # "You" → " You"
    assert d.changed[0].b1 - d.changed[0].b0 > d.changed[0].a1 - d.changed[0].a0
