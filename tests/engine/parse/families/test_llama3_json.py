"""engine/parse/families/llama3_json.py (Llama 3.1-3.3): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on."""

from __future__ import annotations

import json

import pytest

from engine.parse.families import llama3_json
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import parse_all_ways


def call(name: str, args: dict) -> str:
    return json.dumps({"name": name, "parameters": args})


FAMILY = Family("llama3-json", call, '{"name": "get_weather", "parameters": [1]}', think=None)


def parse(text: str):
    return parse_all_ways(text, family="llama3-json", start="content")


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


def test_python_tag_opens_a_call():
    res = parse("<|python_tag|>" + call("f", {"a": 1}))
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("f", {"a": 1})]
    assert res.content == ""


def test_calls_separated_by_semicolons():
    res = parse(call("a", {"x": 1}) + "; " + call("b", {}) + "\nDone.")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("a", {"x": 1}), ("b", {})]
    assert res.content == "Done."


@pytest.mark.parametrize("tail", [";", "; and more", ";\n"])
def test_a_semicolon_not_followed_by_a_call_is_text(tail):
    res = parse(call("a", {}) + tail)
    assert [c.name for c in res.tool_calls] == ["a"] and res.content == tail
    assert not any(res.anomalies.values())


def test_json_mid_line_and_objects_without_a_name_first_are_text():
    for text in ('Use {"name": "x", "parameters": {}} like this.',
                 '{"parameters": {}, "name": "x"}', "{not json}"):
        res = parse(text)
        assert res.tool_calls == () and res.content == text


def test_think_tags_are_plain_text():
    res = parse("<think>hm</think> ok")
    assert res.content == "<think>hm</think> ok" and res.reasoning == ""


def test_reader_directly():
    p = read_all_ways(llama3_json, '{"name": "f", "arguments": {"k": 1}} ;  {"name"')
    assert (p.name, p.arguments) == ("f", {"k": 1})
    assert p.end == len('{"name": "f", "arguments": {"k": 1}} ;') and p.follow() is not None


def test_the_family_has_no_reasoning_so_the_parse_starts_in_the_answer():
    res = parse_all_ways("Hello.\n" + call("f", {}), family="llama3-json", start="reasoning")
    assert (res.reasoning, res.content) == ("", "Hello.")
    assert [c.name for c in res.tool_calls] == ["f"]


def test_a_lone_brace_line_before_a_call_is_text_and_the_call_is_read():
    """After a bare `{` (the call object's own first character) only `"name"` opens a call: a
    second `{` there made the first one a broken call (malformed_call) and left `{\\n` in the
    answer; found by the writer round trip."""
    res = parse_all_ways('{\n{"name": "f", "parameters": {}}', family="llama3-json",
                         start="content")
    assert res.content == "{" and [c.name for c in res.tool_calls] == ["f"]
    assert res.anomalies["malformed_call"] == 0
    mid = parse_all_ways('{ {"name": "f", "parameters": {}}', family="llama3-json",
                         start="content")
    assert mid.tool_calls == () and mid.anomalies["malformed_call"] == 0
