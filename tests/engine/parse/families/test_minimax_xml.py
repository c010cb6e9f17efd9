"""engine/parse/families/minimax_xml.py (MiniMax-M2): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on."""

from __future__ import annotations

import json

import pytest

from engine.parse.families import minimax_xml
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import parse_all_ways


def _params(args: dict) -> str:
    return "".join(f'<parameter name="{k}">{v if isinstance(v, str) else json.dumps(v)}'
                   "</parameter>\n" for k, v in args.items())


def call(name: str, args: dict) -> str:
    return f'<minimax:tool_call>\n<invoke name="{name}">\n{_params(args)}</invoke>\n' \
           "</minimax:tool_call>"


def typed(key: str, raw: str) -> str:
    return call("get_weather", {key: raw})


FAMILY = Family("minimax-xml", call,
                '<minimax:tool_call>\n<invoke name="get_weather">\n<param>x</param>\n</invoke>',
                typed=typed)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


def test_several_invokes_in_one_section():
    two = ('<minimax:tool_call>\n<invoke name="a">\n</invoke>\n<invoke name="b">\n'
           '<parameter name="x">1</parameter>\n</invoke>\n</minimax:tool_call>')
    res = parse_all_ways(two, family="minimax-xml", start="content")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("a", {}), ("b", {"x": 1})]


def test_value_keeps_inner_newlines_and_spaces():
    text = call("get_weather", {"city": "\n  New\nYork  \n"})
    res = parse_all_ways(text, family="minimax-xml", start="content")
    assert res.tool_calls[0].arguments == {"city": "  New\nYork  "}


def test_reader_directly():
    body = '\n<invoke name="f">\n<parameter name="k">v</parameter>\n</invoke>\n' \
           "</minimax:tool_call>"
    p = read_all_ways(minimax_xml, body + "tail")
    assert (p.name, p.arguments, p.end) == ("f", {"k": "v"}, len(body))
