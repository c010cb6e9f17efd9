"""engine/parse/families/functionary_v3_1.py (Functionary v3.1): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The outputs come from the family's real template
(/work/shared/templates/meetkai-functionary-medium-v3.1.jinja) and from llama.cpp's
tests/test-chat.cpp (its Functionary v3.1 cases: `<function=special_function>{"arg1": 1}
</function>`, whole and partial, and `<|python_tag|>` code); vLLM and SGLang have no
Functionary parser."""

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
from engine.parse.families import functionary_v3_1 as v31
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, check_invariants, parse_all_ways, run
from tests.engine.parse.test_parser_properties import SHARED_PIECES, TOOLS, chunkings

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
TEMPLATE = "meetkai-functionary-medium-v3.1.jinja"
needs_templates = pytest.mark.skipif(not SHARED.is_dir(),
                                     reason="needs ../shared/templates (the real templates)")


def call(name: str, args: dict) -> str:
    return f"<function={name}>{json.dumps(args)}</function>"


FAMILY = Family("functionary-v3.1", call, '<function=get_weather>{"city": "Paris",}</function>',
                think=None)


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family="functionary-v3.1", **kw)


def calls(res) -> list:
    return [(c.name, c.arguments) for c in res.tool_calls]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# The family's own pieces mixed with quoting and JSON ones (tests/engine/parse/
# test_parser_properties.py): every rule meets every chunking.
PIECES = [
    "<function=", "<function=f>", "f>", "</function>", "</func", "<|python_tag|>", "<|py",
    '{"a": [1, "x"]}', '{"a": ', "}", "print(1)", "<parameter=a>", "<think>", "</think>",
]


@given(text=st.lists(st.sampled_from(SHARED_PIECES + PIECES), max_size=40).map("".join),
       chunks=chunkings, start=st.sampled_from(["reasoning", "content"]),
       tools=st.sampled_from([(), TOOLS]), stream=st.booleans())
def test_chunking_never_changes_events(text, chunks, start, tools, stream):
    opts = {"start": start, "family": "functionary-v3.1", "tools": tools}
    whole = run(text, stream_tools=stream, **opts)
    pieces = run(text, chunks, stream_tools=stream, **opts)
    ones = run(text, [1] * len(text), stream_tools=stream, **opts)
    for events in (whole, pieces, ones):
        check_invariants(text, events)
    assert merge(pieces) == merge(whole) == merge(ones)
    assert result_of(whole) == result_of(run(text, stream_tools=not stream, **opts))


def test_llama_cpp_cases():
    res = parse('<function=special_function>{"arg1": 1}</function>')
    assert calls(res) == [("special_function", {"arg1": 1})] and res.content == ""
    # llama.cpp's partial case: the `<` of a closer still coming; at the end it is text
    res = parse('<function=special_function>{"arg1": 1}<')
    assert calls(res) == [("special_function", {"arg1": 1})] and res.content == "<"


def test_calls_back_to_back_after_the_answer():
    res = parse(f"Checking.{call('a', {'x': 1})}{call('b', {})}")
    assert res.content == "Checking." and calls(res) == [("a", {"x": 1}), ("b", {})]
    assert not anomalies(res)


def test_closers_inside_strings():
    args = {"q": "</function><function=x>{}"}
    res = parse(call("search", args))
    assert calls(res) == [("search", args)]


def test_python_tag_code_runs_to_the_end():
    code = "import math\nprint(math.pi)  # {not json}\n"
    res = parse("Let me compute.<|python_tag|>" + code)
    assert res.content == "Let me compute." and calls(res) == [("python", {"code": code})]
    res = parse("<|python_tag|>\n" + code)  # whitespace after the tag is not code
    assert calls(res) == [("python", {"code": code})]


def test_python_tag_with_the_templates_json_arguments():
    res = parse('<|python_tag|>{"code": "print(1)"}')
    assert calls(res) == [("python", {"code": "print(1)"})] and not anomalies(res)


