"""engine/parse/families/firefunction.py (FireFunction v2): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The outputs come from the family's real template
(/work/shared/templates/fireworks-ai-llama-3-firefunction-v2.jinja, rendered with the
`functions` and `datetime` variables llama.cpp passes it) and from llama.cpp's
tests/test-chat.cpp (its FireFunction v2 case: ` functools[{"name": "special_function",
"arguments": {"arg1": 1}}]`); vLLM and SGLang have no FireFunction parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.chat.detect import detect, start_state
from engine.chat.packs import resolve_pack
from engine.chat.request import Message
from engine.chat.template import ChatTemplate
from engine.parse.events import ToolCall, merge, result_of
from engine.parse.families import REGISTRY
from engine.parse.families import firefunction as ff
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, check_invariants, parse_all_ways, run
from tests.engine.parse.test_parser_properties import SHARED_PIECES, TOOLS, chunkings

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
TEMPLATE = "fireworks-ai-llama-3-firefunction-v2.jinja"
needs_templates = pytest.mark.skipif(not SHARED.is_dir(),
                                     reason="needs ../shared/templates (the real templates)")


def obj(name: str, args: dict) -> str:
    return json.dumps({"name": name, "arguments": args})


def call(name: str, args: dict) -> str:
    return f" functools[{obj(name, args)}]"


FAMILY = Family("firefunction", call,
                ' functools[{"name": "get_weather", "arguments": [1]}]', think=None)


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family="firefunction", **kw)


def calls(res) -> list:
    return [(c.name, c.arguments) for c in res.tool_calls]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# The family's own pieces mixed with quoting and JSON ones (tests/engine/parse/
# test_parser_properties.py): every rule meets every chunking.
PIECES = [
    " functools[", "functools[", " functools", "functools", '{"name": "f", "arguments": {"a": 1}}',
    '{"name"', ': "f", ', '"arguments": ', '{"a": [1, "x"]}', ", ", ",", "]", "[", "}",
    "<think>", "</think>",
]


@given(text=st.lists(st.sampled_from(SHARED_PIECES + PIECES), max_size=40).map("".join),
       chunks=chunkings, start=st.sampled_from(["reasoning", "content"]),
       tools=st.sampled_from([(), TOOLS]), stream=st.booleans())
def test_chunking_never_changes_events(text, chunks, start, tools, stream):
    opts = {"start": start, "family": "firefunction", "tools": tools}
    whole = run(text, stream_tools=stream, **opts)
    pieces = run(text, chunks, stream_tools=stream, **opts)
    ones = run(text, [1] * len(text), stream_tools=stream, **opts)
    for events in (whole, pieces, ones):
        check_invariants(text, events)
    assert merge(pieces) == merge(whole) == merge(ones)
    assert result_of(whole) == result_of(run(text, stream_tools=not stream, **opts))


def test_llama_cpp_case():
    res = parse(' functools[{"name": "special_function", "arguments": {"arg1": 1}}]')
    assert calls(res) == [("special_function", {"arg1": 1})]
    assert res.content == "" and not anomalies(res)


def test_the_list_after_the_answer_and_its_space():
    res = parse(f"Checking. functools[{obj('a', {'x': 1})}, {obj('b', {})}]")
    assert res.content == "Checking." and calls(res) == [("a", {"x": 1}), ("b", {})]
    assert [c.index for c in res.tool_calls] == [0, 1] and not anomalies(res)


def test_without_the_space_at_the_start_and_after_a_line():
    assert calls(parse(f"functools[{obj('a', {})}]")) == [("a", {})]
    res = parse(f"Checking.\nfunctools[{obj('a', {})}]")
    assert res.content == "Checking." and calls(res) == [("a", {})]


def test_parameters_and_brackets_inside_strings():
    args = {"q": "], [x]"}
    res = parse(f' functools[{{"name": "s", "parameters": {json.dumps(args)}}}]')
    assert calls(res) == [("s", args)]


def test_text_after_the_list_is_the_answers():
    res = parse(f"{call('a', {})} Anything else?")
    assert calls(res) == [("a", {})] and res.content == " Anything else?"


def test_an_unclosed_list_of_whole_calls_is_accepted():
    res = parse(f" functools[{obj('a', {'x': 1})}")
    assert calls(res) == [("a", {"x": 1})] and not anomalies(res)


def test_a_broken_element_is_text_after_the_good_ones():
    text = f' functools[{obj("a", {})}, {{"name": 3}}]'
    res = parse(text)
    assert calls(res) == [("a", {})]
    assert anomalies(res) == {"malformed_call": 1} and res.content.endswith('{"name": 3}]')


def test_functools_in_prose_is_text():
    for text in ("import functools\nfunctools.partial(f)", "Use functools[0] here.",
                 'Lists like functools["name"] are odd.', "`functools[{\"name\": 1}]`"):
        res = parse(text)
        assert res.tool_calls == () and res.content == text and not anomalies(res), text


def test_think_tags_are_plain_text():
    res = parse("<think>hm</think> ok")
    assert res.content == "<think>hm</think> ok" and res.reasoning == ""


def test_reader_directly():
    p = read_all_ways(ff, f'{obj("f", {"k": 1})} ,  {obj("g", {})}]')
    assert (p.name, p.arguments) == ("f", {"k": 1})
    assert p.end == len(f'{obj("f", {"k": 1})} ,') and p.follow() is not None
    p = read_all_ways(ff, f'{obj("g", {})} ] tail')
    assert p.end == len(f'{obj("g", {})} ]') and p.follow() is None


def test_the_writer_writes_what_the_template_writes():
    out = REGISTRY["firefunction"].writer.write(
        None, "a", [ToolCall("c0", "f", {"x": 1}, 0), ToolCall("c1", "g", {}, 1)])
    assert out == ('a functools[{"name": "f", "arguments": {"x": 1}}, '
                   '{"name": "g", "arguments": {}}]')


# --- the real template -------------------------------------------------------------------------

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                           "days": {"type": "integer"}}}}}
TWO = (("get_weather", {"city": "Paris", "days": 2}), ("get_weather", {"city": "Lyon"}))
ASK = Message("user", "Weather in Paris for two days, and Lyon?")
# What llama.cpp hands the template (common_chat_params_init_firefunction_v2)
LLAMA_CPP = {"functions": json.dumps([WEATHER], indent=2), "datetime": "Jan 29 2025 13:00:00 GMT"}


@needs_templates
def test_the_real_template_is_detected_as_firefunction_not_llama3():
    assert detect((SHARED / TEMPLATE).read_text("utf-8")).family == "firefunction"


@needs_templates
def test_no_other_real_template_is_detected_as_firefunction():
    for path in sorted(SHARED.glob("*.jinja")):
        if path.name != TEMPLATE:
            assert detect(path.read_text("utf-8")).family != "firefunction", path.name
    for name in ("meta-llama-Llama-3.1-8B-Instruct.jinja",
                 "meta-llama-Llama-3.3-70B-Instruct.jinja"):
        assert detect((SHARED / name).read_text("utf-8")).family == "llama3-json"


@needs_templates
def test_the_real_template_gets_the_variables_llama_cpp_gives_it():
    """It reads `functions` and `datetime` and fails without them (in transformers too): the
    renderer gives them as llama.cpp does, the date without the time."""
    from datetime import datetime

    tpl = ChatTemplate((SHARED / TEMPLATE).read_text("utf-8"), bos_token="<|begin_of_text|>")
    today = datetime.now().strftime("%b %d %Y")
    ours = tpl.render([ASK], tools=[WEATHER])
    assert ours == tpl.render([ASK], tools=[WEATHER], extra={**LLAMA_CPP, "datetime": today})
    assert f"Available functions as JSON spec:\n{LLAMA_CPP['functions']}\nToday is {today}." in ours
    assert "Available functions as JSON spec:\n\nToday is" in tpl.render([ASK])  # no tools


@needs_templates
def test_what_the_real_template_writes_for_two_calls_is_read_back():
    tpl = ChatTemplate((SHARED / TEMPLATE).read_text("utf-8"), bos_token="<|begin_of_text|>")
    turn = Message("assistant", "Checking.", tool_calls=tuple(
        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(TWO)))
    head = tpl.render([ASK], tools=[WEATHER], extra=LLAMA_CPP)
    whole = tpl.render([ASK, turn], tools=[WEATHER], extra=LLAMA_CPP)
    opener = "<|start_header_id|>assistant<|end_header_id|>\n\n"
    assert head.endswith(opener) and start_state(head, "firefunction") == "content"
    # the original writes the assistant header after every conversation: the turn lies between
    at = len(head)
    text = whole[at:whole.index("<|eot_id|>", at)]
    res = parse(text, tools=[WEATHER])
    assert res.content == "Checking." and calls(res) == list(TWO) and not anomalies(res)
    assert text == REGISTRY["firefunction"].writer.write(
        None, "Checking.", [ToolCall(f"c{i}", n, a, i) for i, (n, a) in enumerate(TWO)])


@needs_templates
def test_the_pack_template_is_the_real_one_with_its_variables_set():
    pack = resolve_pack("firefunction", require_model=False)
    real = ChatTemplate((SHARED / TEMPLATE).read_text("utf-8"), bos_token="<|begin_of_text|>")
    today = {"datetime": "Jan 29 2025 13:00:00 GMT"}
    for tools in ([WEATHER], []):
        given = {**today, "functions": json.dumps(tools, indent=2) if tools else ""}
        ours = pack.chat_template().render([ASK], tools=tools, extra=today)
        assert ours == real.render([ASK], tools=tools, extra=given)
    # the date is today's unless given; the generation prompt only when asked
    assert "Today is " in pack.chat_template().render([ASK])
    bare = pack.chat_template().render([ASK], add_generation_prompt=False)
    assert bare.endswith("<|eot_id|>")
