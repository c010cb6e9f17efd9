"""engine/parse/families/gemma4.py (Gemma 4): every parser rule
(tests/engine/parse/family_rules.py), the family's value syntax and its own cases, each parsed at
every chunking, stream_tools off and on. The empty and doubled thought blocks come from the real
templates (/work/shared/templates: google-gemma-4-31B-it.jinja, google-gemma-4-31B-it-interleaved
.jinja) and llama.cpp's tests of them (tests/test-chat.cpp, Gemma 4 "Edge cases")."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.request import Message
from engine.chat.template import ChatTemplate
from engine.parse.families import gemma4
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
TEMPLATES = ("google-gemma-4-31B-it.jinja", "google-gemma-4-31B-it-interleaved.jinja")
needs_templates = pytest.mark.skipif(not SHARED.is_dir(),
                                     reason="needs ../shared/templates (the real templates)")

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
    res = parse_all_ways(call("f", args), family="gemma4", start="content")
    assert res.tool_calls[0].arguments == args


def test_json_strings_and_quoted_keys_are_read_too():
    text = f'{gemma4.CALL}call:f{{"a b":"x\\n", {Q}c{Q}: 1}}{gemma4.CALL_END}'
    res = parse_all_ways(text, family="gemma4", start="content")
    assert res.tool_calls[0].arguments == {"a b": "x\n", "c": 1}


def test_thought_then_call():
    text = f"{gemma4.THOUGHT}\nNeed data.{gemma4.THOUGHT_END}Checking.\n" + call("f", {"a": 1})
    res = parse_all_ways(text, family="gemma4", start="content")
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


# --- empty and doubled thought blocks (issue 19, item 2.4) ------------------------------------

ASSIST = "Hello, world!\nWhat's up?"  # llama.cpp's message_assist


@pytest.mark.parametrize(("text", "stray"), [
    # llama.cpp tests/test-chat.cpp, Gemma 4: "Empty reasoning (budget=0: sampler forces end tag
    # before newline)" and the four "Edge cases", each expecting message_assist
    ("<|channel>thought<channel|>" + ASSIST, 0),
    ("<|channel>thought\n<channel|>" + ASSIST + "<channel|>", 1),
    ("<|channel>thought\n<channel|>" + ASSIST + "<|channel>thought\n<channel|>", 0),
    ("<|channel>thought\n<channel|>" + ASSIST + "<|channel>thought\n<channel|><channel|>", 1),
    ("<|channel><|channel>thought\n<channel|>" + ASSIST, 0),
])
def test_empty_and_doubled_thought_blocks_leave_the_answer(text, stray):
    for start in ("content", "reasoning"):
        res = parse_all_ways(text, family="gemma4", start=start)
        assert (res.reasoning, res.content, res.tool_calls) == ("", ASSIST, ())
        assert anomalies(res) == ({"stray_think_end": stray} if stray else {})


def test_a_thought_block_in_the_answer_is_reasoning_and_a_doubled_opener_is_markup():
    text = (f"{gemma4.THOUGHT}\nFirst.{gemma4.THOUGHT_END}Partly.{gemma4.THOUGHT}\n"
            f"{gemma4.THOUGHT}\nSecond.{gemma4.THOUGHT_END} Done." + call("f", {"a": 1}))
    res = parse_all_ways(text, family="gemma4", start="content")
    assert (res.reasoning, res.content) == ("First.Second.", "Partly. Done.")
    assert [c.arguments for c in res.tool_calls] == [{"a": 1}] and not anomalies(res)


def test_a_quoted_thought_opener_in_the_answer_stays_text():
    for quoted in (f"Write `{gemma4.THOUGHT}` to think.", f"```\n{gemma4.THOUGHT}\n```"):
        res = parse_all_ways(quoted, family="gemma4", start="content")
        assert (res.reasoning, res.content) == ("", quoted)


def test_header_reader_directly():
    read = gemma4.read_header
    assert read("<|channel>thought\n", 0, False) == (2, len("<|channel>thought"), "reasoning")
    assert read("<|channel><|channel>thought", 0, False)[:2] == (2, len("<|channel>") * 2 + 7)
    assert read("<|channel><|cha", 0, False)[0] == 1 and read("<|channel><|cha", 0, True)[0] == 0
    assert read("<|channel>final", 0, False)[0] == 0 and read("<|chan", 0, False)[0] == 1


@needs_templates
@pytest.mark.parametrize("name", TEMPLATES)
def test_the_templates_empty_thought_prompt_and_an_echo_of_it(name):
    source = (SHARED / name).read_text("utf-8")
    assert detect(source).family == "gemma4"
    tpl = ChatTemplate(source, bos_token="<bos>", family="gemma4")
    ask = Message("user", "Hi")
    off = tpl.render([ask], enable_thinking=False)
    assert off.endswith("<|turn>model\n<|channel>thought\n<channel|>")
    assert start_state(off, "gemma4") == "content"
    assert start_state(tpl.render([ask], enable_thinking=True), "gemma4") == "content"
    # what the model writes after that prompt: the empty block again, then its answer
    res = parse_all_ways("<|channel>thought\n<channel|>" + ASSIST, family="gemma4",
                         start="content")
    assert (res.reasoning, res.content) == ("", ASSIST) and not anomalies(res)
