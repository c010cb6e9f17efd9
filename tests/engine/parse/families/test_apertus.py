"""engine/parse/families/apertus.py (Apertus 8B / 70B Instruct): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The outputs are what Apertus-8B-Instruct.jinja writes for an assistant
turn, llama.cpp's tests/test-chat.cpp (test_apertus_parser), vLLM's
tests/tool_parsers/test_apertus_tool_parser.py and SGLang's Apertus2509Detector tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.detect import detect, start_state
from engine.parse.events import ToolCall
from engine.parse.families import apertus as a
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "special_function", "parameters": {
        "type": "object", "properties": {"arg1": {"type": "integer"}}}}}]
REAL = Path(__file__).resolve().parents[5] / "shared" / "templates"  # the real ones


def elem(name: str, args) -> str:
    body = args if isinstance(args, str) else json.dumps(args)
    return "{" + json.dumps(name) + ": " + body + "}"


def call(name: str, args: dict) -> str:
    return a.TOOLS + "[" + elem(name, args) + "]" + a.TOOLS_END


FAMILY = Family("apertus", call, a.TOOLS + '[{"get_weather": {"city": Paris}}]' + a.TOOLS_END,
                think=(a.INNER, a.INNER_END))


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family="apertus", tools=TOOLS, **kw)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# --- llama.cpp's test_apertus_parser ------------------------------------------------------------

SPECIAL = '<|tools_prefix|>[{"special_function": {"arg1": 1}}]<|tools_suffix|>'


@pytest.mark.parametrize(("text", "reasoning", "content", "calls"), [
    ("Hello, world!\nWhat's up?", "", "Hello, world!\nWhat's up?", 0),
    ("<|inner_prefix|>I'm\nthinking<|inner_suffix|>Hello, world!\nWhat's up?", "I'm\nthinking",
     "Hello, world!\nWhat's up?", 0),
    (SPECIAL, "", "", 1),
    ("<|inner_prefix|>I'm\nthinking<|inner_suffix|>" + SPECIAL, "I'm\nthinking", "", 1),
    (SPECIAL + "Hello, world!\nWhat's up?", "", "Hello, world!\nWhat's up?", 1),
    ("<|inner_prefix|>I'm\nthinking<|inner_suffix|>" + SPECIAL + "Hello, world!\nWhat's up?",
     "I'm\nthinking", "Hello, world!\nWhat's up?", 1),
])
def test_llama_cpp_cases(text, reasoning, content, calls):
    res = parse(text)
    assert (res.reasoning, res.content) == (reasoning, content)
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("special_function", {"arg1": 1})] * calls
    assert not anomalies(res)


# --- vLLM's and SGLang's cases ------------------------------------------------------------------


def test_several_calls_in_one_list_and_text_around_them():
    text = ("before" + a.TOOLS + "[" + elem("get_weather", {"city": "Paris"}) + ", "
            + elem("now", {}) + "]" + a.TOOLS_END + "after")
    res = parse(text, stream_tools=True)
    assert [(c.name, c.arguments, c.index) for c in res.tool_calls] == [
        ("get_weather", {"city": "Paris"}, 0), ("now", {}, 1)]
    assert res.content == "beforeafter" and not anomalies(res)


def test_nested_arguments_and_whitespace_before_the_suffix():
    args = {"nested": {"inner": "value"}, "list": ["a", "b"]}
    res = parse(a.TOOLS + "[ " + elem("get_weather", args) + " ]  " + a.TOOLS_END)
    assert res.tool_calls[0].arguments == args and res.content == ""


def test_null_arguments_are_a_repaired_call_without_arguments():
    res = parse(a.TOOLS + '[{"get_weather": {"city": "Paris"}}, {"now": null}]' + a.TOOLS_END,
                stream_tools=True)
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("get_weather", {"city": "Paris"}), ("now", {})]
    assert anomalies(res) == {"repaired_call": 1}


def test_an_element_that_is_no_call_ends_the_list_as_text():
    # SGLang skips the `{}`; here the list's rest is the answer's text, counted
    text = a.TOOLS + '[{"get_weather": {"city": "Paris"}}, {}, {"now": {}}]' + a.TOOLS_END
    res = parse(text)
    assert [c.name for c in res.tool_calls] == ["get_weather"]
    assert res.content == ' {}, {"now": {}}]' + a.TOOLS_END
    assert anomalies(res) == {"malformed_call": 1}


def test_a_complete_list_without_the_suffix_is_a_call_an_incomplete_one_text():
    res = parse(a.TOOLS + '[{"get_weather": {"city": "London"}}]')
    assert len(res.tool_calls) == 1 and not anomalies(res)
    text = a.TOOLS + '[{"get_weather": {"city": "London"}}'
    res = parse(text)
    assert res.tool_calls == () and res.content == text
    assert anomalies(res) == {"unfinished_call": 1}


def test_not_a_list_of_objects_is_plain_text():
    for text in (a.TOOLS + "[invalid json " + a.TOOLS_END, a.TOOLS + '{"get_weather": {}}'):
        res = parse(text)
        assert res.tool_calls == () and res.content == text and not anomalies(res)


def test_a_call_inside_the_deliberation():
    # at a line start it ends the reasoning; right after the text it stays reasoning (rule 3)
    res = parse("Let me check.\n" + call("get_weather", {"city": "Paris"}), start="reasoning")
    assert res.reasoning == "Let me check." and len(res.tool_calls) == 1
    assert anomalies(res) == {"implicit_reasoning_end": 1}
    text = "Let me check." + call("get_weather", {"city": "Paris"})
    res = parse(text + a.INNER_END + "Done.", start="reasoning")
    assert (res.reasoning, res.content, res.tool_calls) == (text, "Done.", ())


def test_reader_directly():
    body = '[{"f": {"q": [1]}} , {"g": {}}] ' + a.TOOLS_END
    p = read_all_ways(a, body + "tail")
    assert (p.name, p.arguments, p.end) == ("f", {"q": [1]}, len('[{"f": {"q": [1]}} ,'))
    nxt = p.follow()
    nxt.feed(body[p.end:] + "tail")
    nxt.finish()
    assert (nxt.name, nxt.arguments, nxt.end) == ("g", {}, len(body) - p.end)
    p = read_all_ways(a, '[{"bad\\"name": {}}]')
    assert p.error == "bad function name"


def test_writer_writes_one_list():
    fam = a.FAMILY
    calls = [ToolCall("c0", "f", {"x": 1}, 0), ToolCall("c1", "g", {}, 1)]
    assert fam.writer.write("r", "a", calls) == (
        '<|inner_prefix|>r<|inner_suffix|>a<|tools_prefix|>[{"f": {"x": 1}}, {"g": {}}]'
        "<|tools_suffix|>")


# --- detection, the prompt, the pack ------------------------------------------------------------


@pytest.mark.skipif(not REAL.is_dir(), reason="needs ../shared/templates (the real templates)")
def test_the_real_template_is_detected():
    assert detect((REAL / "Apertus-8B-Instruct.jinja").read_text()).family == "apertus"


def test_the_pack_prompt_leaves_the_model_in_the_answer_and_thinking_is_asked_for():
    from engine.chat.packs import resolve_pack
    from engine.chat.request import Message

    pack = resolve_pack("apertus", require_model=False)
    tmpl = pack.chat_template()
    # The template writes each tool's description: it fails on a tool without one (as it does
    # in transformers).
    tools = [{"type": "function", "function": {**t["function"], "description": "d"}}
             for t in TOOLS]
    for thinking, said in ((True, "Deliberation: enabled"), (False, "Deliberation: disabled")):
        prompt = tmpl.render([Message("user", "Hi")], tools=tools, enable_thinking=thinking)
        assert said in prompt and prompt.endswith("<|assistant_start|>")
        assert start_state(prompt, "apertus") == "content"
    assert pack.stop == ("<|assistant_end|>",) and not pack.thinking
