"""engine/parse/families/minimax_m1.py (MiniMax-M1): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The outputs come from the family's real template
(/work/shared/templates/MiniMax-M1.jinja) and from vLLM's tests of its `minimax` tool parser
(tests/tool_parsers/test_minimax_tool_parser.py: one call, several, text before the section, an
unclosed section, calls inside `<think>`, a bad line, a missing name or arguments, multiline
JSON); llama.cpp has no MiniMax-M1 format."""

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
from engine.parse.families import minimax_m1 as m1
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, check_invariants, parse_all_ways, run
from tests.engine.parse.test_parser_properties import SHARED_PIECES, TOOLS, chunkings

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
TEMPLATE = "MiniMax-M1.jinja"
needs_templates = pytest.mark.skipif(not SHARED.is_dir(),
                                     reason="needs ../shared/templates (the real templates)")


def obj(name: str, args: dict) -> str:
    return json.dumps({"name": name, "arguments": args})


def call(name: str, args: dict) -> str:
    return f"<tool_calls>\n{obj(name, args)}\n</tool_calls>"


FAMILY = Family("minimax-m1", call,
                '<tool_calls>\n{"name": "get_weather", "arguments": [1]}\n</tool_calls>')


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family="minimax-m1", **kw)


def calls(res) -> list:
    return [(c.name, c.arguments) for c in res.tool_calls]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# The family's own pieces mixed with quoting and JSON ones (tests/engine/parse/
# test_parser_properties.py): every rule meets every chunking.
PIECES = [
    "<think>", "</think>", "<tool_calls>", "</tool_calls>", "<tool_call", "</tool_c",
    '{"name": "f", "arguments": {"a": [1, "x"]}}', '{"name": "f"}', '{"name"', ': "f", ',
    '"arguments": ', '{"a": 1}', "}", "{", "\n{", "<think",
]


@given(text=st.lists(st.sampled_from(SHARED_PIECES + PIECES), max_size=40).map("".join),
       chunks=chunkings, start=st.sampled_from(["reasoning", "content"]),
       tools=st.sampled_from([(), TOOLS]), stream=st.booleans())
def test_chunking_never_changes_events(text, chunks, start, tools, stream):
    opts = {"start": start, "family": "minimax-m1", "tools": tools}
    whole = run(text, stream_tools=stream, **opts)
    pieces = run(text, chunks, stream_tools=stream, **opts)
    ones = run(text, [1] * len(text), stream_tools=stream, **opts)
    for events in (whole, pieces, ones):
        check_invariants(text, events)
    assert merge(pieces) == merge(whole) == merge(ones)
    assert result_of(whole) == result_of(run(text, stream_tools=not stream, **opts))


# --- vLLM's cases (tests/tool_parsers/test_minimax_tool_parser.py) -----------------------------

DALLAS = {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}
ORLANDO = {"city": "Orlando", "state": "FL", "unit": "fahrenheit"}


def test_one_call_and_several_in_one_section():
    res = parse(f"<tool_calls>\n{obj('get_current_weather', DALLAS)}\n</tool_calls>")
    assert calls(res) == [("get_current_weather", DALLAS)] and res.content == ""
    res = parse(f"<tool_calls>\n{obj('get_current_weather', DALLAS)}\n"
                f"{obj('get_current_weather', ORLANDO)}\n</tool_calls>")
    assert calls(res) == [("get_current_weather", DALLAS), ("get_current_weather", ORLANDO)]
    assert [c.index for c in res.tool_calls] == [0, 1] and not anomalies(res)


def test_text_before_the_section_on_the_same_line():
    res = parse("I'll help you check the weather. <tool_calls>\n"
                f"{obj('get_current_weather', {'city': 'Seattle'})}\n</tool_calls>")
    assert res.content == "I'll help you check the weather. "
    assert calls(res) == [("get_current_weather", {"city": "Seattle"})]


def test_a_section_left_open_at_the_end_is_accepted():
    res = parse(f"<tool_calls>\n{obj('get_current_weather', {'city': 'Boston'})}")
    assert calls(res) == [("get_current_weather", {"city": "Boston"})] and not anomalies(res)


def test_a_section_mid_sentence_in_the_thinking_stays_reasoning():
    # vLLM drops such a call; here it is quoted markup, kept as the reasoning's text
    inner = f"Let me think about this. <tool_calls>\n{obj('fake_tool', {'p': 'v'})}\n</tool_calls>"
    res = parse(f"<think>{inner} This should stay.</think>\n\nI'll help. "
                f"<tool_calls>\n{obj('get_current_weather', {'city': 'Seattle'})}\n</tool_calls>")
    assert res.reasoning == inner + " This should stay."
    assert res.content == "I'll help. "
    assert calls(res) == [("get_current_weather", {"city": "Seattle"})]


def test_a_section_at_a_line_start_in_the_thinking_ends_it():
    res = parse(f"<think>\nI need the weather.\n{call('get_weather', {'city': 'Paris'})}")
    assert res.reasoning == "I need the weather."
    assert calls(res) == [("get_weather", {"city": "Paris"})]
    assert anomalies(res) == {"implicit_reasoning_end": 1}


def test_a_line_that_is_not_a_call_ends_the_section_as_text():
    # vLLM skips the bad line and reads on; here nothing is dropped silently
    bad = "{invalid json here}"
    text = (f"<tool_calls>\n{obj('valid_tool', {'city': 'Seattle'})}\n{bad}\n"
            f"{obj('another_valid_tool', {'param': 'value'})}\n</tool_calls>")
    res = parse(text)
    assert calls(res) == [("valid_tool", {"city": "Seattle"})]
    assert anomalies(res) == {"malformed_call": 1}
    assert res.content.startswith(bad)


