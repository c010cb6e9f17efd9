"""engine/parse/families/deepseek.py (DeepSeek R1, V3, V3.1) through the parser: one case per rule,
each parsed whole, per character and in random chunks, stream_tools off and on."""

from __future__ import annotations

import json

import pytest

from engine.parse.families import deepseek
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
B, C, S, E, Z = (deepseek.CALLS_BEGIN, deepseek.CALL_BEGIN, deepseek.SEP, deepseek.CALL_END,
                 deepseek.CALLS_END)
V3 = B + C + "function" + S + 'get_weather\n```json\n{"city": "Tokyo", "days": 2}\n```' + E + Z
V31 = B + C + "get_weather" + S + '{"city": "Tokyo", "days": 2}' + E + Z
ARGS = {"city": "Tokyo", "days": 2}


def parse(text: str, **kw):
    return parse_all_ways(text, family="deepseek", tools=TOOLS, **kw)


def test_reasoning_then_answer():
    res = parse("Let me think.\n</think>\n\nIt is 4.")
    assert (res.reasoning, res.content, res.tool_calls) == ("Let me think.", "It is 4.", ())


def test_model_written_think_at_the_start():
    res = parse("<think>\nhm\n</think>\n\nok", start="content")
    assert (res.reasoning, res.content) == ("hm", "ok")


@pytest.mark.parametrize("call", [V3, V31], ids=["v3", "v3.1"])
def test_one_call_after_the_answer_text(call):
    res = parse("plan\n</think>\n\nChecking." + call)
    assert res.content == "Checking." and res.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("get_weather", ARGS)]
    assert not anomalies(res)


def test_several_calls_in_one_section_and_text_after():
    two = (B + C + "get_weather" + S + '{"city": "A"}' + E + C + "get_weather" + S
           + '{"city": "B"}' + E + Z)
    res = parse(two + "\nDone.", start="content")
    assert [c.arguments["city"] for c in res.tool_calls] == ["A", "B"]
    assert res.content == "Done."  # the newline after a call goes with it


def test_v3_fence_is_optional():
    text = B + C + "function" + S + 'get_weather\n{"city": "X"}' + E + Z
    res = parse(text, start="content")
    assert res.tool_calls[0].arguments == {"city": "X"}


def test_call_inside_reasoning_at_a_line_start_ends_it():
    res = parse("I need the weather.\n" + V31)
    assert res.reasoning == "I need the weather." and len(res.tool_calls) == 1
    assert anomalies(res) == {"implicit_reasoning_end": 1}


@pytest.mark.parametrize("quoted", ["DeepSeek writes `" + V31 + "` for calls.",
                                    "```\n" + V3 + "\n```"])
def test_quoted_markup_in_the_answer_stays_text(quoted):
    res = parse(quoted, start="content")
    assert res.tool_calls == () and res.content == quoted


def test_mentioned_mid_line_in_reasoning_stays_reasoning():
    text = "the format is " + V31 + " as I recall\n</think>\nok"
    res = parse(text)
    assert res.tool_calls == () and res.reasoning == text.split("\n</think>")[0]


def test_stray_closer_in_the_answer_is_dropped():
    res = parse("Answer part one.</think> and two.", start="content")
    assert res.content == "Answer part one. and two."
    assert anomalies(res) == {"stray_think_end": 1}


def test_unfinished_call_is_text():
    text = B + C + "get_weather" + S + '{"city": "To'
    res = parse(text, start="content")
    assert res.tool_calls == () and res.content == text
    assert anomalies(res) == {"unfinished_call": 1}


def test_malformed_call_is_text():
    text = B + C + "get_weather" + S + '{"city": }' + E + Z
    res = parse(text, start="content")
    assert res.tool_calls == () and anomalies(res) == {"malformed_call": 1}
    assert res.content.startswith(B + C + "get_weather")


def test_unknown_tool_is_called_and_flagged():
    res = parse(B + C + "nope" + S + "{}" + E + Z, start="content")
    assert [c.name for c in res.tool_calls] == ["nope"] and anomalies(res) == {"unknown_tool": 1}


def test_reader_directly():
    p = read_all_ways(deepseek, C + "function" + S + "f\n```json\n{}\n```" + E + " " + Z + "x")
    assert (p.name, p.arguments, p.done) == ("f", {}, True)
    assert p.end == len(C + "function" + S + "f\n```json\n{}\n```" + E + " " + Z)
    p = read_all_ways(deepseek, C + "f" + S + "oops!")
    assert p.error == "expected arguments" and p.resume == len(C + "f" + S + "oops")


FAMILY = Family("deepseek", lambda name, args: B + C + name + S + json.dumps(args) + E + Z,
                B + C + "get_weather" + S + "[1, 2]" + E + Z)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)
