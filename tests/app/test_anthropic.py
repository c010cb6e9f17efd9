"""app/api/anthropic.py over HTTP with the official `anthropic` SDK: the parser rules as content
blocks, streamed (raw events and the SDK's accumulated message) and whole, identical; stop
reasons; thinking on/off; tool_use / tool_result history; count_tokens; the beta path."""

from __future__ import annotations

import pytest

from tests.app.conftest import captured, oracle, recorded_failures, sdk_kwargs, xml_call
from tests.app.test_openai import CASES

TOOLS = [
    {"name": "get_weather", "description": "Weather by city",
     "input_schema": {"type": "object", "properties": {"city": {"type": "string"},
                                                       "days": {"type": "integer"}},
                      "required": ["city"]}},
    {"name": "search", "description": "Web search",
     "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}},
]
OPENAI_TOOLS = [{"type": "function", "function": {"name": t["name"],
                                                  "description": t["description"],
                                                  "parameters": t["input_schema"]}}
                for t in TOOLS]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def blocks(message) -> list[tuple]:
    out = []
    for b in message.content:
        if b.type == "thinking":
            out.append(("thinking", b.thinking))
        elif b.type == "text":
            out.append(("text", b.text))
        else:
            out.append(("tool_use", b.name, b.input))
    return out


def expected_blocks(text: str) -> tuple[list, list]:
    """(thinking + text, calls) as the parser sees them, for comparing with blocks."""
    res = oracle(text, tools=OPENAI_TOOLS)
    return res.reasoning, res.content, [(c.name, c.arguments) for c in res.tool_calls]


def summary(bl: list[tuple]) -> tuple:
    thinking = "".join(b[1] for b in bl if b[0] == "thinking")
    text = "".join(b[1] for b in bl if b[0] == "text")
    calls = [(b[1], b[2]) for b in bl if b[0] == "tool_use"]
    return thinking, text, calls


def streamed_and_whole(client, **kw) -> tuple:
    """The same request's reply streamed (the SDK's final message) and not."""
    with client.messages.stream(**kw) as stream:
        for _ in stream:
            pass
        streamed = stream.get_final_message()
    return streamed, client.messages.create(**kw)


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_rule_streamed_and_whole_agree(serve, name):
    text = CASES[name]
    live = serve(text)
    streamed, whole = streamed_and_whole(live.anthropic(), model="claude-any", max_tokens=4096,
                                         messages=ASK, tools=TOOLS)
    assert blocks(streamed) == blocks(whole)
    assert summary(blocks(whole)) == expected_blocks(text)
    assert streamed.stop_reason == whole.stop_reason
    assert whole.stop_reason == ("tool_use" if summary(blocks(whole))[2] else "end_turn")
    assert all(b.signature == "" for b in whole.content if b.type == "thinking")
    if name.startswith("recorded_failure"):
        assert [b[0] for b in blocks(whole)] == ["thinking", "tool_use"]


def test_raw_event_sequence(serve):
    text = "Plan.\n</think>\n\nChecking.\n" + xml_call("get_weather", city="Rome")
    live = serve(text)
    events = list(live.anthropic().messages.create(model="m", max_tokens=100, messages=ASK,
                                                   tools=TOOLS, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e for e in events if e.type == "content_block_start"]
    assert [(e.index, e.content_block.type) for e in starts] == [
        (0, "thinking"), (1, "text"), (2, "tool_use")]
    assert starts[2].content_block.name == "get_weather" and starts[2].content_block.input == {}
    json_parts = [e.delta.partial_json for e in events
                  if e.type == "content_block_delta" and e.delta.type == "input_json_delta"]
    assert "".join(json_parts) == '{"city": "Rome"}'
    stops = [e.index for e in events if e.type == "content_block_stop"]
    assert stops == [0, 1, 2]
    assert events[-2].delta.stop_reason == "tool_use"
    assert events[-2].usage.output_tokens == len(live.last.tokens)


def test_thinking_disabled_and_enabled(serve):
    live = serve("Hello.")
    client = live.anthropic()
    off = client.messages.create(model="m", max_tokens=50, messages=ASK,
                                 thinking={"type": "disabled"})
    assert blocks(off) == [("text", "Hello.")]
    assert live.last.prompt.endswith("<think>\n\n</think>\n\n")
    on = client.messages.create(model="m", max_tokens=50, messages=ASK,
                                thinking={"type": "enabled", "budget_tokens": 1024})
    assert blocks(on) == [("thinking", "Hello.")]
    assert live.last.request.thinking is True


def test_tool_history_becomes_tool_turns(serve):
    live = serve("Done.\n</think>\n\nIt is sunny in Paris.")
    messages = [
        *ASK,
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I need the weather.", "signature": ""},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
             "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1",
             "content": [{"type": "text", "text": "sunny"}]},
            {"type": "text", "text": "Thanks!"}]},
    ]
    msg = live.anthropic().messages.create(model="m", max_tokens=50, messages=messages,
                                           tools=TOOLS, system="Be brief.")
    assert blocks(msg)[-1] == ("text", "It is sunny in Paris.")
    got = live.last.request.messages
    assert [m.role for m in got] == ["system", "user", "assistant", "tool", "user"]
    assert got[2].reasoning_content == "I need the weather."
    assert got[2].tool_calls[0]["function"] == {"name": "get_weather",
                                                "arguments": {"city": "Paris"}}
    assert got[3].content == "sunny" and got[3].tool_call_id == "toolu_1"
    assert "<tool_response>\nsunny\n</tool_response>" in live.last.prompt