def test_missing_arguments_are_empty_and_a_missing_name_is_no_call():
    res = parse('<tool_calls>\n{"name": "missing_args"}\n</tool_calls>')
    assert calls(res) == [("missing_args", {})]
    # an object that does not begin with "name" is no call at all: the section stays text
    text = '<tool_calls>\n{"arguments": {"city": "Portland"}}\n</tool_calls>'
    res = parse(text)
    assert res.tool_calls == () and res.content == text and not anomalies(res)


def test_an_object_may_span_lines():
    text = ('<tool_calls>\n{\n  "name": "get_current_weather",\n  "arguments": {\n'
            '    "city": "New York",\n    "unit": "celsius"\n  }\n}\n</tool_calls>')
    res = parse(text)
    assert calls(res) == [("get_current_weather", {"city": "New York", "unit": "celsius"})]


def test_closers_inside_strings_and_text_after_the_section():
    args = {"q": "}</tool_calls>{"}
    res = parse(f"Sure.\n<tool_calls>\n{obj('search', args)}\n</tool_calls>\nDone.")
    assert calls(res) == [("search", args)] and res.content == "Sure.Done."


def test_the_model_opens_its_own_thinking():
    res = parse("<think>\nThe user greets me.\n</think>\n\nHello!")
    assert (res.reasoning, res.content) == ("The user greets me.", "Hello!")


def test_reader_directly():
    body = f'\n{obj("f", {"a": 1})}\n{obj("g", {})}\n</tool_calls>'
    p = read_all_ways(m1, body)
    assert (p.name, p.arguments) == ("f", {"a": 1})
    assert p.end == len(f'\n{obj("f", {"a": 1})}\n') and p.follow() is not None
    p = read_all_ways(m1, f"\n{obj('g', {})}\n</tool_calls> tail")
    assert p.end == len(f"\n{obj('g', {})}\n</tool_calls>") and p.follow() is None


def test_the_writer_writes_what_the_template_writes():
    out = REGISTRY["minimax-m1"].writer.write(
        "r", "a", [ToolCall("c0", "get_weather", {"city": "Paris"}, 0),
                   ToolCall("c1", "get_weather", {"city": "Lyon"}, 1)])
    assert out == ("<think>\nr\n</think>\n\na\n<tool_calls>\n"
                   '{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                   '{"name": "get_weather", "arguments": {"city": "Lyon"}}\n</tool_calls>')


# --- the real template -------------------------------------------------------------------------

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                           "days": {"type": "integer"}}}}}
TWO = (("get_weather", {"city": "Paris", "days": 2}), ("get_weather", {"city": "Lyon"}))
ASK = Message("user", "Weather in Paris for two days, and Lyon?")


@needs_templates
def test_the_real_template_is_detected_as_minimax_m1():
    assert detect((SHARED / TEMPLATE).read_text("utf-8")).family == "minimax-m1"


@needs_templates
def test_no_other_real_template_is_detected_as_minimax_m1():
    # Apriel's templates write `<tool_calls>[…]` too: not this family
    for path in sorted(SHARED.glob("*.jinja")):
        if path.name != TEMPLATE:
            assert detect(path.read_text("utf-8")).family != "minimax-m1", path.name
    assert detect((SHARED / "MiniMax-M2.jinja").read_text("utf-8")).family == "minimax-xml"


@needs_templates
def test_what_the_real_template_writes_for_two_calls_is_read_back():
    tpl = ChatTemplate((SHARED / TEMPLATE).read_text("utf-8"))
    turn = Message("assistant", "", tool_calls=tuple(
        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(TWO)))
    prompt = tpl.render([ASK], tools=[WEATHER])
    whole = tpl.render([ASK, turn], tools=[WEATHER], add_generation_prompt=False)
    assert prompt.endswith("<beginning_of_sentence>ai name=assistant\n")
    assert start_state(prompt, "minimax-m1") == "content"  # the model opens <think> itself
    text = whole[len(prompt):].removesuffix("<end_of_sentence>\n")
    res = parse(text, start=start_state(prompt, "minimax-m1"), tools=[WEATHER])
    assert calls(res) == list(TWO) and res.content == "" and not anomalies(res)
    # what the family's writer writes is what the template wrote
    written = REGISTRY["minimax-m1"].writer.write_calls(
        [ToolCall(f"c{i}", n, a, i) for i, (n, a) in enumerate(TWO)])
    assert text == written


@needs_templates
def test_the_pack_template_is_the_real_one_plus_later_system_messages():
    pack = resolve_pack("minimax-m1", require_model=False)
    real = (SHARED / TEMPLATE).read_text("utf-8")
    own = ChatTemplate(real)
    chat = [Message("system", "Be brief."), ASK]
    assert pack.chat_template().render(chat, tools=[WEATHER]) == own.render(chat, tools=[WEATHER])
    later = [*chat, Message("assistant", "Sunny."), Message("system", "Now in French."),
             Message("user", "Merci")]
    assert "Now in French." not in own.render(later)  # MiniMax's own template drops it
    assert ("<beginning_of_sentence>system ai_setting=assistant\nNow in French."
            "<end_of_sentence>\n") in pack.chat_template().render(later)
