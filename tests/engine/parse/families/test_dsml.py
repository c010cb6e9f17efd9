"""engine/parse/families/dsml.py (DeepSeek V3.2, V4): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. V4's `<｜DSML｜tool_calls>` section comes from its real templates
(/work/shared/templates: deepseek-ai-DeepSeek-V4.jinja, deepseek-ai-DeepSeek-V4-Flash-0731.jinja)
and llama.cpp's tests of them (tests/test-chat.cpp, "DeepSeek V4 tests")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.request import Message
from engine.chat.template import ChatTemplate
from engine.parse.families import dsml
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
V4_TEMPLATES = ("deepseek-ai-DeepSeek-V4.jinja", "deepseek-ai-DeepSeek-V4-Flash-0731.jinja")
needs_templates = pytest.mark.skipif(not SHARED.is_dir(),
                                     reason="needs ../shared/templates (the real templates)")


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


def call_v4(name: str, args: dict) -> str:
    """The same call in V4's section, as its template writes it."""
    return (call(name, args).replace(dsml.SECTION, dsml.SECTION_V4)
            .replace(dsml.SECTION_END, dsml.SECTION_END_V4))


def typed(key: str, raw: str) -> str:
    return (f'{dsml.SECTION}\n{dsml.INVOKE}get_weather">\n{dsml.PARAM}{key}">{raw}'
            f"{dsml.PARAM_END}\n{dsml.INVOKE_END}\n{dsml.SECTION_END}")


FAMILY = Family("dsml", call, f'{dsml.SECTION}\n{dsml.INVOKE}get_weather">\n<oops>\n'
                f"{dsml.INVOKE_END}", typed=typed)


def typed_v4(key: str, raw: str) -> str:
    return (typed(key, raw).replace(dsml.SECTION, dsml.SECTION_V4)
            .replace(dsml.SECTION_END, dsml.SECTION_END_V4))


FAMILY_V4 = Family("dsml", call_v4, f'{dsml.SECTION_V4}\n{dsml.INVOKE}get_weather">\n<oops>\n'
                   f"{dsml.INVOKE_END}", typed=typed_v4)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
@pytest.mark.parametrize("fam", [FAMILY, FAMILY_V4], ids=["v3.2", "v4"])
def test_rule(rule, fam):
    rule(fam)


def test_string_attribute_decides_over_the_schema():
    text = (f'{dsml.SECTION}{dsml.INVOKE}get_weather">{dsml.PARAM}days" string="true">3'
            f'{dsml.PARAM_END}{dsml.PARAM}city" string="false">["a"]{dsml.PARAM_END}'
            f"{dsml.INVOKE_END}{dsml.SECTION_END}")
    res = parse_all_ways(text, family="dsml", start="content", tools=[])
    assert res.tool_calls[0].arguments == {"days": "3", "city": ["a"]}


def test_several_invokes_in_one_section():
    two = (f'{dsml.SECTION}\n{dsml.INVOKE}a">\n{dsml.INVOKE_END}\n{dsml.INVOKE}b">\n'
           f"{_param('x', 1)}{dsml.INVOKE_END}\n{dsml.SECTION_END}")
    res = parse_all_ways(two, family="dsml", start="content")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("a", {}), ("b", {"x": 1})]
    assert res.content == ""


def test_reader_directly():
    body = f'\n{dsml.INVOKE}f">\n{_param("k", "v")}{dsml.INVOKE_END}\n{dsml.SECTION_END}'
    p = read_all_ways(dsml, body + "tail")
    assert (p.name, p.arguments, p.end) == ("f", {"k": "v"}, len(body))


# --- DeepSeek V4's `<｜DSML｜tool_calls>` section (issue 19, item 2.1) ---------------------------

GET_TIME = [{"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
TOKYO = (f"{dsml.SECTION_V4}\n{dsml.INVOKE}get_time\">\n"
         f'{dsml.PARAM}city" string="true">Tokyo{dsml.PARAM_END}\n{dsml.INVOKE_END}\n'
         f"{dsml.SECTION_END_V4}")


def test_v4_section_after_the_reasoning_is_the_calls_markup():
    # llama.cpp tests/test-chat.cpp, DeepSeek V4 "Thinking + tool call (single, string param)"
    res = parse_all_ways("Let me check the time</think>\n\n" + TOKYO, family="dsml",
                         start="reasoning", tools=GET_TIME)
    assert (res.reasoning, res.content) == ("Let me check the time", "")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("get_time", {"city": "Tokyo"})]
    assert res.finish_reason == "tool_calls" and not anomalies(res)


def test_v4_section_in_unclosed_reasoning_ends_it_with_its_opener():
    # llama.cpp tests/test-chat.cpp, the last DeepSeek V4 case: "no </think> after the TC close"
    res = parse_all_ways("Let me check the time\n\n" + TOKYO, family="dsml", start="reasoning",
                         tools=GET_TIME)
    assert (res.reasoning, res.content) == ("Let me check the time", "")
    assert [c.arguments for c in res.tool_calls] == [{"city": "Tokyo"}]
    assert anomalies(res) == {"implicit_reasoning_end": 1}
    assert dsml.SECTION_V4 in res.tool_calls[0].raw and dsml.SECTION_END_V4 in res.tool_calls[0].raw


def test_v4_answer_then_several_invokes_in_one_section():
    # llama.cpp tests/test-chat.cpp, DeepSeek V4 "Tool call with content before tool calls" and
    # "Multiple parallel tool calls with reasoning"
    two = (f"{dsml.SECTION_V4}\n{dsml.INVOKE}get_time\">\n"
           f'{dsml.PARAM}city" string="true">Paris{dsml.PARAM_END}\n{dsml.INVOKE_END}\n'
           f'{dsml.INVOKE}get_weather">\n{dsml.PARAM}city" string="true">Paris{dsml.PARAM_END}\n'
           f"{dsml.INVOKE_END}\n{dsml.SECTION_END_V4}")
    res = parse_all_ways("Thinking about it</think>Let me call the function.\n\n" + two,
                         family="dsml", start="reasoning")
    assert (res.reasoning, res.content) == ("Thinking about it", "Let me call the function.")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("get_time", {"city": "Paris"}), ("get_weather", {"city": "Paris"})]


