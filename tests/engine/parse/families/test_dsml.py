"""engine/parse/families/dsml.py (DeepSeek V3.2, V4): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on."""

from __future__ import annotations

import json

import pytest

from engine.parse.families import dsml
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import parse_all_ways


def _param(k, v, string=None) -> str:
    if string is None:
        string = isinstance(v, str)
    raw = v if isinstance(v, str) else json.dumps(v)
    flag = "true" if string else "false"
    return f'{dsml.PARAM}{k}" string="{flag}">{raw}{dsml.PARAM_END}\n'


def call(name: str, args: dict) -> str:
    params = "".join(_param(k, v) for k, v in args.items())
    return (f"{dsml.SECTION}\n{dsml.INVOKE}{name}\">\n{params}{dsml.INVOKE_END}\n"
            f"{dsml.SECTION_END}")


def typed(key: str, raw: str) -> str:
    return (f'{dsml.SECTION}\n{dsml.INVOKE}get_weather">\n{dsml.PARAM}{key}">{raw}'
            f"{dsml.PARAM_END}\n{dsml.INVOKE_END}\n{dsml.SECTION_END}")


FAMILY = Family("dsml", call, f'{dsml.SECTION}\n{dsml.INVOKE}get_weather">\n<oops>\n'
                f"{dsml.INVOKE_END}", typed=typed)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


def test_string_attribute_decides_over_the_schema():
    text = (f'{dsml.SECTION}{dsml.INVOKE}get_weather">{dsml.PARAM}days" string="true">3'
            f'{dsml.PARAM_END}{dsml.PARAM}city" string="false">["a"]{dsml.PARAM_END}'
            f"{dsml.INVOKE_END}{dsml.SECTION_END}")
    res = parse_all_ways(text, dialect="dsml", start="content", tools=[])
    assert res.tool_calls[0].arguments == {"days": "3", "city": ["a"]}


def test_several_invokes_in_one_section():
    two = (f'{dsml.SECTION}\n{dsml.INVOKE}a">\n{dsml.INVOKE_END}\n{dsml.INVOKE}b">\n'
           f"{_param('x', 1)}{dsml.INVOKE_END}\n{dsml.SECTION_END}")
    res = parse_all_ways(two, dialect="dsml", start="content")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("a", {}), ("b", {"x": 1})]
    assert res.content == ""


def test_reader_directly():
    body = f'\n{dsml.INVOKE}f">\n{_param("k", "v")}{dsml.INVOKE_END}\n{dsml.SECTION_END}'
    p = read_all_ways(dsml, body + "tail")
    assert (p.name, p.arguments, p.end) == ("f", {"k": "v"}, len(body))
