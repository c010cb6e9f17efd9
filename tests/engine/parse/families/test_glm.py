"""engine/parse/families/glm.py (GLM-4.5, 4.6, 4.7): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on."""

from __future__ import annotations

import json

import pytest

from engine.parse.families import glm
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import parse_all_ways


def call(name: str, args: dict, sep: str = "\n") -> str:
    pairs = "".join(f"<arg_key>{k}</arg_key>{sep}<arg_value>"
                    f"{v if isinstance(v, str) else json.dumps(v)}</arg_value>{sep}"
                    for k, v in args.items())
    return f"<tool_call>{name}{sep}{pairs}</tool_call>"


def typed(key: str, raw: str) -> str:
    return call("get_weather", {key: raw})


FAMILY = Family("glm", call, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<oops>\n",
                typed=typed)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


def test_glm_4_7_without_newlines():
    res = parse_all_ways(call("get_weather", {"city": "Oslo", "days": 2}, sep=""),
                         dialect="glm", start="content")
    assert res.tool_calls[0].arguments == {"city": "Oslo", "days": 2}


def test_tool_call_followed_by_prose_is_text():
    text = "<tool_call>is the tag GLM uses</tool_call> here"
    res = parse_all_ways(text, dialect="glm", start="content")
    assert res.tool_calls == () and res.content == text


def test_reader_directly():
    p = read_all_ways(glm, "get_weather\n<arg_key>days</arg_key>\n<arg_value>\n4\n</arg_value>\n"
                      "</tool_call>tail", schemas={})
    assert (p.name, p.arguments) == ("get_weather", {"days": 4})
    assert p.end == len("get_weather\n<arg_key>days</arg_key>\n<arg_value>\n4\n</arg_value>\n"
                        "</tool_call>")


def test_auto_reads_only_qwen_xml_and_hermes_json():
    text = call("get_weather", {"city": "Oslo"})
    res = parse_all_ways(text, dialect="auto", start="content")
    assert res.tool_calls == () and res.content == text