def test_stop_reasons(serve):
    live = serve("Thought.\n</think>\n\none two three four five")
    client = live.anthropic()
    msg = client.messages.create(model="m", max_tokens=3, messages=ASK)
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 3
    msg = client.messages.create(model="m", max_tokens=100, messages=ASK,
                                 stop_sequences=[" three"])
    assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == " three"
    assert blocks(msg)[-1] == ("text", "one two")
    msg = client.messages.create(model="m", max_tokens=100, messages=ASK)
    assert msg.stop_reason == "end_turn" and msg.stop_sequence is None


def test_count_tokens_and_beta_path(serve):
    live = serve(recorded_failures()[2])
    client = live.anthropic()
    counted = client.messages.count_tokens(model="m", messages=ASK, tools=TOOLS)
    msg = client.beta.messages.create(model="m", max_tokens=4096, messages=ASK, tools=TOOLS)
    assert counted.input_tokens == live.last.prompt_tokens > 0
    assert msg.stop_reason == "tool_use"
    assert msg.usage.input_tokens == live.last.prompt_tokens


def test_usage_on_message_start_and_end(serve):
    live = serve("Hi.\n</think>\n\nHello.")
    with live.anthropic().messages.stream(model="m", max_tokens=50, messages=ASK) as stream:
        first = next(iter(stream))
        for _ in stream:
            pass
        final = stream.get_final_message()
    assert first.type == "message_start"
    assert first.message.usage.input_tokens == live.last.prompt_tokens
    assert final.usage.output_tokens == len(live.last.tokens)
    assert final.usage.cache_read_input_tokens == 0


def claude_code_call(client, body: dict, headers: dict, **override):
    """Claude Code's request as its SDK sends it: the beta path with its betas."""
    create = client.beta.messages.create
    return create(**sdk_kwargs(create, body, **override),
                  betas=headers["anthropic-beta"].split(","))


def test_claude_code_system_message_mid_conversation(serve):
    # Claude Code's first request: a `role: "system"` turn after the first user message
    # (issue 9, item 1). Anthropic accepts it; it is rendered where it stands.
    cap = captured("claude_code")
    body = cap["body"]
    assert [m["role"] for m in body["messages"]] == ["user", "system"]
    live = serve("Planning.\n</think>\n\nDone.")
    events = list(claude_code_call(live.anthropic(), body, cap["headers"]))
    assert events[-1].type == "message_stop"
    text = "".join(e.delta.text for e in events
                   if e.type == "content_block_delta" and e.delta.type == "text_delta")
    assert text == "Done."
    prompt = live.last.prompt
    user_text = body["messages"][0]["content"][-1]["text"]
    mid = body["messages"][1]["content"]
    assert prompt.index(user_text) < prompt.index(mid)
    assert prompt.index("<|im_start|>system\n" + mid) > prompt.index(user_text)


def test_system_message_mid_conversation_as_blocks(serve):
    live = serve("Hi.\n</think>\n\nDone.")
    msg = live.anthropic().messages.create(model="m", max_tokens=50, messages=[
        *ASK, {"role": "assistant", "content": "Sunny."},
        {"role": "system", "content": [{"type": "text", "text": "Answer in French."}]},
        {"role": "user", "content": "And tomorrow?"}])
    assert blocks(msg)[-1] == ("text", "Done.")
    prompt = live.last.prompt
    assert prompt.index("Sunny.") < prompt.index("Answer in French.") < prompt.index("tomorrow")


def test_an_assistant_prefill_is_continued(serve):
    # Anthropic's prefill: the reply continues the last assistant turn (issue 9, item 3).
    live = serve(" Paris is sunny.", pack="smollm2")
    msg = live.anthropic().messages.create(model="m", max_tokens=50, messages=[
        *ASK, {"role": "assistant", "content": "Today in"}])
    assert blocks(msg) == [("text", " Paris is sunny.")]
    assert live.last.prompt.endswith("<|im_start|>assistant\nToday in")


def test_a_prefill_open_in_thinking_streams_as_thinking(serve):
    live = serve(" the forecast.\n</think>\n\nSunny.")
    with live.anthropic().messages.stream(model="m", max_tokens=50, messages=[
            *ASK, {"role": "assistant", "content": "<think>\nLet me check"}]) as stream:
        final = stream.get_final_message()
    assert live.last.start_state == "reasoning"
    assert blocks(final) == [("thinking", " the forecast."), ("text", "Sunny.")]
