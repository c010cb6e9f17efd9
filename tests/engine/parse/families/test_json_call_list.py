"""engine/parse/families/json_call_list.py (bare JSON call lists): every parser rule
(tests/engine/parse/family_rules.py) and the cases of other servers' parsers, each parsed at
every chunking, stream_tools off and on."""

from __future__ import annotations

import json

import pytest

from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways


def call(name: str, args: dict) -> str:
    return json.dumps([{"name": name, "arguments": args}])


FAMILY = Family("json-list", call, '[{"name": "get_weather", "arguments": [1]}]', think=None)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


def _calls(text: str, family: str = "json-list"):
    res = parse_all_ways(text, family=family, start="content")
    return [(c.name, c.arguments) for c in res.tool_calls], res


def test_whole_reply_and_after_text():
    """The list as the whole reply and after text, two calls (the shape of llama.cpp's
    test-chat.cpp generic and Mistral list cases), `parameters` and either key order."""
    text = ('[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
            '{"arguments": {"tz": "UTC"}, "name": "get_time"}, '
            '{"name": "ping", "parameters": {}}]')
    got, res = _calls(text)
    assert got == [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "UTC"}),
                   ("ping", {})]
    assert res.content == "" and not anomalies(res)
    got, res = _calls("Let me check.\n" + text[: text.index(", {")] + "]")
    assert got == [("get_weather", {"city": "Paris"})] and res.content == "Let me check."


def test_json_in_prose_stays_text():
    for text in ('[1, 2, 3]', '[{"city": "Paris"}]', 'A list: [{"name": "x", "arguments": {}}]'):
        got, res = _calls(text)
        assert got == [] and res.content == text and not anomalies(res), text


def test_mistral_keys_in_either_order():
    """A Mistral list whose objects name the arguments first (vLLM's mistral parser tests
    write both orders)."""
    text = '[TOOL_CALLS][{"arguments": {"city": "Paris"}, "name": "get_weather"}]'
    got, res = _calls(text, "mistral")
    assert got == [("get_weather", {"city": "Paris"})] and not anomalies(res)
