"""engine/parse/families/kimi_k2.py (Kimi K2, K2-Thinking): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on."""

from __future__ import annotations

import json

import pytest

from engine.parse.families import kimi_k2 as k
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import parse_all_ways


def one(name: str, args: dict, idx: int = 0) -> str:
    return f"{k.CALL}functions.{name}:{idx}{k.ARG}{json.dumps(args)}{k.CALL_END}"


def call(name: str, args: dict) -> str:
    return k.SECTION + one(name, args) + k.SECTION_END


FAMILY = Family("kimi-k2", call, k.SECTION + k.CALL + "functions.get_weather:0" + k.ARG
                + '{"city": "Paris",}' + k.CALL_END + k.SECTION_END)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


def test_several_calls_in_one_section():
    text = k.SECTION + one("a", {"x": 1}, 0) + one("b", {}, 1) + k.SECTION_END + "\nDone."
    res = parse_all_ways(text, dialect="kimi-k2", start="content")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("a", {"x": 1}), ("b", {})]
    assert res.content == "Done."


@pytest.mark.parametrize(("call_id", "name"), [
    ("functions.get_weather:0", "get_weather"), ("get_weather:12", "get_weather"),
    ("functions.ns.tool", "ns.tool"), ("a:b", "a:b"),
])
def test_name_of_the_call_id(call_id, name):
    assert k.name_of(call_id) == name


def test_singular_section_opener():
    text = k.SECTION_ALT + one("f", {}) + "<|tool_call_section_end|>"
    res = parse_all_ways(text, dialect="kimi-k2", start="content")
    assert [c.name for c in res.tool_calls] == ["f"] and res.content == ""


def test_reader_directly():
    body = one("f", {"q": [1]}) + " " + k.SECTION_END
    p = read_all_ways(k, body + "tail")
    assert (p.name, p.arguments, p.end) == ("f", {"q": [1]}, len(body))


def test_the_models_own_call_id_is_kept_end_to_end():
    """Kimi's id `functions.NAME:IDX` is the call's id (issue 19, item 3): its template writes
    it back in the history, so the next turn shows the model the id it wrote."""
    text = (k.SECTION + k.CALL + "functions.get_weather:3" + k.ARG + '{"city": "Paris"}'
            + k.CALL_END + k.SECTION_END)
    res = parse_all_ways(text, dialect="kimi-k2", start="content")
    assert [(c.id, c.name) for c in res.tool_calls] == [("functions.get_weather:3",
                                                          "get_weather")]
