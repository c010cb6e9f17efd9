"""engine/parse/shapes/name_json.py: the name-json shape (a call's name in markers, its arguments
one JSON object) through the parser, with held-out cases in the manner of other servers' parser
suites (vLLM's tests of its deepseekv3, kimi_k2 and mistral tool parsers: a single call, several,
text before them, spaced tokens, nested and tricky JSON, no call at all), each parsed whole, per
character and in random chunks, stream_tools off and on; a call quoted in a code fence or in
inline backticks is text; and a record no family registers, derived from a template of our
own, read end to end."""

from __future__ import annotations

import json

import pytest

from engine.chat.probe import derive
from engine.chat.probe_check import derived_family
from engine.parse.families import REGISTRY
from engine.parse.shapes.build import engine
from engine.parse.shapes.record import NAME_JSON, CallFormat
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

DS_B, DS_C, DS_S, DS_E, DS_Z = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
                                "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>")
K_S, K_C, K_A, K_E, K_Z = ("<|tool_calls_section_begin|>", "<|tool_call_begin|>",
                           "<|tool_call_argument_begin|>", "<|tool_call_end|>",
                           "<|tool_calls_section_end|>")
WEATHER = {"city": "Tokyo", "unit": "celsius"}
TRICKY = {"text": "a } and a { and \"quotes\" and [ARGS] and <｜tool▁call▁end｜>",
          "nested": {"list": [1, 2.5, None, True], "empty": {}}, "uni": "日本語 ✓"}


def _r1(name: str, args: dict) -> str:
    return f"{DS_C}function{DS_S}{name}\n```json\n{json.dumps(args)}\n```{DS_E}"


def _v31(name: str, args: dict) -> str:
    return f"{DS_C}{name}{DS_S}{json.dumps(args)}{DS_E}"


def _kimi(name: str, args: dict, i: int, gap: str = "") -> str:
    return f"{K_C}{gap}functions.{name}:{i}{gap}{K_A}{gap}{json.dumps(args)}{gap}{K_E}"


# (family, model output, the calls, the content)
CASES = {
    "deepseek v3, one call": (
        "deepseek", DS_B + _r1("get_weather", WEATHER) + DS_Z,
        [("get_weather", WEATHER)], ""),
    "deepseek v3, two calls, text before": (
        "deepseek", "Let me check both.\n" + DS_B + _r1("get_weather", WEATHER) + "\n"
        + _r1("get_time", {"tz": "Asia/Tokyo"}) + DS_Z,
        [("get_weather", WEATHER), ("get_time", {"tz": "Asia/Tokyo"})], "Let me check both."),
    "deepseek v3.1, tricky arguments": (
        "deepseek", DS_B + _v31("echo", TRICKY) + DS_Z, [("echo", TRICKY)], ""),
    "deepseek v3, no fence": (
        "deepseek", DS_B + f"{DS_C}function{DS_S}f\n{{\"a\": 1}}{DS_E}" + DS_Z,
        [("f", {"a": 1})], ""),
    "deepseek, no call": (
        "deepseek", "The weather tool takes a city.", [], "The weather tool takes a city."),
    "kimi k2, one call": (
        "kimi-k2", K_S + _kimi("get_weather", WEATHER, 0) + K_Z, [("get_weather", WEATHER)], ""),
    "kimi k2, spaced tokens, two calls": (
        "kimi-k2", K_S + " " + _kimi("get_weather", WEATHER, 0, " ") + " "
        + _kimi("get_weather", {"city": "Paris"}, 1, " ") + " " + K_Z,
        [("get_weather", WEATHER), ("get_weather", {"city": "Paris"})], ""),
    "kimi k2, tricky arguments, text before": (
        "kimi-k2", "Sure.\n" + K_S + _kimi("echo", TRICKY, 0) + K_Z, [("echo", TRICKY)], "Sure."),
    "mistral, one call": (
        "mistral", '[TOOL_CALLS]add_this_and_that[ARGS]{"a": 3.5, "b": 4}',
        [("add_this_and_that", {"a": 3.5, "b": 4})], ""),
    "mistral, two calls": (
        "mistral", '[TOOL_CALLS]add[ARGS]{"a": 3, "b": 4}[TOOL_CALLS]multiply[ARGS]{"a": 2}',
        [("add", {"a": 3, "b": 4}), ("multiply", {"a": 2})], ""),
    "mistral, call id, tricky arguments": (
        "mistral", "[TOOL_CALLS]echo[CALL_ID]a1b2c3d4e[ARGS]" + json.dumps(TRICKY),
        [("echo", TRICKY)], ""),
    "mistral, text then a call": (
        "mistral", 'I will add them.[TOOL_CALLS]add[ARGS]{"a": 1}', [("add", {"a": 1})],
        "I will add them."),
}


