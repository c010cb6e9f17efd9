"""engine/parse/families/harmony.py (gpt-oss) through the parser: one case per rule, each parsed
whole, per character and in random chunks, stream_tools off and on (parse_all_ways)."""

from __future__ import annotations

import pytest

from engine.parse.families import harmony
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
ANALYSIS = "<|channel|>analysis<|message|>"
NEXT = "<|end|><|start|>assistant"
CALL = ('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
        '{"city": "Paris", "days": 3}<|call|>')


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, dialect="harmony", tools=TOOLS, **kw)


def test_analysis_then_final():
    res = parse(ANALYSIS + "Simple sum." + NEXT + "<|channel|>final<|message|>It is 4.<|return|>")
    assert (res.reasoning, res.content, res.tool_calls) == ("Simple sum.", "It is 4.", ())
    assert res.finish_reason == "stop" and not anomalies(res)


def test_prompt_opened_the_analysis_channel():
    res = parse("Thinking." + NEXT + "<|channel|>final<|message|>Done.", start="reasoning")
    assert (res.reasoning, res.content) == ("Thinking.", "Done.")


def test_one_call_after_analysis():
    res = parse(ANALYSIS + "Need the weather." + NEXT + CALL)
    assert res.reasoning == "Need the weather." and res.content == ""
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("get_weather", {"city": "Paris", "days": 3})]
    assert res.finish_reason == "tool_calls" and not anomalies(res)


def test_recipient_in_the_role_and_no_call_token_at_the_end():
    text = (ANALYSIS + "x" + NEXT + " to=functions.get_weather<|channel|>commentary json"
            '<|message|>{"city": "Rome"}')
    res = parse(text)
    assert [c.arguments for c in res.tool_calls] == [{"city": "Rome"}]


def test_preamble_then_several_calls():
    text = (ANALYSIS + "Plan." + NEXT + "<|channel|>commentary<|message|>Checking both."
            + NEXT + CALL + "<|start|>assistant" + CALL.replace("Paris", "Oslo"))
    res = parse(text)
    assert res.content == "Checking both."
    assert [c.arguments["city"] for c in res.tool_calls] == ["Paris", "Oslo"]


def test_analysis_again_after_a_preamble():
    text = ("<|channel|>commentary<|message|>On it." + NEXT + ANALYSIS + "More thought."
            + NEXT + "<|channel|>final<|message|>Answer.")
    res = parse(text)
    assert (res.reasoning, res.content) == ("More thought.", "On it.Answer.")


def test_call_inside_the_analysis_at_a_line_start_ends_it():
    res = parse(ANALYSIS + "I will call it.\n" + CALL)
    assert res.reasoning == "I will call it." and len(res.tool_calls) == 1
    assert anomalies(res) == {"implicit_reasoning_end": 1}


@pytest.mark.parametrize("quoted", [
    "The call looks like `" + CALL + "` in docs.",
    "```\n" + CALL + "\n```",
])
def test_quoted_markup_in_the_answer_stays_text(quoted):
    res = parse(ANALYSIS + "x" + NEXT + "<|channel|>final<|message|>" + quoted)
    assert res.tool_calls == () and res.content == quoted


def test_mentioned_mid_sentence_in_the_analysis_stays_reasoning():
    text = ANALYSIS + "I could write " + CALL[:40] + " but not now." + NEXT
    res = parse(text)
    assert res.tool_calls == () and res.reasoning == "I could write " + CALL[:40] + " but not now."


def test_end_in_the_answer_is_a_message_end_not_a_stray_closer():
    res = parse("<|channel|>final<|message|>Hi.<|end|>")
    assert res.content == "Hi." and not anomalies(res)


def test_unfinished_call_is_answer_text():
    text = '<|channel|>commentary to=functions.get_weather json<|message|>{"city": "Pa'
    res = parse(text)
    assert res.tool_calls == () and res.content == text
    assert anomalies(res) == {"unfinished_call": 1}


def test_malformed_arguments_are_answer_text():
    text = '<|channel|>commentary to=functions.get_weather json<|message|>{"city": 1,}<|call|>'
    res = parse(text)
    assert res.tool_calls == () and anomalies(res) == {"malformed_call": 1}
    assert res.content.startswith("<|channel|>commentary to=functions.get_weather")


def test_unknown_tool_is_called_and_flagged():
    res = parse('<|channel|>commentary to=functions.nope json<|message|>{}<|call|>')
    assert [c.name for c in res.tool_calls] == ["nope"]
    assert anomalies(res) == {"unknown_tool": 1}


def test_builtin_recipient_is_not_a_function_call():
    text = '<|channel|>commentary to=browser.search json<|message|>{"q": "x"}'
    res = parse(text)
    assert res.tool_calls == () and res.content == text


def test_reader_directly_name_header_and_arguments():
    p = read_all_ways(harmony, 'functions.a.b-c <|constrain|>json<|message|> {"k": [1]}\n<|call|>x')
    assert (p.name, p.arguments, p.done) == ("a.b-c", {"k": [1]}, True)
    assert p.end == len('functions.a.b-c <|constrain|>json<|message|> {"k": [1]}\n<|call|>')
    p = read_all_ways(harmony, "functions.f" + " " * 200 + "<|message|>{}")
    assert p.error == "no <|message|>" and p.resume == len("functions.f")


def test_a_frame_tag_in_the_analysis_opens_the_answer():
    # `prism parse` starts in reasoning by default; the header names the channel anyway.
    res = parse("<|channel|>final<|message|>Just this.", start="reasoning")
    assert (res.reasoning, res.content) == ("", "Just this.")
    res = parse(ANALYSIS + "No end token.<|start|>assistant<|channel|>final<|message|>Ok.")
    assert (res.reasoning, res.content) == ("No end token.", "Ok.")
    assert not anomalies(res)


def test_newlines_before_a_frame_tag_belong_to_it():
    res = parse("<|channel|>final<|message|>Hi.\n\n<|end|>\n<|start|>assistant"
                "<|channel|>final<|message|>There.\n<|return|>")
    assert res.content == "Hi.There."