def test_v4_flash_separator_belongs_to_the_call():
    # llama.cpp tests/test-chat.cpp, deepseek-ai-DeepSeek-V4-Flash-0731.jinja: "The DSML
    # separator belongs to the tool call block, not assistant content."
    text = ("\n\n" + f"{dsml.SECTION_V4}\n{dsml.INVOKE}special_function\">\n"
            + _param("arg1", 1) + f"{dsml.INVOKE_END}\n{dsml.SECTION_END_V4}")
    res = parse_all_ways(text, family="dsml", start="content")
    assert res.content == "" and [c.arguments for c in res.tool_calls] == [{"arg1": 1}]


@needs_templates
@pytest.mark.parametrize("name", V4_TEMPLATES)
def test_what_the_v4_templates_write_is_read_back(name):
    source = (SHARED / name).read_text("utf-8")
    assert detect(source).family == "dsml"
    tpl = ChatTemplate(source, bos_token="<｜begin▁of▁sentence｜>",
                       eos_token="<｜end▁of▁sentence｜>", family="dsml")
    ask = Message("user", "Time in Tokyo and weather in Paris?")
    for thinking, want in ((True, "reasoning"), (False, "content")):
        prompt = tpl.render([ask], tools=GET_TIME, enable_thinking=thinking)
        assert start_state(prompt, "dsml") == want
    turn = Message("assistant", "Checking.", reasoning_content="Two tools.", tool_calls=(
        {"id": "call_0", "type": "function",
         "function": {"name": "get_time", "arguments": {"city": "Tokyo"}}},
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}))
    whole = tpl.render([ask, turn], tools=GET_TIME, add_generation_prompt=False,
                       enable_thinking=True)
    text = whole[whole.rindex("<｜Assistant｜><think>") + len("<｜Assistant｜><think>"):]
    text = text.removesuffix("<｜end▁of▁sentence｜>")
    assert dsml.SECTION_V4 in text
    res = parse_all_ways(text, family="dsml", start="reasoning", tools=GET_TIME)
    assert (res.reasoning, res.content) == ("Two tools.", "Checking.")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("get_time", {"city": "Tokyo"}), ("get_weather", {"city": "Paris", "days": 2})]
    assert anomalies(res) == {"unknown_tool": 1}  # get_weather was not declared


def test_reader_closes_a_v4_section_too():
    body = f'\n{dsml.INVOKE}f">\n{_param("k", "v")}{dsml.INVOKE_END}\n{dsml.SECTION_END_V4}'
    p = read_all_ways(dsml, body + "tail")
    assert (p.name, p.arguments, p.end) == ("f", {"k": "v"}, len(body))


# DeepSeek V4.1's spaced tags (its encoding/encoding.py; SGLang's `deepseekv41` parser reads
# them), a JSON body inside `invoke` and a self-closing `invoke` (SGLang's DeepSeekV32Detector).
V41 = ('Let me check.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name="get_weather">\n'
       '<｜DSML｜ parameter name="city" string="true">Hangzhou</｜DSML｜ parameter>\n'
       '<｜DSML｜ parameter name="days" string="false">3</｜DSML｜ parameter>\n'
       "</｜DSML｜ invoke>\n</｜DSML｜ calls>")


def test_v41_spaced_tags():
    res = parse_all_ways(V41, family="dsml", start="content")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("get_weather", {"city": "Hangzhou", "days": 3})]
    assert res.content == "Let me check." and not anomalies(res)


def test_json_body_and_self_closing_invoke():
    text = (f'{dsml.SECTION}\n{dsml.INVOKE}get_weather">\n{{"location": "Beijing", "n": [1]}}\n'
            f'{dsml.INVOKE_END}\n{dsml.INVOKE}get_time"/>\n{dsml.INVOKE}ping" />\n'
            f"{dsml.SECTION_END} after")
    res = parse_all_ways(text, family="dsml", start="content")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("get_weather", {"location": "Beijing", "n": [1]}), ("get_time", {}), ("ping", {})]
    assert res.content == " after" and not anomalies(res)


def test_call_quoted_in_backticks_is_never_executed():
    """`<｜DSML｜tool_calls>` quoted in inline backticks, its invokes on the lines after: text,
    in the answer and in the reasoning."""
    call = call_v4("get_weather", {"city": "Paris"})
    text = "Example: `" + call + "` is how it looks."
    res = parse_all_ways(text, family="dsml", start="content")
    assert res.tool_calls == () and res.content == text
    res = parse_all_ways(text + "\n</think>\nok", family="dsml", start="reasoning")
    assert res.tool_calls == () and res.reasoning == text
    # A stray backtick without call markup in it does not quote the next line's call.
    res = parse_all_ways("Use `grep.\n" + call, family="dsml", start="content")
    assert [c.name for c in res.tool_calls] == ["get_weather"]