@pytest.mark.parametrize("case", CASES)
def test_held_out_outputs_read_at_every_chunking(case):
    family, text, calls, content = CASES[case]
    res = parse_all_ways(text, family=family, start="content")
    assert [(c.name, c.arguments) for c in res.tool_calls] == calls
    assert res.content == content
    assert anomalies(res) == {}


@pytest.mark.parametrize("family", ["deepseek", "kimi-k2", "mistral"])
def test_a_quoted_call_is_not_executed(family):
    """In a code fence or in inline backticks, a family's own call is text (as vLLM's tests
    want of a call the model only shows)."""
    text = REGISTRY[family].writer.write_calls(_calls([("get_weather", WEATHER)])).strip()
    for quoted in (f"Write it as `{text}` to call.", f"Like this:\n```\n{text}\n```\nDone."):
        res = parse_all_ways(quoted, family=family, start="content")
        assert res.tool_calls == () and res.content == quoted


def _calls(pairs):
    from engine.parse.events import ToolCall

    return [ToolCall(f"c{i}", n, a, i) for i, (n, a) in enumerate(pairs)]


# --- a record no family registers -------------------------------------------------------------

OWN = CallFormat(NAME_JSON, section="<calls>", section_end="</calls>", call="<call>",
                 name_end="<args>", call_end="</call>", sep="\n")


def _own_call(name: str, args: dict) -> str:
    eng = engine(OWN)
    return eng.open + eng.write_call(_calls([(name, args)])[0], 0) + eng.close


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_every_parser_rule_holds_for_a_derived_record(rule):
    """The seeds' rules (tests/engine/parse/family_rules.py) hold for a record's family as for
    the written ones: they are the parser's, not the shape's."""
    fam = derived_family(OWN, ("<think>", "</think>"))
    rule(Family(fam.name, _own_call,
                '<calls><call>get_weather<args>{"city": "Paris",}</call></calls>'))


def test_the_probe_derives_a_record_from_call_texts():
    """From the call texts a template renders to the record: prefix, index and id found."""
    one = '<|c|>functions.prism_alpha:0<|a|>{"prism_ka": "PRISM-V1"}<|e|>'
    two = one + '<|c|>functions.prism_beta:1<|a|>{"prism_kc": "PRISM-V2"}<|e|>'
    fmt = derive(one, one, two)
    assert (fmt.shape, fmt.call, fmt.name_prefix, fmt.index, fmt.name_end, fmt.call_end) == (
        NAME_JSON, "<|c|>", "functions.", ":", "<|a|>", "<|e|>")
    one = '[TC]prism_alpha[ID]prismc000[ARGS]{"prism_ka": "PRISM-V1"}'
    fmt = derive(one, one, one + '[TC]prism_beta[ID]prismc001[ARGS]{"prism_kc": "PRISM-V2"}')
    assert (fmt.call, fmt.id_tag, fmt.name_end, fmt.call_end) == ("[TC]", "[ID]", "[ARGS]", "")
    with pytest.raises(ValueError, match="no opener"):
        derive('prism_alpha\n{"prism_ka": "PRISM-V1"}', "", "")
