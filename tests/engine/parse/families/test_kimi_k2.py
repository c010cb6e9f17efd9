"""engine/parse/families/kimi_k2.py (Kimi K2, K2-Thinking): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. K2-Thinking's calls right after its reasoning come from its real
template (/work/shared/templates/Kimi-K2-Thinking.jinja) and llama.cpp's tests of it
(tests/test-chat.cpp, "Kimi-K2-Thinking tests")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.request import Message
from engine.chat.template import ChatTemplate
from engine.parse.families import kimi_k2 as k
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family, quoted_markup_stays_text
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
needs_templates = pytest.mark.skipif(not SHARED.is_dir(),
                                     reason="needs ../shared/templates (the real templates)")


def one(name: str, args: dict, idx: int = 0) -> str:
    return f"{k.CALL}functions.{name}:{idx}{k.ARG}{json.dumps(args)}{k.CALL_END}"


def call(name: str, args: dict) -> str:
    return k.SECTION + one(name, args) + k.SECTION_END


FAMILY = Family("kimi-k2", call, k.SECTION + k.CALL + "functions.get_weather:0" + k.ARG
                + '{"city": "Paris",}' + k.CALL_END + k.SECTION_END)


# Every rule, but a call mentioned mid-sentence in the reasoning: Kimi's section is a special
# token, a call there (`Markers.inline_calls`); see test_quoted_markup below for the rest.
@pytest.mark.parametrize("rule", [r for r in RULES if r is not quoted_markup_stays_text],
                         ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


def test_quoted_markup():
    """family_rules.quoted_markup_stays_text, less its mid-sentence case: fenced or in inline
    code in the answer, or fenced in the reasoning, a call stays text."""
    text = call("get_weather", {"city": "Paris"})
    for quoted in ("The format: `" + text + "` and so on.", "```\n" + text + "\n```"):
        res = parse_all_ways(quoted, family="kimi-k2", start="content")
        assert res.tool_calls == () and res.content == quoted
    fenced = "Like this:\n```\n" + text + "\n```"
    res = parse_all_ways(fenced + "\n</think>\nok", family="kimi-k2", start="reasoning")
    assert res.tool_calls == () and (res.reasoning, res.content) == (fenced, "ok")


def test_several_calls_in_one_section():
    text = k.SECTION + one("a", {"x": 1}, 0) + one("b", {}, 1) + k.SECTION_END + "\nDone."
    res = parse_all_ways(text, family="kimi-k2", start="content")
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
    res = parse_all_ways(text, family="kimi-k2", start="content")
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
    res = parse_all_ways(text, family="kimi-k2", start="content")
    assert [(c.id, c.name) for c in res.tool_calls] == [("functions.get_weather:3",
                                                          "get_weather")]


# --- K2-Thinking: the call right after the reasoning, on the same line (issue 19, item 2.3) --

SPECIAL = [{"type": "function", "function": {"name": "special_function", "parameters": {
    "type": "object", "properties": {"arg1": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "python", "parameters": {
        "type": "object", "properties": {"code": {"type": "string"}}}}}]
TWO = [("special_function", {"arg1": 1}), ("python", {"code": "print('hey')"})]
TWO_CALLS = one("special_function", {"arg1": 1}, 0) + one("python", {"code": "print('hey')"}, 1)


def calls(res) -> list:
    return [(c.name, c.arguments) for c in res.tool_calls]


@pytest.mark.parametrize("text", [
    # llama.cpp tests/test-chat.cpp, Kimi-K2-Thinking: "Multiple tool calls with reasoning,
    # call *inside thinking block*", and the same "*without section markers or end markers*"
    "<think>I need to call two functions" + k.SECTION + TWO_CALLS + k.SECTION_END,
    "<think>I need to call two functions" + TWO_CALLS.replace(k.CALL_END, ""),
])
def test_a_call_right_after_the_reasoning_text_ends_it(text):
    res = parse_all_ways(text, family="kimi-k2", start="content", tools=SPECIAL)
    assert (res.reasoning, res.content) == ("I need to call two functions", "")
    assert calls(res) == TWO and anomalies(res) == {"implicit_reasoning_end": 1}
    assert [c.id for c in res.tool_calls] == ["functions.special_function:0", "functions.python:1"]


@pytest.mark.parametrize(("text", "implicit"), [
    # ... right after `<think>`, and right after `</think>` ("Multiple tool calls with reasoning")
    ("<think>" + k.SECTION + TWO_CALLS + k.SECTION_END, 1),
    ("<think>I need to call two functions</think>" + k.SECTION + TWO_CALLS + k.SECTION_END, 0),
])
def test_a_section_right_after_think_or_its_closer(text, implicit):
    res = parse_all_ways(text, family="kimi-k2", start="content", tools=SPECIAL)
    assert calls(res) == TWO and res.content == ""
    assert anomalies(res) == ({"implicit_reasoning_end": 1} if implicit else {})


def test_an_unfinished_section_mid_line_goes_back_to_the_reasoning():
    text = "Thinking about " + k.SECTION + k.CALL + "functions.special_function:0" + k.ARG + '{"ar'
    res = parse_all_ways(text, family="kimi-k2", start="reasoning", tools=SPECIAL)
    assert res.tool_calls == () and res.reasoning == text
    assert anomalies(res) == {"unfinished_call": 1}


@needs_templates
def test_what_the_thinking_template_writes_is_read_back():
    source = (SHARED / "Kimi-K2-Thinking.jinja").read_text("utf-8")
    assert detect(source).family == "kimi-k2"
    tpl = ChatTemplate(source, family="kimi-k2")
    ask = Message("user", "Run both.")
    prompt = tpl.render([ask], tools=SPECIAL)
    assert prompt.endswith("<|im_middle|>") and start_state(prompt, "kimi-k2") == "content"
    turn = Message("assistant", "", reasoning_content="I need to call two functions",
                   tool_calls=tuple({"id": f"functions.{n}:{i}", "type": "function",
                                     "function": {"name": n, "arguments": a}}
                                    for i, (n, a) in enumerate(TWO)))
    whole = tpl.render([ask, turn], tools=SPECIAL, add_generation_prompt=False)
    text = whole[whole.rindex("<|im_middle|>") + len("<|im_middle|>"):].removesuffix("<|im_end|>")
    assert "functions</think>" + k.SECTION in text  # no newline before the section
    res = parse_all_ways(text, family="kimi-k2", start="content", tools=SPECIAL)
    assert (res.reasoning, res.content) == ("I need to call two functions", "")
    assert calls(res) == TWO and not anomalies(res)
    # the same turn had the model not closed its reasoning
    res = parse_all_ways(text.replace("</think>", ""), family="kimi-k2", start="content",
                         tools=SPECIAL)
    assert res.reasoning == "I need to call two functions" and calls(res) == TWO
