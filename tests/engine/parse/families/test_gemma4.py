"""engine/parse/families/gemma4.py (Gemma 4): every parser rule
(tests/engine/parse/family_rules.py), the family's value syntax and its own cases, each parsed at
every chunking, stream_tools off and on."""

from __future__ import annotations

import pytest

from engine.parse.families import gemma4
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import parse_all_ways

Q = gemma4.QUOTE


def fmt(v) -> str:
    """A value in Gemma's syntax."""
    if isinstance(v, str):
        return Q + v + Q
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{fmt(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(fmt(x) for x in v) + "]"
    return str(v)


def call(name: str, args: dict) -> str:
    return f"{gemma4.CALL}call:{name}{fmt(args)}{gemma4.CALL_END}"


FAMILY = Family("gemma4", call, f"{gemma4.CALL}call:get_weather{{city:Paris}}{gemma4.CALL_END}",
                think=(gemma4.THOUGHT, gemma4.THOUGHT_END))


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


def test_nested_values_and_quoted_strings_with_any_character():
    args = {"s": 'a "quote", a } brace and <|tool>', "n": -1.5, "i": 7, "b": False, "z": None,
            "l": [1, {"k": ["x"]}], "o": {"deep": {"er": True}}}
    res = parse_all_ways(call("f", args), dialect="gemma4", start="content")
    assert res.tool_calls[0].arguments == args


def test_json_strings_and_quoted_keys_are_read_too():
    text = f'{gemma4.CALL}call:f{{"a b":"x\\n", {Q}c{Q}: 1}}{gemma4.CALL_END}'
    res = parse_all_ways(text, dialect="gemma4", start="content")
    assert res.tool_calls[0].arguments == {"a b": "x\n", "c": 1}


def test_thought_then_call():
    text = f"{gemma4.THOUGHT}\nNeed data.{gemma4.THOUGHT_END}Checking.\n" + call("f", {"a": 1})
    res = parse_all_ways(text, dialect="gemma4", start="content")
    assert (res.reasoning, res.content) == ("Need data.", "Checking.")
    assert [c.arguments for c in res.tool_calls] == [{"a": 1}]


@pytest.mark.parametrize(("raw", "why"), [
    ("{a:}", "bad arguments: unexpected '}'"),
    ("{a:1 b:2}", "bad arguments: expected , or }"),
    ("[1]", "bad arguments: arguments are not an object"),
    (f"{{a:{Q}x}}", "bad arguments: unclosed string"),
])
def test_reader_refuses_what_is_not_gemma_syntax(raw, why):
    p = read_all_ways(gemma4, f"call:f{raw}{gemma4.CALL_END}")
    assert p.error == why and p.resume == len("call:f")


def test_reader_accepts_a_complete_object_at_the_end_of_output():
    p = read_all_ways(gemma4, "call:f{a:1}\n")
    assert (p.done, p.arguments, p.end) == (True, {"a": 1}, len("call:f{a:1}"))
