"""engine/parse/families/granite.py (Granite 3.3): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The cases come from the real template
(ibm-granite-granite-3.3-2B-Instruct.jinja; the pack's granite.jinja adds the calls of the
history), from llama.cpp's common/chat-parsers (granite: `<think>`, `<response>`,
`<|tool_call|>` + JSON) and from vLLM's tests/tool_parsers/test_granite_tool_parser.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.packs import TEMPLATES, resolve_pack
from engine.chat.request import Message
from engine.parse.families import granite
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
REAL = "ibm-granite-granite-3.3-2B-Instruct.jinja"
OPEN = "<|tool_call|>"


def call(name: str, args: dict) -> str:
    return OPEN + json.dumps([{"name": name, "arguments": args}])


FAMILY = Family("granite", call, OPEN + '[{"name": "get_weather", "arguments": [1]}]')


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family="granite", **kw)


def calls(res) -> list:
    return [(c.name, c.arguments) for c in res.tool_calls]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# --- vLLM's cases (tests/tool_parsers/test_granite_tool_parser.py) ------------------------------


def test_vllm_single_and_parallel_calls():
    res = parse(OPEN + ' [{"name": "get_weather", "arguments": {"city": "Tokyo"}}]')
    assert calls(res) == [("get_weather", {"city": "Tokyo"})] and res.content == ""
    res = parse(OPEN + ' [\n  {"name": "get_weather", "arguments": {"city": "Tokyo"}},\n'
                '  {"name": "get_time", "arguments": {"timezone": "Asia/Tokyo"}}\n]')
    assert calls(res) == [("get_weather", {"city": "Tokyo"}),
                          ("get_time", {"timezone": "Asia/Tokyo"})]
    assert not anomalies(res)


def test_vllm_arguments_before_the_name():
    res = parse(OPEN + ' [{"arguments": {"city": "Tokyo"}, "name": "get_weather"}, '
                '{"arguments": {"timezone": "Asia/Tokyo"}, "name": "get_time"}]')
    assert calls(res) == [("get_weather", {"city": "Tokyo"}),
                          ("get_time", {"timezone": "Asia/Tokyo"})]


def test_vllm_data_types_and_escapes():
    args = {"string_field": "hello", "int_field": 42, "float_field": 3.14, "bool_field": True,
            "null_field": None, "array_field": ["a", "b", "c"], "object_field": {"nested": "v"},
            "empty_array": [], "empty_object": {}, "quoted": 'He said "hello"',
            "path": "C:\\Users\\file.txt", "newline": "line1\nline2", "unicode": "emoji: 🎉"}
    res = parse(OPEN + " " + json.dumps([{"name": "test_function", "arguments": args}],
                                        indent=2, ensure_ascii=False))
    assert calls(res) == [("test_function", args)]


def test_vllm_surrounding_text_stays_the_answer():
    text = (f'Let me check the weather for you.\n{OPEN} [{{"name": "get_weather", "arguments": '
            '{"city": "Tokyo"}}]\nI\'ll get that information.')
    res = parse(text)
    assert calls(res) == [("get_weather", {"city": "Tokyo"})]
    assert res.content == "Let me check the weather for you.I'll get that information."


@pytest.mark.parametrize("text", [
    OPEN + ' [{"name": "func", "arguments": {',
    '[{"name": "func", "arguments": "not a dict"}]',
    'Some text [{"name": "func"}]',
])
def test_vllm_malformed_inputs_are_no_call(text):
    res = parse(text)
    assert res.tool_calls == () and res.content == text


def test_a_bare_object_is_one_call():
    # vLLM refuses it ("not an array"); llama.cpp takes any JSON after <|tool_call|>
    res = parse(OPEN + ' {"name": "func", "arguments": {}}')
    assert calls(res) == [("func", {})]


# --- llama.cpp's (common/chat-parsers granite) and the template's cases -------------------------


def test_thinking_and_the_response_tags():
    res = parse("<think>Let me think.</think><response>It is 4.</response>")
    assert (res.reasoning, res.content) == ("Let me think.", "It is 4.")
    assert not anomalies(res)
    res = parse("<think>Need the weather.</think><response>Checking.</response>"
                + call("get_weather", {"city": "Paris"}))
    assert (res.reasoning, res.content) == ("Need the weather.", "Checking.")
    assert calls(res) == [("get_weather", {"city": "Paris"})]


def test_response_tags_in_the_reasoning_or_quoted_are_text():
    res = parse("Is <response> a tag?\n</think>`<response>` is.", start="reasoning")
    assert (res.reasoning, res.content) == ("Is <response> a tag?", "`<response>` is.")


def test_a_call_in_the_reasoning_ends_it():
    res = parse("I need the weather.\n" + call("get_weather", {"city": "Oslo"}),
                start="reasoning")
    assert res.reasoning == "I need the weather." and calls(res) == [
        ("get_weather", {"city": "Oslo"})]
    assert anomalies(res) == {"implicit_reasoning_end": 1}


def test_a_list_without_its_bracket():
    text = OPEN + '[{"name": "get_weather", "arguments": {}}'
    res = parse(text + "\nDone.")
    assert calls(res) == [("get_weather", {})] and res.content == "Done."
    assert anomalies(res) == {"repaired_call": 1}
    res = parse(text)  # the output ended there: the call is whole
    assert calls(res) == [("get_weather", {})] and not anomalies(res)


def test_a_broken_element_is_text_after_the_good_ones():
    text = OPEN + '[{"name": "a", "arguments": {}}, {"name": 3}]'
    res = parse(text)
    assert [c.name for c in res.tool_calls] == ["a"]
    assert res.anomalies["malformed_call"] == 1 and res.content.endswith('{"name": 3}]')


def test_reader_directly():
    p = read_all_ways(granite, '[{"name": "f", "arguments": {"a": 1}} , {"name": "g"}] tail')
    assert (p.name, p.arguments) == ("f", {"a": 1})
    assert p.end == len('[{"name": "f", "arguments": {"a": 1}} ,') and p.follow() is not None


def test_what_the_pack_template_writes_is_read_back():
    pack = resolve_pack("granite", require_model=False)
    tmpl = pack.chat_template()
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}
    ask = [Message("user", "Weather in Paris and Lyon?")]
    turn = Message("assistant", "Checking.", tool_calls=tuple(
        {"id": f"c{i}", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": c}}}
        for i, c in enumerate(("Paris", "Lyon"))))
    prompt = tmpl.render(ask, tools=[tool])
    assert prompt.endswith("<|start_of_role|>assistant<|end_of_role|>")
    assert start_state(prompt, "granite") == "content"
    whole = tmpl.render([*ask, turn], tools=[tool], add_generation_prompt=False)
    written = whole[len(prompt):].removesuffix("<|end_of_text|>\n")
    res = parse(written, tools=[tool])
    assert res.content == "Checking." and calls(res) == [
        ("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Lyon"})]
    # thinking on: the instruction for <think> and <response> (no system message, no tools)
    thinking = tmpl.render(ask, enable_thinking=True)
    assert "<think></think>" in thinking and start_state(thinking, "granite") == "content"


def test_detected_by_its_call_token_only():
    assert detect((TEMPLATES / "granite.jinja").read_text("utf-8")).family == "granite"
    assert detect("{{ '<|start_of_role|>' }}<tool_call>").family == "hermes-json"


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/templates (the real templates)")
def test_granite_3_3_is_granite_and_granite_4_stays_hermes():
    found = {p.name for p in SHARED.glob("*.jinja")
             if detect(p.read_text("utf-8")).family == "granite"}
    assert found == {REAL}
    for name in ("ibm-granite-granite-4.0.jinja", "ibm-granite-granite-4.1.jinja"):
        assert detect((SHARED / name).read_text("utf-8")).family == "hermes-json", name
