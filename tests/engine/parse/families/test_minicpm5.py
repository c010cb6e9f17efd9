"""engine/parse/families/minicpm5.py (MiniCPM5): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The cases come from the real template (openbmb-MiniCPM5-1B.jinja, the
pack's minicpm5.jinja), from vLLM's tests/tool_parsers/test_minicpm5xml_tool_parser.py and from
llama.cpp's common/parsers/minicpm5.cpp (CDATA values, `<function` as the call's token)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.packs import TEMPLATES, resolve_pack
from engine.chat.request import Message
from engine.parse.events import ToolCall
from engine.parse.families import minicpm5
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
REAL = "openbmb-MiniCPM5-1B.jinja"


def _value(v) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def call(name: str, args: dict) -> str:
    """One call as the template writes it (values here need no CDATA)."""
    params = "".join(f'<param name="{k}">{_value(v)}</param>' for k, v in args.items())
    return f'<function name="{name}">{params}</function>'


def typed(key: str, raw: str) -> str:
    return call("get_weather", {key: raw})


FAMILY = Family("minicpm5", call, '<function name="get_weather"><oops>x</oops></function>',
                typed=typed)

WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "date": {"type": "string"}},
    "required": ["city"]}}},
           {"type": "function", "function": {"name": "sum_values", "parameters": {
               "type": "object", "properties": {"nums": {"type": "array"},
                                                "exact": {"type": "boolean"}}}}}]


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    kw.setdefault("tools", WEATHER)
    return parse_all_ways(text, family="minicpm5", **kw)


def calls(res) -> list:
    return [(c.name, c.arguments) for c in res.tool_calls]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# --- what the real template writes ---------------------------------------------------------------


def test_the_pack_renders_a_turn_the_parser_reads_back():
    """Thinking on: the prompt opens `<think>`; the history shows the reasoning, the answer,
    then each call on its own line, a value with a newline or `<` in CDATA."""
    pack = resolve_pack("minicpm5", require_model=False)
    tmpl = pack.chat_template()
    ask = [Message("user", "Weather?")]
    turn = Message("assistant", "Checking.", reasoning_content="Need both.", tool_calls=(
        {"id": "c0", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "上海", "date": "a\n<b> & c"}}},
        {"id": "c1", "type": "function",
         "function": {"name": "sum_values", "arguments": {"nums": [1, 2], "exact": False}}}))
    prompt = tmpl.render(ask, tools=WEATHER, enable_thinking=True)
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")
    assert start_state(prompt, "minicpm5") == "reasoning"
    whole = tmpl.render([*ask, turn], tools=WEATHER, enable_thinking=True,
                        add_generation_prompt=False)
    written = whole[len(prompt):].removesuffix("<|im_end|>\n")
    assert "<![CDATA[a\n<b> & c]]>" in written
    res = parse(written, start="reasoning")
    assert (res.reasoning, res.content) == ("Need both.", "Checking.")
    # the template writes non-strings with jinja's str: `False` is a Python literal (repaired)
    assert calls(res) == [("get_weather", {"city": "上海", "date": "a\n<b> & c"}),
                          ("sum_values", {"nums": [1, 2], "exact": False})]
    assert anomalies(res) == {"repaired_call": 1}
    off = tmpl.render(ask, tools=WEATHER, enable_thinking=False)
    assert off.endswith("<think>\n\n</think>\n\n") and start_state(off, "minicpm5") == "content"


def test_detected_from_its_template():
    text = (TEMPLATES / "minicpm5.jinja").read_text("utf-8")
    assert detect(text).family == "minicpm5"


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/templates (the real templates)")
def test_only_minicpm5s_own_template_is_detected_as_minicpm5():
    found = {p.name for p in SHARED.glob("*.jinja")
             if detect(p.read_text("utf-8")).family == "minicpm5"}
    assert found == {REAL}
    assert (SHARED / REAL).read_text("utf-8") == (TEMPLATES / "minicpm5.jinja").read_text("utf-8")


# --- vLLM's cases (tests/tool_parsers/test_minicpm5xml_tool_parser.py) ---------------------------


def test_vllm_single_call_with_surrounding_text():
    res = parse('Intro before.\n<function name="get_weather"><param name="city">上海</param>'
                '<param name="date">2024-06-27</param></function>\nOutro after.\n')
    assert calls(res) == [("get_weather", {"city": "上海", "date": "2024-06-27"})]
    # vLLM drops the text; Prism keeps it, less the newlines around the call (the call's own)
    assert res.content == "Intro before.Outro after.\n"


def test_vllm_cdata_multiline():
    res = parse('<function name="get_weather"><param name="city"><![CDATA[北\n京]]></param>'
                '<param name="date">2024-06-27</param></function>\n')
    assert calls(res) == [("get_weather", {"city": "北\n京", "date": "2024-06-27"})]
    assert not anomalies(res)


def test_vllm_collapsed_tags_are_read_and_counted():
    res = parse('<functionname="get_weather"><paramname="city">上海</param>'
                '<paramname="date">2024-06-27</param></function>\n')
    assert calls(res) == [("get_weather", {"city": "上海", "date": "2024-06-27"})]
    assert anomalies(res) == {"repaired_call": 1}


def test_vllm_non_string_types():
    res = parse('<function name="sum_values"><param name="nums">[1, 2, 3]</param>'
                '<param name="exact">true</param></function>\n')
    assert calls(res) == [("sum_values", {"nums": [1, 2, 3], "exact": True})]


def test_vllm_multiple_calls_interleaved_text():
    res = parse('Head\n<function name="get_weather"><param name="city">北京</param></function>\n'
                'TXT\n<function name="sum_values"><param name="nums">[7,8,9]</param>'
                '<param name="exact">false</param></function>\nTail\n')
    assert calls(res) == [("get_weather", {"city": "北京"}),
                          ("sum_values", {"nums": [7, 8, 9], "exact": False})]
    assert res.content == "HeadTXTTail\n"


def test_vllm_incomplete_call_is_text():
    text = '<function name="get_weather"><param name="city">北京</param>'
    res = parse(text)
    assert res.tool_calls == () and res.content == text
    assert anomalies(res) == {"unfinished_call": 1}


def test_vllm_param_without_a_name_is_malformed():
    text = ('<function name="get_weather"><param>北京</param>'
            '<param name="date">2024-06-27</param></function>\n')
    res = parse(text)
    assert res.tool_calls == () and anomalies(res) == {"malformed_call": 1}
    assert res.content == text


def test_vllm_zero_params_and_unknown_tools():
    assert calls(parse('<function name="noop"></function>\n', tools=())) == [("noop", {})]
    res = parse('<function name="unknown"><param name="x">1</param></function>\n')
    assert calls(res) == [("unknown", {"x": 1})]  # vLLM returns it as text
    assert anomalies(res) == {"unknown_tool": 1}


def test_duplicate_parameter_keeps_its_first_value():
    res = parse('<function name="get_weather"><param name="city">北京</param>'
                '<param name="city">上海</param></function>')
    assert calls(res) == [("get_weather", {"city": "北京"})]  # vLLM refuses the call


# --- llama.cpp's parser (common/parsers/minicpm5.cpp) ------------------------------------------


def test_llama_cpp_cdata_may_hold_a_closing_tag():
    res = parse('<function name="get_weather"><param name="city">'
                '<![CDATA[a</param></function>b]]></param></function>')
    assert calls(res) == [("get_weather", {"city": "a</param></function>b"})]


def test_llama_cpp_reasoning_then_calls():
    res = parse('Plan the call.\n</think>\n\n<function name="get_weather"><param name="city">'
                'Paris</param></function>', start="reasoning")
    assert res.reasoning == "Plan the call." and res.content == ""
    assert calls(res) == [("get_weather", {"city": "Paris"})]


# --- the family's own rules --------------------------------------------------------------------


def test_several_cdata_sections_join_and_text_outside_is_not_unescaped():
    res = parse('<function name="get_weather"><param name="city"><![CDATA[a]]]]><![CDATA[>b]]>'
                '</param><param name="date">x &amp; y</param></function>')
    assert calls(res) == [("get_weather", {"city": "a]]>b", "date": "x &amp; y"})]


def test_one_edge_newline_outside_cdata_is_stripped():
    res = parse('<function name="get_weather">\n<param name="city">\nParis\n</param>\n'
                '<param name="date">\n<![CDATA[\nx\n]]>\n</param>\n</function>')
    assert calls(res) == [("get_weather", {"city": "Paris", "date": "\nx\n"})]


def test_a_call_in_the_reasoning_ends_it_only_at_a_line_start():
    c = call("get_weather", {"city": "Paris"})
    res = parse("I will write " + c + " now.\n</think>\nok", start="reasoning")
    assert res.tool_calls == () and res.reasoning == "I will write " + c + " now."
    res = parse("I will call it.\n" + c, start="reasoning")
    assert calls(res) == [("get_weather", {"city": "Paris"})]
    assert anomalies(res) == {"implicit_reasoning_end": 1}


def test_other_function_tags_are_text():
    for text in ("<functions> are listed", "<function=get_weather>\n</function>",
                 '<function name="get_weather"> is the tag'):
        res = parse(text)
        assert res.tool_calls == () and res.content == text, text


def test_the_writer_puts_markup_characters_in_cdata():
    tc = ToolCall("c", "get_weather", {"city": "a]]>b <c>\n", "date": "plain", "n": {"k": "<"}}, 0)
    text = minicpm5.FAMILY.writer.write_call(tc)
    assert text == ('<function name="get_weather"><param name="city"><![CDATA[a]]]]><![CDATA[>b '
                    '<c>\n]]></param><param name="date">plain</param><param name="n">'
                    '<![CDATA[{"k": "<"}]]></param></function>')
    assert calls(parse(text, tools=())) == [("get_weather", tc.arguments)]


def test_reader_directly():
    body = ' name="f"><param name="k"><![CDATA[v]]></param></function>'
    p = read_all_ways(minicpm5, body + "tail")
    assert (p.name, p.arguments, p.end) == ("f", {"k": "v"}, len(body))
    assert minicpm5.match_opener('name="f">', 0) == minicpm5.FULL
    assert minicpm5.match_opener('name="f', 0) == minicpm5.PREFIX
    assert minicpm5.match_opener('name="">', 0) == minicpm5.NONE


def test_start_state_stops_and_tokens():
    assert start_state("<|im_start|>assistant\n<think>\n", "minicpm5") == "reasoning"
    assert start_state("<|im_start|>assistant\n", "minicpm5") == "content"
    assert minicpm5.FAMILY.stops == ("<|im_end|>",)
    assert {"<function", "<param", "</param>", "</function>"} <= set(
        minicpm5.FAMILY.preserved_tokens)
