"""engine/parse/families/gigachat3_1.py (GigaChat 3.1): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The outputs are what GigaChat3.1-10B-A1.8B.jinja writes for an
assistant turn and SGLang's GigaChat3Detector tests of the `<|function_call|>` form; the reader
is GigaChat 3's (tests/engine/parse/families/test_gigachat3.py)."""

from __future__ import annotations

import json

import pytest

from engine.parse.events import ToolCall
from engine.parse.families import gigachat3_1 as g
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}}}}]


def call(name: str, args: dict) -> str:
    return g.FUNCTION_CALL + json.dumps({"name": name, "arguments": args})


FAMILY = Family("gigachat3.1", call, g.FUNCTION_CALL + '{"name": "get_weather", "arguments": [}',
                think=None)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family="gigachat3.1", tools=TOOLS, **kw)


def test_the_call_inside_the_answer_message():
    # SGLang's test_streaming_function_call_marker_simple_tool_call, and the template's turn
    for tail in ("", g.MESSAGE_SEP, g.MESSAGE_SEP + "\n\n"):
        res = parse("I'll help you." + call("search", {"query": "python"}) + tail,
                    stream_tools=True)
        assert res.content == "I'll help you." and not anomalies(res), tail
        assert [(c.name, c.arguments) for c in res.tool_calls] == [("search", {"query": "python"})]


def test_an_answer_alone_ends_its_message():
    res = parse("Hello there.<|message_sep|>")
    assert res.content == "Hello there." and res.tool_calls == () and not anomalies(res)


def test_writer_and_stops():
    fam = g.FAMILY
    assert fam.writer.write(None, "Checking.", [ToolCall("c0", "f", {"x": 1}, 0)]) == (
        'Checking.<|function_call|>{"name": "f", "arguments": {"x": 1}}')
    assert fam.stops == (g.MESSAGE_SEP,) and fam.supersedes == ("gigachat3",)