def test_a_python_tag_with_nothing_after_it_is_text():
    res = parse("<|python_tag|>")
    assert res.tool_calls == () and res.content == "<|python_tag|>"


def test_qwen_xml_bodies_are_not_this_familys_calls():
    text = "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>"
    res = parse(text)
    assert res.tool_calls == () and res.content == text
    # and the Qwen XML reader still reads them, as before
    qwen = parse_all_ways("<tool_call>\n" + text + "\n</tool_call>", family="qwen-xml",
                          start="content")
    assert calls(qwen) == [("get_weather", {"city": "Paris"})]


def test_a_name_then_something_else_is_text():
    for text in ("<function=f> is the opener", "<function=f>[1]</function>", "<function=>{}"):
        res = parse(text)
        assert res.tool_calls == () and res.content == text, text


def test_reader_directly():
    p = read_all_ways(v31, 'get_weather>{"city": "Paris"} </function>tail')
    assert (p.name, p.arguments) == ("get_weather", {"city": "Paris"})
    assert p.end == len('get_weather>{"city": "Paris"} </function>')
    p = read_all_ways(v31, "<|python_tag|>print('hey')")
    assert (p.name, p.arguments) == ("python", {"code": "print('hey')"})


def test_the_writer_writes_what_the_template_writes():
    out = REGISTRY["functionary-v3.1"].writer.write(
        None, "a", [ToolCall("c0", "f", {"x": 1}, 0), ToolCall("c1", "python", {"code": "1"}, 1)])
    assert out == 'a<function=f>{"x": 1}</function><|python_tag|>{"code": "1"}'


# --- the real template -------------------------------------------------------------------------

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                           "days": {"type": "integer"}}}}}
TWO = (("get_weather", {"city": "Paris", "days": 2}), ("get_weather", {"city": "Lyon"}))
ASK = Message("user", "Weather in Paris for two days, and Lyon?")


@needs_templates
def test_the_real_template_is_detected_as_functionary_v3_1():
    # it writes `<function=` (as Qwen XML's templates do) and `<|start_header_id|>` (as
    # Llama 3's do): neither family takes it
    assert detect((SHARED / TEMPLATE).read_text("utf-8")).family == "functionary-v3.1"


@needs_templates
def test_no_other_real_template_is_detected_as_functionary_v3_1():
    for path in sorted(SHARED.glob("*.jinja")):
        if path.name != TEMPLATE:
            assert detect(path.read_text("utf-8")).family != "functionary-v3.1", path.name
    for name in ("Qwen3-Coder.jinja", "Qwen3.5-4B.jinja"):
        assert detect((SHARED / name).read_text("utf-8")).family == "qwen-xml"


@needs_templates
def test_what_the_real_template_writes_for_two_calls_is_read_back():
    tpl = ChatTemplate((SHARED / TEMPLATE).read_text("utf-8"), bos_token="<|begin_of_text|>")
    turn = Message("assistant", "Checking.", tool_calls=tuple(
        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(TWO)))
    prompt = tpl.render([ASK], tools=[WEATHER])
    whole = tpl.render([ASK, turn], tools=[WEATHER], add_generation_prompt=False)
    assert start_state(prompt, "functionary-v3.1") == "content"
    text = whole[len(prompt):].removesuffix("<|eom_id|>")
    res = parse(text, tools=[WEATHER])
    assert res.content == "Checking." and calls(res) == list(TWO) and not anomalies(res)
    assert text == REGISTRY["functionary-v3.1"].writer.write(
        None, "Checking.", [ToolCall(f"c{i}", n, a, i) for i, (n, a) in enumerate(TWO)])


@needs_templates
def test_the_pack_template_renders_as_the_real_one():
    pack = resolve_pack("functionary-v3.1", require_model=False)
    real = ChatTemplate((SHARED / TEMPLATE).read_text("utf-8"), bos_token="<|begin_of_text|>")
    for tools in ([WEATHER], []):
        chat = [Message("system", "Be brief."), ASK]
        assert pack.chat_template().render(chat, tools=tools) == real.render(chat, tools=tools)
